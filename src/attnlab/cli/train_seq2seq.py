"""``attnlab train seq2seq``: train a translation model on a corpus: an RNN encoder–decoder
(with or without attention, the default) or a Transformer (``--model transformer``).

    attnlab train seq2seq --data numbers-de-en --attention bahdanau --steps 3000 --out runs/de-en
    attnlab train seq2seq --data numbers-de-en --model transformer --num-layers 2 --num-heads 4 --dim 128 --out runs/de-en-tf
    attnlab train seq2seq --out runs/de-en --resume        # continue a killed run exactly

Both kinds share the data, vocabularies, batches, validation and checkpoints;
the RNN flags (--attention, --rnn, --emb, --hidden, ...) apply to --model rnn,
the Transformer flags (--num-layers, --num-heads, --dim, --ff, --positional) to --model transformer.
The old spellings --layers, --heads and --pos still work for one release (with a note).

The checkpoint folder holds model.safetensors (weights, Adam state, RNG),
config.json (model, training, data) and the two vocabularies.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass, replace
from pathlib import Path

from .._limits import check_values
from ._deprecated import OLD_SPELLINGS, deprecated_alias
from ._errors import UsageError
from ._fields import config_from, field_default, field_option
from ._memory import out_of_memory
from ._runtime import add_runtime, runtime_from
from ._static import constant, defaults
from ._threads import add_threads

ATTENTIONS = ("none", "bahdanau", "luong")
MODEL_KINDS = ("rnn", "transformer")


MIN_TRAIN = 10  # training pairs below which a run is a mistake, not an experiment


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("seq2seq", help="a translation model: RNN encoder-decoder or Transformer",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    d = p.add_argument_group("data")
    d.add_argument("--data", default="numbers-de-en", help="numbers-SRC-TGT (en de fr es it zh digits) or ding-de-en, ding-en-de")
    d.add_argument("--data-path", help="the Ding dictionary file (default /usr/share/trans/de-en)")
    d.add_argument("--numbers", "--n", dest="n", type=int, default=20000,
                   help="numbers-*: how many numbers in all splits (default 20000; --n is the old spelling)")
    d.add_argument("--max-digits", type=int, default=13, help="numbers-*: the longest numbers (default 13 digits)")
    d.add_argument("--src-level", choices=("char", "word"), help="tokenisation of the source (default: per language)")
    d.add_argument("--tgt-level", choices=("char", "word"), help="tokenisation of the target (default: per language)")
    # each option's default and type from the config dataclasses, read from their source (cli/_static.py)
    S = defaults("models.seq2seq", "Seq2SeqConfig")
    T = defaults("models.transformer", "TransformerConfig")
    C = defaults("train.loop", "TrainConfig")
    embedded = constant("models.transformer", "_EMBED")  # the positions the translator takes: all but ALiBi
    positions = [name for name in constant("nn.positional", "POSITIONAL") if name in embedded]

    m = p.add_argument_group("model")
    m.add_argument("--model", choices=MODEL_KINDS, default="rnn", help="rnn (encoder-decoder, default) or transformer")
    field_option(m, S, "decoder", "--attention", choices=ATTENTIONS, help="the decoder")
    field_option(m, S, "luong_score", "--score", choices=("dot", "general", "concat"), help="Luong's score")
    field_option(m, S, "rnn", choices=("gru", "lstm"))
    field_option(m, S, "emb_dim", "--emb", help="embedding size")
    field_option(m, S, "hidden", help="RNN state size")
    field_option(m, S, "attn_dim", help="d_a of the additive and concat scores")
    field_option(m, S, "bidirectional", "--unidirectional", help="a one-directional encoder")
    m.add_argument("--dropout", type=float, help="dropout (default 0 for rnn, 0.1 for transformer)")
    tf = p.add_argument_group("transformer (--model transformer)")
    tf.add_argument("--num-layers", dest="num_layers", type=int, default=field_default(T, "num_encoder_layers"),
                    help="encoder and decoder layers each (default 2)")
    field_option(tf, T, "num_heads", "--num-heads", help="attention heads; must divide --dim")
    field_option(tf, T, "dim", help="model width d_model")
    field_option(tf, T, "ffn_dim", "--ff", type=int, help="feed-forward width (default 4 x --dim)")
    field_option(tf, T, "positional", choices=positions, help="positional encoding")
    for old in ("--layers", "--heads", "--pos"):
        deprecated_alias(tf, old, OLD_SPELLINGS[old])
    t = p.add_argument_group("training")
    field_option(t, C, "steps", default=None, help="optimizer steps in all; with --resume, the new total")
    for name in ("batch_size", "lr", "seed", "eval_every", "save_every"):
        field_option(t, C, name)
    field_option(t, C, "log_every", help="steps between progress lines and metrics.jsonl records")
    field_option(t, C, "on_nonfinite", default=None, choices=constant("train.finite", "ON_NONFINITE"),
                 help="a step whose gradients are NaN or infinite: stop the run (the last checkpoint stays as it "
                      "was) or skip that step's update (counted in metrics.jsonl) (default stop)")
    field_option(t, C, "max_seconds", type=float, help="stop after this many seconds of wall time, the closing "
                 "validation and checkpoint included (default: no limit)")
    t.add_argument("--out", required=True, help="the checkpoint folder to write (required, as in every train verb)")
    t.add_argument("--resume", action="store_true", help="continue the run in --out where it stopped")
    t.add_argument("--overwrite", action="store_true",
                   help="replace the attnlab checkpoint already in --out with a new run (without it, such a folder is refused: "
                        "pass --resume to continue it instead)")
    t.add_argument("--quiet", action="store_true", help="no progress lines")
    add_threads(p)
    add_runtime(p)
    p.set_defaults(func=run)


@dataclass
class DataConfig:
    """The corpus of a run, as its checkpoint's ``"data"`` entry holds it (checked on --resume)."""

    name: str
    n: int
    seed: int
    max_digits: int
    path: str | None = None
    src_level: str | None = None
    tgt_level: str | None = None


def _data_config(args) -> dict:
    return {"name": args.data, "n": args.n, "seed": args.seed, "max_digits": args.max_digits,
            "path": args.data_path, "src_level": args.src_level, "tgt_level": args.tgt_level}


def _data(args, data_cfg: dict):  # noqa: ARG001
    from ..data import Dataset, load_dataset

    ds = load_dataset(data_cfg["name"], n=data_cfg["n"], seed=data_cfg["seed"], max_digits=data_cfg["max_digits"],
                      path=data_cfg.get("path"))
    ds = Dataset(ds.name, ds.splits, data_cfg.get("src_level") or ds.src_level, data_cfg.get("tgt_level") or ds.tgt_level)
    return ds


def _model(args, src_vocab: int, tgt_vocab: int, max_len: int = 512):
    """The model the flags describe (ValueError for flags that do not fit, e.g. --num-heads not dividing --dim)."""
    from ..models import Seq2SeqConfig, TransformerConfig, create_model

    sizes = {"src_vocab": src_vocab, "tgt_vocab": tgt_vocab}
    if args.model == "transformer":
        dropout = field_default(TransformerConfig, "dropout") if args.dropout is None else args.dropout
        return create_model(config_from(args, TransformerConfig, **sizes, dropout=dropout, max_len=max_len,
                                        num_encoder_layers=args.num_layers, num_decoder_layers=args.num_layers))
    dropout = field_default(Seq2SeqConfig, "dropout") if args.dropout is None else args.dropout
    return create_model(config_from(args, Seq2SeqConfig, **sizes, dropout=dropout))


# config fields whose flag is spelled otherwise, for the messages
FLAGS = {"dim": "--dim", "num_heads": "--num-heads", "num_encoder_layers": "--num-layers", "ffn_dim": "--ff", "emb_dim": "--emb",
         "n": "--numbers", "decoder": "--attention", "luong_score": "--score"}


def _flag_names(msg: str) -> str:
    """``num_heads must ...`` → ``--num-heads must ...`` (whole names only: ``attn_dim`` stays)."""
    return re.sub(r"(?<![\w-])(\w+)(?= must|=)", lambda m: FLAGS.get(m.group(1), m.group(1)), msg)


def _check_flags(args) -> None:
    """Every flag, checked before any data is built (``attnlab._limits``: finite, in range); the
    Transformer's flags too under --model rnn, where they are unused."""
    from ..models import TransformerConfig
    from ..train.loop import TrainConfig

    if args.dropout is not None and not 0.0 <= args.dropout < 1.0:
        raise UsageError(f"--dropout must be in [0, 1); got {args.dropout}")
    if args.steps is not None and args.steps < 1:
        raise UsageError(f"--steps must be >= 1; got {args.steps}")
    try:
        config_from(args, TrainConfig)
        check_values(DataConfig, _data_config(args))
        check_values(TransformerConfig, {"src_vocab": 8, "tgt_vocab": 8, "num_encoder_layers": args.num_layers,
                                         **{k: getattr(args, k) for k in ("dim", "num_heads", "ffn_dim")}})
        if not args.resume:
            _model(args, 8, 8)  # the model flags together (--num-heads dividing --dim, the size)
    except ValueError as e:
        raise UsageError(_flag_names(str(e))) from None


def _resumed(args, out: Path):
    """The run in ``out`` to continue: (dataset, corpus, model, training config, config.json entries)."""
    from ..data import build_corpus
    from ..train.load import load_model
    from ..train.loop import train_config_from

    loaded = load_model(out, kind=("seq2seq", "transformer"))
    config = loaded.config
    if "data" not in config:
        raise UsageError(f"{out} is not a seq2seq training checkpoint")
    data_cfg = config["data"]
    if not isinstance(data_cfg, dict):
        raise UsageError(f"{out}/config.json: 'data' must be an object; got {type(data_cfg).__name__}")
    check_values(DataConfig, data_cfg, f"{out}/config.json: data.")
    ds = _data(args, data_cfg)
    corpus = build_corpus(ds, loaded.vocabs["src_vocab"], loaded.vocabs["tgt_vocab"])
    cfg = train_config_from(config["train"], f"{out}/config.json")
    given = {k: getattr(args, k) for k in ("steps", "on_nonfinite", "max_seconds") if getattr(args, k) is not None}
    cfg = replace(cfg, **given)  # checked again as it is built
    return ds, corpus, loaded.model.train(), cfg, {k: config[k] for k in ("data", "max_src_len") if k in config}


def _fresh(args, out: Path):
    """A new run in the empty folder ``out``: (dataset, corpus, model, training config, config.json entries)."""
    from ..data import build_corpus
    from ..train.loop import TrainConfig

    if out.exists() and any(out.iterdir()) and not args.overwrite:
        raise UsageError(f"{out} exists and is not empty: pass --resume to continue it, or another --out")
    data_cfg = _data_config(args)
    ds = _data(args, data_cfg)
    data_cfg["src_level"], data_cfg["tgt_level"] = ds.src_level, ds.tgt_level
    corpus = build_corpus(ds)
    if len(corpus.train) < MIN_TRAIN or not corpus.valid:
        raise UsageError(
            f"the {args.data} corpus gives {len(corpus.train)} training and {len(corpus.valid)} validation pairs; "
            f"at least {MIN_TRAIN} and 1 are needed (raise --n)"
        )
    longest = max(max(len(s), len(t)) for s, t in corpus.train)
    # learned positions: room for translate's 2x-longest sources and evaluate's 2x + 10 guard
    model = _model(args, len(corpus.src_vocab), len(corpus.tgt_vocab), max_len=max(256, 4 * longest + 16))
    extra = {"data": data_cfg, "max_src_len": max(len(s) for s, _ in corpus.train)}
    return ds, corpus, model, config_from(args, TrainConfig), extra


def run(args: argparse.Namespace) -> int:
    import torch

    from ..train.checkpoint import check_out_dir
    from ..train.fit import fit
    from ..train.loop import Seq2SeqTask, progress_lines, valid_words

    _check_flags(args)
    rt = runtime_from(args)
    torch.manual_seed(args.seed)  # before anything random is made: the model's initial weights included
    out = Path(args.out)
    # the folder's lock, held for the whole run (a second run on it is refused); a run in it is
    # continued or replaced only when --resume or --overwrite says so
    check_out_dir(out, run="seq2seq", resume=args.resume, overwrite=args.overwrite)
    ds, corpus, model, cfg, extra = (_resumed if args.resume else _fresh)(args, out)
    files = {"src_vocab.json": corpus.src_vocab.to_json(), "tgt_vocab.json": corpus.tgt_vocab.to_json()}
    if not args.quiet and rt.is_main:
        n_par = sum(p.numel() for p in model.parameters())
        print(f"{ds.name}: {len(corpus.train)} train / {len(corpus.valid)} valid / {len(corpus.test)} test pairs; "
              f"vocab {len(corpus.src_vocab)} → {len(corpus.tgt_vocab)}; {model.label}, {n_par:,} parameters")
    task = Seq2SeqTask(model, corpus.train, corpus.valid, cfg, extra, files)
    with out_of_memory():  # one line, not an internal error
        result = fit(task, task.fit_config("train"), rt, out, resume=args.resume, progress=not args.quiet,
                     log=None if args.quiet else progress_lines, tensorboard=args.tensorboard)
    if rt.is_main:
        print(f"saved {out} at step {result.step}: {valid_words(result.valid)}")
    rt.world.close()
    return 0
