"""Translation quality: exact match, BLEU and chrF (sacrebleu), overall and by source length.

BLEU (Papineni et al. 2002) and chrF (Popović 2015) are computed with
``sacrebleu`` on detokenised text, so figures are comparable with other tools.
chrF works on characters and suits the numbers corpus, whose German side is one
long word per number; BLEU is reported too, for the sentence corpus.
"""

from __future__ import annotations

from collections.abc import Sequence


def _sacrebleu():
    try:
        import sacrebleu
    except ImportError:  # pragma: no cover - depends on the install
        raise ValueError("BLEU and chrF need sacrebleu: pip install 'attnlab[lab]'") from None
    return sacrebleu


def exact_match(hyps: Sequence[str], refs: Sequence[str]) -> float:
    """Share of hypotheses equal to their reference, in percent."""
    if len(hyps) != len(refs):
        raise ValueError(f"{len(hyps)} hypotheses for {len(refs)} references")
    return 100.0 * sum(h == r for h, r in zip(hyps, refs)) / max(1, len(refs))


def scores(hyps: Sequence[str], refs: Sequence[str]) -> dict[str, float]:
    """{"exact": %, "bleu": BLEU, "chrf": chrF, "n": count}."""
    sb = _sacrebleu()
    hyps, refs = list(hyps), list(refs)
    if not refs:
        return {"exact": 0.0, "bleu": 0.0, "chrf": 0.0, "n": 0}
    return {
        "exact": exact_match(hyps, refs),
        "bleu": sb.corpus_bleu(hyps, [refs]).score,
        "chrf": sb.corpus_chrf(hyps, [refs]).score,
        "n": len(refs),
    }


def intervals(hyps: Sequence[str], refs: Sequence[str], *, resamples: int = 1000, seed: int = 0,
              level: float = 0.95) -> dict[str, tuple[float, float]]:
    """Percentile bootstrap intervals of ``scores``: {"exact" | "bleu" | "chrf": (low, high)}.

    Each resample draws ``len(refs)`` sentences with replacement (seeded) and scores them as a
    corpus, from sacrebleu's per-sentence statistics summed with the resample's counts (the way
    ``sacrebleu --confidence`` does, without scoring the text again).
    """
    import numpy as np

    sb = _sacrebleu()
    hyps, refs = list(hyps), list(refs)
    if len(hyps) != len(refs) or not refs:
        raise ValueError(f"intervals need as many hypotheses as references, at least one; got {len(hyps)} and {len(refs)}")
    rng = np.random.default_rng(seed)
    counts = np.stack([np.bincount(rng.integers(0, len(refs), len(refs)), minlength=len(refs))
                       for _ in range(resamples)]).astype(np.float64)  # (resamples, n)
    tail = 100 * (1 - level) / 2
    out = {"exact": counts @ np.array([100.0 * (h == r) for h, r in zip(hyps, refs)]) / len(refs)}
    for key, metric in (("bleu", sb.BLEU()), ("chrf", sb.CHRF())):
        stats = np.asarray(metric._extract_corpus_statistics(hyps, [refs]), dtype=np.float64)  # (n, statistics)
        out[key] = np.array([metric._compute_score_from_stats([int(round(x)) for x in row]).score
                             for row in counts @ stats])
    return {k: (float(np.percentile(v, tail)), float(np.percentile(v, 100 - tail))) for k, v in out.items()}


def length_buckets(lengths: Sequence[int], n_buckets: int = 5) -> list[tuple[int, int]]:
    """Edges [lo, hi] that split the observed lengths into about equal-count buckets."""
    xs = sorted(lengths)
    if not xs:
        return []
    edges, n = [], len(xs)
    for i in range(n_buckets):
        lo, hi = xs[i * n // n_buckets], xs[min(n - 1, (i + 1) * n // n_buckets - 1)]
        if edges and lo <= edges[-1][1]:
            lo = edges[-1][1] + 1
        if lo <= hi:
            edges.append((lo, hi))
    return edges


def by_length(
    hyps: Sequence[str], refs: Sequence[str], lengths: Sequence[int], buckets: Sequence[tuple[int, int]]
) -> list[dict]:
    """``scores`` per source-length bucket: [{"lo", "hi", "exact", "bleu", "chrf", "n"}, ...]."""
    rows = []
    for lo, hi in buckets:
        sel = [i for i, n in enumerate(lengths) if lo <= n <= hi]
        rows.append({"lo": lo, "hi": hi, **scores([hyps[i] for i in sel], [refs[i] for i in sel])})
    return rows


__all__ = ["exact_match", "scores", "intervals", "by_length", "length_buckets"]
