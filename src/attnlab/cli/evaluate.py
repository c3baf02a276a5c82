"""``attnlab evaluate --checkpoint DIR``: exact match, BLEU and chrF on a split, and by source length.

The split is rebuilt from the dataset recorded in the checkpoint (same name,
seed and size), so the test sentences are those the training never saw. Each figure
comes with a 95 % bootstrap interval over the sentences. ``--attention-out FILE.json``
writes the first scored sentence's attention as the viewer's JSON, as ``translate`` does.
"""

from __future__ import annotations

import argparse

from ._errors import UsageError
from ._runtime import add_inference_device, inference_runtime
from ._source import add_model_source


def add_parser(sub: argparse._SubParsersAction, help: str) -> None:
    p = sub.add_parser("evaluate", help=help,
                       description=__doc__)
    add_model_source(p, "a translator: a folder written by attnlab train seq2seq")
    p.add_argument("--split", choices=("test", "valid"), default="test", help="the held-out sentences to score (default test)")
    p.add_argument("--beam", type=int, default=1, help="beam size (default 1 = greedy)")
    p.add_argument("--limit", type=int, help="score only the first N sentences")
    p.add_argument("--buckets", type=int, default=4, help="source-length buckets (default 4)")
    p.add_argument("--data-path", help="the Ding file, if not where training found it")
    p.add_argument("--attention-out", metavar="FILE.json", help="write the first scored sentence's attention as the "
                   "viewer's JSON (attnlab view --json FILE.json -o page.html)")
    add_inference_device(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..train import metrics
    from ..train.heldout import translate_examples, translation_split
    from ..train.load import load_model

    if args.beam < 1 or args.buckets < 1 or (args.limit is not None and args.limit < 1):
        raise UsageError("--beam, --buckets and --limit must be >= 1")
    rt = inference_runtime(args)
    loaded = load_model(args.checkpoint, kind=("seq2seq", "transformer"))
    model, tv = loaded.model.to(rt.device), loaded.vocabs["tgt_vocab"]
    ds, examples = translation_split(loaded, args.split, args.data_path)
    hyps, refs, lengths = translate_examples(model, examples[: args.limit], tv, beam=args.beam, runtime=rt)
    overall, ci = metrics.scores(hyps, refs), metrics.intervals(hyps, refs)
    print(f"{ds.name} {args.split}: {overall['n']} sentences, {model.label}, beam {args.beam}")
    print("  ".join(f"{label} {overall[key]:.1f} (95% {ci[key][0]:.1f}–{ci[key][1]:.1f})"
                    for key, label in (("exact", "exact %"), ("bleu", "BLEU"), ("chrf", "chrF"))))
    print("\n| source length | n | exact % | BLEU | chrF |\n|---|---|---|---|---|")
    for row in metrics.by_length(hyps, refs, lengths, metrics.length_buckets(lengths, args.buckets)):
        print(f"| {row['lo']}–{row['hi']} | {row['n']} | {row['exact']:.1f} | {row['bleu']:.1f} | {row['chrf']:.1f} |")
    if args.attention_out and examples:
        import json

        from .._files import write_text
        from ._model_pages import translation_page

        ids = list(examples[0][0])
        doc = translation_page(loaded, ids, loaded.vocabs["src_vocab"].tokens(ids), rt)
        write_text(args.attention_out, json.dumps(doc, ensure_ascii=False))
        print(f"attention weights of the first sentence ({doc['title']}): {args.attention_out}")
    return 0
