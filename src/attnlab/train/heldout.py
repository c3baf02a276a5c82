"""A trained model's held-out data, rebuilt from its checkpoint, and its scores there.

``translation_split`` rebuilds a translator's split from the data its config names (same
name, seed and size), so the sentences are those training never saw; ``translate_examples``
decodes them. ``lm_perplexity`` scores a character GPT on the held-out tail of its text.
``evaluate``, ``interpret heads``, the faithfulness experiment and the model cards of the
shipped models (``attnlab.pretrained``) all read their data here.
"""

from __future__ import annotations

import math

import torch

from .load import LoadedModel
from .runtime import Runtime, progress_iter


def translation_split(loaded: LoadedModel, split: str, data_path: str | None = None):
    """(dataset, encoded examples of ``split``) of a translation checkpoint, with its vocabularies."""
    from ..data import Dataset, build_corpus, load_dataset

    sv, tv, d = loaded.vocabs["src_vocab"], loaded.vocabs["tgt_vocab"], loaded.config.get("data")
    if not isinstance(d, dict) or "name" not in d:
        raise ValueError(f"{loaded.path}/config.json does not say which data it was trained on")
    ds = load_dataset(d["name"], n=d.get("n", 20000), seed=d.get("seed", 0), max_digits=d.get("max_digits", 13),
                      path=data_path or d.get("path"))
    ds = Dataset(ds.name, ds.splits, sv.level, tv.level)
    return ds, getattr(build_corpus(ds, sv, tv), split)


def translate_examples(model, examples, tgt_vocab, *, beam: int = 1, runtime: Runtime | None = None,
                       batch_size: int = 64) -> tuple[list[str], list[str], list[int]]:
    """(hypotheses, references, source lengths) for encoded ``(source, target)`` examples, in order.
    Greedy with ``beam=1``, else beam search; batches of similar length; a bar on a terminal."""
    from ..data import source_batch
    from ..data.batching import batches_in_order
    from .decode import beam_search, greedy, length_guard

    rt = runtime or Runtime.local("cpu")
    hyps = [""] * len(examples)
    order = batches_in_order(examples, batch_size)  # batches of similar length; results go back in place
    for idx in progress_iter(order, desc="decode", total=len(order)):
        part = [examples[i] for i in idx]
        src, mask = rt.to(*source_batch([s for s, _ in part]))
        guard = length_guard(len(t) for _, t in part)
        with rt.autocast(), torch.no_grad():
            out = greedy(model, src, mask, max_len=guard) if beam == 1 else \
                beam_search(model, src, mask, beam=beam, max_len=guard)
        for i, h in zip(idx, out):
            hyps[i] = tgt_vocab.decode(h.tokens)
    return hyps, [tgt_vocab.decode(t) for _, t in examples], [len(s) for s, _ in examples]


def lm_held_out(loaded: LoadedModel, text: str) -> torch.Tensor:
    """The character ids of ``text`` that a GPT's training held out (its split, its validation share)."""
    from .lm import split

    val_fraction = float(loaded.config.get("train", {}).get("val_fraction", 0.1))
    return split(loaded.vocabs["vocab"].encode_tensor(text), val_fraction, loaded.model.config.block_size)[1]


def lm_perplexity(loaded: LoadedModel, text: str, *, resamples: int = 1000, seed: int = 0) -> dict:
    """Perplexity per character on the held-out tail of ``text`` (the split training used), over
    non-overlapping windows of the model's block size, each read from its own start; with a
    percentile bootstrap 95 % interval over the windows."""
    import numpy as np

    model = loaded.model
    block = model.config.block_size
    val = lm_held_out(loaded, text)
    n = (len(val) - 1) // block
    x = val[: n * block].view(n, block)
    y = val[1 : n * block + 1].view(n, block)
    sums = []
    with torch.no_grad():
        for i in range(0, n, 32):
            logits = model(x[i : i + 32])  # (b, block, vocab)
            loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), y[i : i + 32].flatten(),
                                                     reduction="none")
            sums.append(loss.view(-1, block).sum(1).double())
    per_window = torch.cat(sums).numpy()  # nats per window
    rng = np.random.default_rng(seed)
    draws = np.stack([per_window[rng.integers(0, n, n)].sum() for _ in range(resamples)]) / (n * block)
    return {"perplexity": math.exp(per_window.sum() / (n * block)),
            "low": float(np.exp(np.percentile(draws, 2.5))), "high": float(np.exp(np.percentile(draws, 97.5))),
            "characters": n * block, "windows": n}


__all__ = ["translation_split", "translate_examples", "lm_held_out", "lm_perplexity"]
