"""``attnlab evaluate --checkpoint DIR``: exact match, BLEU and chrF on a split, and by source length.

The split is rebuilt from the dataset recorded in the checkpoint (same name,
seed and size), so the test sentences are those the training never saw.
"""

from __future__ import annotations

import argparse

from . import VERBS, UsageError
from ._runtime import add_inference_device, inference_runtime
from ._threads import add_threads


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("evaluate", help=VERBS["evaluate"],
                       description=__doc__)
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--split", choices=("test", "valid"), default="test")
    p.add_argument("--beam", type=int, default=1)
    p.add_argument("--limit", type=int, help="score only the first N sentences")
    p.add_argument("--buckets", type=int, default=4, help="source-length buckets (default 4)")
    p.add_argument("--data-path", help="the Ding file, if not where training found it")
    add_inference_device(p)
    add_threads(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..data import source_batch
    from ..data.batching import batches_in_order
    from ..train import metrics
    from ..train.decode import beam_search, greedy
    from ..train.load import load_model
    from ..train.runtime import progress_iter

    if args.beam < 1 or args.buckets < 1 or (args.limit is not None and args.limit < 1):
        raise UsageError("--beam, --buckets and --limit must be >= 1")
    rt = inference_runtime(args)
    loaded = load_model(args.checkpoint, kind=("seq2seq", "transformer"))
    model, tv = loaded.model.to(rt.device), loaded.vocabs["tgt_vocab"]
    ds, examples = split_examples(loaded, args.split, args.data_path)
    examples = examples[: args.limit]
    hyps, refs, lengths = [], [], []
    order = batches_in_order(examples, 64)
    for idx in progress_iter(order, desc="decode", total=len(order)):  # a bar on a terminal only
        part = [examples[i] for i in idx]
        src, mask = rt.to(*source_batch([s for s, _ in part]))
        guard = 2 * max(len(t) for _, t in part) + 10
        with rt.autocast():
            out = greedy(model, src, mask, max_len=guard) if args.beam == 1 else \
                beam_search(model, src, mask, beam=args.beam, max_len=guard)
        for h, (s, t) in zip(out, part):
            hyps.append(tv.decode(h.tokens))
            refs.append(tv.decode(t))
            lengths.append(len(s))
    overall = metrics.scores(hyps, refs)
    print(f"{ds.name} {args.split}: {overall['n']} sentences, {model.label}, beam {args.beam}")
    print(f"exact {overall['exact']:.1f}%  BLEU {overall['bleu']:.1f}  chrF {overall['chrf']:.1f}")
    print("\n| source length | n | exact % | BLEU | chrF |\n|---|---|---|---|---|")
    for row in metrics.by_length(hyps, refs, lengths, metrics.length_buckets(lengths, args.buckets)):
        print(f"| {row['lo']}–{row['hi']} | {row['n']} | {row['exact']:.1f} | {row['bleu']:.1f} | {row['chrf']:.1f} |")
    return 0


def split_examples(loaded, split: str, data_path: str | None = None):
    """(dataset, encoded examples of ``split``) of a translation checkpoint, rebuilt from its config's data
    entry (same name, seed and size) with the checkpoint's vocabularies. Also ``attnlab interpret heads``."""
    from ..data import Dataset, build_corpus, load_dataset

    sv, tv, d = loaded.vocabs["src_vocab"], loaded.vocabs["tgt_vocab"], loaded.config.get("data")
    if not isinstance(d, dict) or "name" not in d:
        raise UsageError(f"{loaded.path}/config.json does not say which data it was trained on")
    ds = load_dataset(d["name"], n=d.get("n", 20000), seed=d.get("seed", 0), max_digits=d.get("max_digits", 13),
                      path=data_path or d.get("path"))
    ds = Dataset(ds.name, ds.splits, sv.level, tv.level)
    return ds, getattr(build_corpus(ds, sv, tv), split)
