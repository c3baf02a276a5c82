"""``attnlab experiment faithfulness``: does the translation change when the learned attention is replaced?

    attnlab experiment faithfulness                 # numbers-de-en: Bahdanau and Luong, 350 steps each
    attnlab experiment faithfulness --quick         # seconds: a smoke run
    attnlab experiment faithfulness --checkpoint runs/de-en --epsilon 0.02   # a trained seq2seq run, its test split

At each target position of the test split the decoder step is recomputed with its attention weights
replaced by uniform, permuted, random (flat Dirichlet) and adversarial weights (Jain & Wallace 2019;
Wiegreffe & Pinter 2019), and the next-token distributions compared (TVD, JSD, argmax changes,
accuracy). The adversary maximises the weights' JSD from the learned ones while the output stays
within TVD ε. Writes table.md, results.json and faithfulness.png to --out.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict, replace

from ._deprecated import deprecated_alias
from ._errors import UsageError
from ._fields import add_outputs, preset
from ._threads import apply_threads
from ._types import positive_int


def _epsilon(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number; got {text!r}") from None
    if not 0.0 < v < 1.0:
        raise argparse.ArgumentTypeError(f"expected a TVD budget in (0, 1); got {v}")
    return v


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("faithfulness", help="replace the learned attention (uniform, permuted, random, adversarial): "
                       "does the output change?", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="a tiny version that runs in seconds")
    p.add_argument("--checkpoint", dest="run", metavar="DIR",
                   help="measure this trained seq2seq checkpoint (bahdanau or luong) instead of training")
    deprecated_alias(p, "--run", "--checkpoint")
    p.add_argument("--data", help="dataset to train on (default numbers-de-en)")
    p.add_argument("--steps", type=positive_int, help="training steps per model (default 350)")
    p.add_argument("--test-size", type=positive_int, help="test sentences (default 300)")
    p.add_argument("--epsilon", type=_epsilon, help="the adversary's output budget, TVD <= epsilon (default 0.01)")
    p.add_argument("--adv-steps", type=positive_int, help="the adversary's gradient steps per position (default 40)")
    p.add_argument("--seed", type=int, default=0, help="the seed of the data, the models and the adversary (default 0)")
    p.add_argument("--data-path", help="with --checkpoint: the Ding file, if not where training found it")
    add_outputs(p, "runs/faithfulness", "table.md, results.json, faithfulness.png", run)


def run(args: argparse.Namespace) -> int:
    from ..experiments.faithfulness import FaithfulnessConfig, measure, table, write
    from ..experiments.faithfulness import run as run_experiment

    apply_threads(args)
    cfg = preset(FaithfulnessConfig, args, seed=args.seed, data=args.data, steps=args.steps, test_size=args.test_size,
                 epsilon=args.epsilon, adv_steps=args.adv_steps)
    log = None if args.quiet else (lambda line: print(line, file=sys.stderr))
    if args.run:
        from .._files import claim
        from ..experiments.faithfulness import FILES

        claim(args.out, FILES)  # before any work: a file of the user's there is refused
        results = measure_run(args, cfg, measure)
        write(results, args.out)
    else:
        if args.data_path:
            raise UsageError("--data-path goes with --checkpoint")
        results = run_experiment(cfg, args.out, progress=log)
    print(table(results), end="")
    label = "smoke-run figures (--quick): too small to read anything into; " if args.quick else ""
    print(f"({label}{results['seconds']:.0f} s; written to {args.out})")
    return 0


def measure_run(args: argparse.Namespace, cfg, measure) -> dict:
    import time

    from ..train.heldout import translation_split
    from ..train.load import load_model

    if args.data or args.steps:
        raise UsageError("--data and --steps are for training; with --checkpoint the run's own data and weights are used")
    t0 = time.perf_counter()
    loaded = load_model(args.run, kind="seq2seq")
    decoder = loaded.model.config.decoder
    if decoder == "none":
        raise UsageError(f"{args.run} has no attention (decoder 'none'); train one with --attention bahdanau or luong")
    ds, examples = translation_split(loaded, "test", args.data_path)
    if not examples:
        raise UsageError(f"{ds.name} has no test sentences")
    cfg = replace(cfg, data=ds.name, decoders=(decoder,))
    r = measure(loaded.model, examples[: cfg.test_size], cfg)
    return {"config": {**asdict(cfg), "run": str(args.run)}, "models": {decoder: r},
            "seconds": time.perf_counter() - t0}
