"""``attnlab train seq2seq``: train an RNN encoder–decoder (with or without attention) on a corpus.

    attnlab train seq2seq --data numbers-de-en --attention bahdanau --steps 3000 --out runs/de-en
    attnlab train seq2seq --out runs/de-en --resume        # continue a killed run exactly

The checkpoint folder holds model.safetensors (weights, Adam state, RNG),
config.json (model, training, data) and the two vocabularies.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from . import UsageError

ATTENTIONS = ("none", "bahdanau", "luong")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("seq2seq", help="an RNN encoder-decoder translation model",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    d = p.add_argument_group("data")
    d.add_argument("--data", default="numbers-de-en", help="numbers-SRC-TGT (en de fr es it zh digits) or ding-de-en, ding-en-de")
    d.add_argument("--data-path", help="the Ding dictionary file (default /usr/share/trans/de-en)")
    d.add_argument("--n", type=int, default=20000, help="numbers-*: how many numbers in all splits (default 20000)")
    d.add_argument("--max-digits", type=int, default=13, help="numbers-*: the longest numbers (default 13 digits)")
    d.add_argument("--src-level", choices=("char", "word"), help="tokenisation of the source (default: per language)")
    d.add_argument("--tgt-level", choices=("char", "word"), help="tokenisation of the target (default: per language)")
    m = p.add_argument_group("model")
    m.add_argument("--attention", choices=ATTENTIONS, default="bahdanau", help="the decoder (default bahdanau)")
    m.add_argument("--score", choices=("dot", "general", "concat"), default="general", help="Luong's score (default general)")
    m.add_argument("--rnn", choices=("gru", "lstm"), default="gru")
    m.add_argument("--emb", type=int, default=64)
    m.add_argument("--hidden", type=int, default=128)
    m.add_argument("--attn-dim", type=int, default=128)
    m.add_argument("--unidirectional", action="store_true", help="a one-directional encoder")
    m.add_argument("--dropout", type=float, default=0.0)
    t = p.add_argument_group("training")
    t.add_argument("--steps", type=int, help="optimizer steps in all (default 3000)")
    t.add_argument("--batch-size", type=int, default=64)
    t.add_argument("--lr", type=float, default=2e-3)
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--eval-every", type=int, default=500)
    t.add_argument("--save-every", type=int, default=500)
    t.add_argument("--out", default="runs/seq2seq", help="the checkpoint folder (default runs/seq2seq)")
    t.add_argument("--resume", action="store_true", help="continue the run in --out where it stopped")
    t.add_argument("--quiet", action="store_true", help="no progress lines")
    p.set_defaults(func=run)


def _data(args, data_cfg: dict):  # noqa: ARG001
    from ..data import Dataset, load_dataset

    ds = load_dataset(data_cfg["name"], n=data_cfg["n"], seed=data_cfg["seed"], max_digits=data_cfg["max_digits"],
                      path=data_cfg.get("path"))
    ds = Dataset(ds.name, ds.splits, data_cfg.get("src_level") or ds.src_level, data_cfg.get("tgt_level") or ds.tgt_level)
    return ds


def run(args: argparse.Namespace) -> int:
    from ..data import Vocab, build_corpus
    from ..models import Seq2Seq, Seq2SeqConfig, build_model
    from ..train.checkpoint import load_checkpoint, read_text
    from ..train.loop import TrainConfig, train, train_config_from

    out = Path(args.out)
    if args.resume:
        _, config, _ = load_checkpoint(out)
        if "data" not in config or "model" not in config:
            raise UsageError(f"{out} is not a seq2seq training checkpoint")
        data_cfg = config["data"]
        ds = _data(args, data_cfg)
        sv = Vocab.from_json(read_text(out, "src_vocab.json"))
        tv = Vocab.from_json(read_text(out, "tgt_vocab.json"))
        corpus = build_corpus(ds, sv, tv)
        model = build_model(config["model"])
        cfg = train_config_from(config["train"])
        if args.steps is not None:
            cfg.steps = args.steps
        extra = {k: config[k] for k in ("data", "max_src_len") if k in config}
    else:
        if out.exists() and any(out.iterdir()):
            raise UsageError(f"{out} exists and is not empty: pass --resume to continue it, or another --out")
        data_cfg = {"name": args.data, "n": args.n, "seed": args.seed, "max_digits": args.max_digits,
                    "path": args.data_path, "src_level": args.src_level, "tgt_level": args.tgt_level}
        ds = _data(args, data_cfg)
        data_cfg["src_level"], data_cfg["tgt_level"] = ds.src_level, ds.tgt_level
        corpus = build_corpus(ds)
        model = Seq2Seq(Seq2SeqConfig(
            src_vocab=len(corpus.src_vocab), tgt_vocab=len(corpus.tgt_vocab), decoder=args.attention,
            rnn=args.rnn, emb_dim=args.emb, hidden=args.hidden, bidirectional=not args.unidirectional,
            attn_dim=args.attn_dim, luong_score=args.score, dropout=args.dropout))
        cfg = TrainConfig(steps=args.steps or 3000, batch_size=args.batch_size, lr=args.lr, seed=args.seed,
                          eval_every=args.eval_every, save_every=args.save_every)
        extra = {"data": data_cfg, "max_src_len": max(len(s) for s, _ in corpus.train)}
    files = {"src_vocab.json": corpus.src_vocab.to_json(), "tgt_vocab.json": corpus.tgt_vocab.to_json()}
    if not args.quiet:
        n_par = sum(p.numel() for p in model.parameters())
        print(f"{ds.name}: {len(corpus.train)} train / {len(corpus.valid)} valid / {len(corpus.test)} test pairs; "
              f"vocab {len(corpus.src_vocab)} → {len(corpus.tgt_vocab)}; {model.config.decoder} decoder, {n_par:,} parameters")
    result = train(model, corpus.train, corpus.valid, cfg, out=out, resume=args.resume, extra_config=extra,
                   files=files, progress=not args.quiet)
    print(f"saved {out} at step {result.step}: valid {result.valid}")
    return 0
