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


__all__ = ["exact_match", "scores", "by_length", "length_buckets"]
