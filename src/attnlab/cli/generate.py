"""``attnlab generate --checkpoint DIR --text "ROMEO:"``: sample from a trained language model.

Sampling uses the key/value cache, ``--temperature`` (0 = greedy) and ``--top-k``.
``--attention-out FILE.json`` also writes every layer's and head's attention
weights over the prompt and the generated text (the viewer's exchange format:
``{"tokens": [...], "layers": weights[layer][head][q][k]}``).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING

from .._limits import LIMITS, check_value
from ._deprecated import deprecated_alias
from ._errors import UsageError
from ._runtime import add_inference_device, inference_runtime
from ._source import add_model_source

if TYPE_CHECKING:
    import torch


def add_parser(sub: argparse._SubParsersAction, help: str) -> None:
    p = sub.add_parser(
        "generate",
        help=help,
        description="Sample text from a language-model checkpoint, with the key/value cache.",
    )
    add_model_source(p, "a folder written by 'attnlab train lm'")
    p.add_argument("--text", default="\n", help="the text to start from (default: a newline)")
    deprecated_alias(p, "--prompt", "--text")
    p.add_argument("--tokens", type=int, default=300,
                   help=f"characters to generate, 0 to {LIMITS['tokens'].hi:.0f} (default 300); printed as they come")
    p.add_argument("--temperature", type=float, default=0.8, help="0 = greedy (default 0.8)")
    p.add_argument("--top-k", type=int, default=None, help="sample from the k most likely characters")
    p.add_argument("--seed", type=int, default=0, help="the seed of the sampling (default 0)")
    p.add_argument("--no-cache", action="store_true", help="recompute the prefix at every step")
    p.add_argument("--attention-out", help="write per-layer, per-head attention weights as JSON")
    add_inference_device(p)
    p.set_defaults(func=run_generate)


def _stream(args: argparse.Namespace, rt, model, vocab, prompt: torch.Tensor) -> torch.Tensor:
    """Sample ``--tokens`` characters after ``prompt`` (1, n), printing the prompt and then each character
    as soon as it is drawn (flushed); returns every id (1, n + tokens) on the CPU."""
    import torch

    gen = torch.Generator(device=rt.device).manual_seed(args.seed)
    ids = [prompt.cpu()]
    print(vocab.decode(prompt[0]), end="", flush=True)
    try:
        with rt.autocast():
            for nxt in model.stream(prompt, args.tokens, temperature=args.temperature, top_k=args.top_k,
                                    use_cache=not args.no_cache, generator=gen):
                ids.append(nxt.cpu())
                print(vocab.decode(ids[-1][0]), end="", flush=True)
    except RuntimeError as e:  # torch.multinomial on NaN probabilities: finite weights whose outputs overflow
        if "probability tensor" not in str(e):
            raise
        print(flush=True)
        raise UsageError(f"{args.checkpoint}: the model's next-character probabilities are NaN or infinite "
                         "(a diverged model): train it again or use an earlier checkpoint") from None
    print(flush=True)
    return torch.cat(ids, dim=1)


def run_generate(args: argparse.Namespace) -> int:
    from .._files import write_text
    from ..models.gpt import attention_maps
    from ..train.load import load_model
    from ..viz.viewer import attention_json

    for name, kind in (("tokens", int), ("temperature", float), ("top_k", int | None), ("seed", int)):
        check_value(name, getattr(args, name), kind, label="--" + name.replace("_", "-"))  # finite, in range
    if not args.text:
        raise UsageError("--text must not be empty")
    rt = inference_runtime(args)
    loaded = load_model(args.checkpoint, kind="gpt")
    model, vocab = loaded.model.to(rt.device), loaded.vocabs["vocab"]
    prompt = vocab.encode_tensor(args.text).unsqueeze(0).to(rt.device)  # (1, n)
    out = _stream(args, rt, model, vocab, prompt)  # (1, n + tokens), printed as it was drawn
    if args.attention_out:
        window = out[0, -model.config.block_size:]
        with rt.autocast():
            maps = attention_maps(model, window.to(rt.device)).float().cpu()  # (layers, h, n, n)
        chars = [vocab.itos[i] for i in window.tolist()]
        path = Path(args.attention_out)
        causal = maps.new_ones(len(chars), len(chars)).triu(1).bool()  # the keys after each query: masked
        write_text(path, json.dumps(attention_json(chars, maps, masked=causal), ensure_ascii=False))
        print(f"attention weights ({maps.shape[0]} layers × {maps.shape[1]} heads × {maps.shape[2]}²): {path}")
    return 0
