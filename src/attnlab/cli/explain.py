"""``attnlab explain [MECHANISM] [--example NAME | --file FILE.toml] [--lang en|zh] [--format text|markdown|json]``.

MECHANISM may be left out with ``--example`` or ``--file`` (the example names
it); it is spelled either way (``multi_head`` or ``multi-head``).

A step-by-step walkthrough: every recorded step with its formula and numbers,
then the example's written claims, each exact, rounding drift or wrong.

``--hf MODEL_DIR --text T --layer L --head H --query I`` walks through one real head of a local
Hugging Face model (counted from 1): the model runs once through attnlab's attention
(``attn_implementation="attnlab"``), and the walkthrough shows that head's query and keys as the
model made them (after its positions, e.g. RoPE), its scores, scale, soft-cap, mask, weights and
context, checking the model's own weights and context against them.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ._errors import UsageError
from ._runtime import add_inference_device, inference_runtime
from ._source import add_model_source, check_hf_source
from ._static import constant
from ._types import positive_int

FORMATS = ("text", "markdown", "json")


def _walkthrough(ex, args: argparse.Namespace) -> str:
    """The example computed, its claims checked, written in ``--format`` and ``--lang``."""
    from ..explain import document, render, render_markdown, run, verify

    trace = run(ex)
    verdicts = verify(ex, trace)
    if args.format == "json":
        return json.dumps(document(ex, trace, verdicts, lang=args.lang), ensure_ascii=False, indent=1) + "\n"
    write = render_markdown if args.format == "markdown" else render
    return write(ex, trace, verdicts, digits=args.digits, lang=args.lang)


def add_parser(sub: argparse._SubParsersAction, help: str) -> None:
    p = sub.add_parser(
        "explain",
        help=help,
        description="Compute a worked example with attnlab and print every step: "
        "scores, weights, context, each with its formula and numbers. "
        "Claims written in the example are checked against the computed values.",
    )
    p.add_argument("mechanism", nargs="?", help="a mechanism's name, e.g. additive, scaled-dot, multi-head (other "
                   "spellings accepted: multi_head, latent; a name it does not know lists them all); optional with "
                   "--example or --file")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--example", help="a built-in example (see --list)")
    src.add_argument("--file", help="a worked-example TOML file")
    add_model_source(p, "a translator with additive attention (attnlab train seq2seq --attention bahdanau): one "
                     "real decoder step, with --text and --step", group=src,
                     pretrained="a shipped translator (de-en, zh-en-numbers): one real decoder step, with --text and --step")
    src.add_argument("--hf", metavar="MODEL_DIR", help="a local Hugging Face model folder (needs the hf extra): "
                     "one real head, with --text, --layer, --head and --query")
    p.add_argument("--text", help="with --checkpoint or --pretrained: the sentence to translate; with --hf: the "
                   "text to run the model on")
    p.add_argument("--layer", type=positive_int, help="with --hf: the layer, counted from 1 (default 1)")
    p.add_argument("--head", type=positive_int, help="with --hf: the head, counted from 1 (default 1)")
    p.add_argument("--query", type=positive_int, help="with --hf: the query token, counted from 1 (default: the "
                   "last)")
    p.add_argument("--step", type=positive_int, default=1, help="with --checkpoint or --pretrained: the decoder "
                   "step to walk through, counted from 1 (default 1: the first output word)")
    p.add_argument("--digits", type=int, default=4, help="decimals shown (default 4)")
    p.add_argument("--lang", choices=constant("explain.i18n", "LANGS"), default="en", help="language of the walkthrough (default en)")
    p.add_argument("--format", choices=sorted(FORMATS), default="text", help="output format (default text)")
    p.add_argument("--list", action="store_true", help="list the built-in examples and exit")
    add_inference_device(p, what="run the --checkpoint or --pretrained translator (--hf runs on the CPU)")
    p.set_defaults(func=run_explain)


def run_explain(args: argparse.Namespace) -> int:
    from ..explain import builtin_names, load
    from ..explain.mechanisms import MECHANISMS, canonical

    if args.list:
        for name in builtin_names():
            ex = load(name)
            print(f"{name:<30} {ex.mechanism:<16} {ex.title}")
        return 0
    if not (0 <= args.digits <= 12):
        raise UsageError(f"--digits must be between 0 and 12; got {args.digits}")
    mechanism = canonical(args.mechanism) if args.mechanism else None
    if mechanism is not None and mechanism not in MECHANISMS:
        raise UsageError(f"unknown mechanism {args.mechanism!r}; known: {', '.join(sorted(MECHANISMS))}")
    if args.hf:
        print(_walkthrough(hf_head(args), args), end="")
        return 0
    if (args.layer, args.head, args.query) != (None, None, None):
        raise UsageError("--layer, --head and --query go with --hf MODEL_DIR")
    if (args.text is not None) != bool(args.checkpoint):
        raise UsageError("--text goes with --checkpoint DIR or --pretrained NAME, and they need it")
    if args.checkpoint:
        ex = translator_step(args.checkpoint, args.text, args.step, inference_runtime(args))
    elif args.file:
        path = Path(args.file)
        if not path.is_file():
            raise UsageError(f"--file {args.file}: " + ("is a folder, not a file" if path.is_dir() else "no such file"))
        ex = load(path)
    elif args.example:
        ex = load(args.example)
    elif mechanism is not None:
        choices = [n for n in builtin_names() if load(n).mechanism == mechanism]
        if not choices:
            raise UsageError(f"no built-in example for {mechanism!r}; pass --file FILE.toml")
        ex = load(choices[0])
    else:
        raise UsageError("give a MECHANISM (e.g. 'additive'), --example NAME or --file FILE.toml; --list shows the examples")
    if mechanism is not None and ex.mechanism != mechanism:
        raise UsageError(f"{ex.name} is a {ex.mechanism!r} example, not {mechanism!r}")
    print(_walkthrough(ex, args), end="")
    return 0


def _counted(flag: str, value: int | None, n: int, what: str, default: int = 1) -> int:
    """A 1-based choice among n as a 0-based index; out of range is one line naming the range."""
    value = default if value is None else value
    if value > n:
        raise UsageError(f"{flag} counts from 1 and {what} {n} (1..{n}); got {value}")
    return value - 1


def hf_head(args: argparse.Namespace):
    """The worked example of one head of a Hugging Face model, from one pass through attnlab's attention."""
    check_hf_source(args)
    try:
        from ..integrations.transformers import NAME, calls
        from ..viz.hf import run_once
    except ImportError:
        raise UsageError("explaining Hugging Face models needs transformers: pip install 'attnlab[hf]'") from None
    from ..explain.hf_head import head_example

    with calls() as kept:
        config, tokens, _ = run_once(args.hf, args.text, attn_implementation=NAME)
    name = Path(args.hf).resolve().name
    if not kept:
        raise UsageError(f"{args.hf}: its {config.model_type} attention does not go through transformers' "
                         "attention interface, so attnlab cannot show its heads")
    layer = _counted("--layer", args.layer, len(kept), f"{name} has layers")
    head = _counted("--head", args.head, kept[layer]["query"].shape[1], f"layer {layer + 1} has heads")
    n = kept[layer]["query"].shape[2]
    query = _counted("--query", args.query, n, "the text gives tokens", default=n)
    try:
        return head_example(kept[layer], layer=layer, head=head, query=query, tokens=tokens, model=name)
    except ValueError as e:
        raise UsageError(str(e)) from None


def translator_step(checkpoint: str, text: str, step: int, rt=None):
    """One decoder step of a trained additive-attention translator as a worked example: the query is
    the decoder's state s_{t-1}, the keys and values the encoder's states h_j, the parameters the
    model's own W_q, W_k and v. The walkthrough recomputes with them the weights α_t the model used.
    ``rt``: the device and precision to run the model on (``inference_runtime``; default the CPU in fp32)."""
    import torch

    from ..data import source_batch
    from ..data.vocab import BOS, EOS, tokenize
    from ..explain import Example
    from ..train.load import load_model
    from ..train.runtime import Runtime

    rt = rt or Runtime.local("cpu")
    loaded = load_model(checkpoint, kind="seq2seq")
    model, sv, tv = loaded.model.to(rt.device), loaded.vocabs["src_vocab"], loaded.vocabs["tgt_vocab"]
    if model.config.decoder != "bahdanau":
        raise UsageError(f"{checkpoint} has a {model.config.decoder!r} decoder; the walkthrough needs "
                         "additive (Bahdanau) attention")
    if not text.strip():
        raise UsageError("--text must not be empty")
    from ..pretrained import source_ids

    ids = source_ids(text, sv, loaded.config)  # read as translate reads it (两千 as 二千)
    src, mask = rt.to(*source_batch([ids]))
    out: list[int] = []
    with torch.no_grad(), rt.autocast():
        memory, state = model.start(src, mask)
        y = torch.tensor([BOS], device=rt.device)
        for t in range(1, step + 1):
            query = state["h"][0]  # s_{t-1}, the state before step t
            logits, state, weights = model.step(memory, state, y)
            y = logits.argmax(-1)
            if t < step and int(y) == EOS:
                raise UsageError(f"the translation ends after {t} steps; --step must be 1 to {t}")
            out.append(int(y))
    att, keys = model.attention, memory["keys"][0]  # (s, d_e)
    words = tv.tokens(out[:-1]) + ["</s>" if out[-1] == EOS else tv.tokens(out[-1:])[0]]
    before = " ".join(words[:-1]) or "(nothing yet)"
    title = (f"A real decoder step of the trained translator: step {step} of “{text.strip()}”; "
             f"written so far: {before}; this step writes “{words[-1]}”")
    title_zh = (f"训练好的翻译模型的真实解码一步：“{text.strip()}”的第 {step} 步；"
                f"已写出：{before}；这一步写出“{words[-1]}”")
    return Example(
        name=f"{Path(checkpoint).name}-step-{step}", mechanism="bahdanau", title=title, title_zh=title_zh,
        inputs={"query": query.double().tolist(), "keys": keys.double().tolist()},
        params={"w_q": att.w_q.weight.double().tolist(), "w_k": att.w_k.weight.double().tolist(),
                "v": att.v.double().tolist()},
        tokens=[words[-1]], key_tokens=tokenize(text.strip(), sv.level),
        # The weights the model itself used at this step, written as a claim the walkthrough checks, to
        # the decimals its precision holds (bf16 and fp16 keep 2 to 3 significant digits).
        claims=[{"step": "weights", "value": [round(float(w), 4 if rt.precision == "fp32" else 2) for w in weights[0]]}])
