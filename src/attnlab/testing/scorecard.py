"""A scorecard: ``attnlab.testing.check`` run on the attention implementations people use, as a
Markdown table. ``python -m attnlab.testing.scorecard``.

Each row wraps one implementation in one of the declared signatures, as its users call it (the
wrapper says how). A peer that is not installed is left out with a line saying so. A rule a peer
breaks is written as the checker names it; some of these are choices by design (torch documents
NaN for fully masked rows in ``MultiheadAttention``), not defects.
"""

from __future__ import annotations

import math
import sys

import torch
import torch.nn.functional as F

from .check import check

COLUMNS = ["values", "deterministic", "broadcast mask (q, k)", "non-contiguous inputs", "masked NaN value", "masked inf key",
           "fully masked row", "mask polarity", "causal", "causal alignment (q < k)", "causal alignment (q > k)",
           "local window", "random row masks", "empty"]
HALF = (torch.float16, torch.bfloat16)


def textbook(q, k, v, mask):
    """masked_fill(-inf), softmax, @ v: the implementation of most tutorials."""
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    return s.masked_fill(~mask, float("-inf")).softmax(-1) @ v


def sdpa(q, k, v, mask):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def multihead(q, k, v, mask):
    """torch.nn.MultiheadAttention with identity projections, so that it is attention alone;
    its bool ``attn_mask`` (True = masked out) is passed as given, repeated to (b·h, q, k)."""
    b, h, n, d = q.shape
    mha = torch.nn.MultiheadAttention(h * d, h, bias=False, batch_first=True, device=q.device, dtype=q.dtype)
    with torch.no_grad():
        mha.in_proj_weight.copy_(torch.eye(h * d).repeat(3, 1))
        mha.out_proj.weight.copy_(torch.eye(h * d))
    joined = [t.transpose(1, 2).reshape(t.shape[0], t.shape[2], h * d) for t in (q, k, v)]
    m = mask.expand(b, h, n, k.shape[-2]).reshape(b * h, n, k.shape[-2])
    out, _ = mha(*joined, attn_mask=m, need_weights=False)  # (b, q, h·d)
    return out.reshape(b, n, h, d).transpose(1, 2)


def flex(q, k, v, mask):
    import warnings

    from torch.nn.attention.flex_attention import flex_attention
    full = mask.expand(q.shape[0], q.shape[1], q.shape[2], k.shape[2])

    def score_mod(score, b, h, i, j):
        return torch.where(full[b, h, i, j], score, -torch.inf)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "called without torch.compile()": eager is what is measured
        return flex_attention(q, k, v, score_mod=score_mod)


def transformers_eager(q, k, v, bias):
    """transformers' Llama ``eager_attention_forward``, with the additive mask as transformers builds
    it (the dtype's lowest value where forbidden, not -inf)."""
    from types import SimpleNamespace

    from transformers.models.llama.modeling_llama import eager_attention_forward
    bias = bias.clamp(min=torch.finfo(bias.dtype).min)
    module = SimpleNamespace(num_key_value_groups=1, training=False)
    out, _ = eager_attention_forward(module, q, k, v, bias, scaling=q.shape[-1] ** -0.5)
    return out.transpose(1, 2)


def attnlab_attention(q, k, v, mask):
    import attnlab
    return attnlab.attention(q, k, v, mask=mask)


def attnlab_causal(q, k, v, is_causal):
    import attnlab
    return attnlab.attention(q, k, v, causal=is_causal)


def _version(name: str) -> str:
    try:
        return f"{name} {__import__(name).__version__}"
    except ImportError:
        return ""


# (row name, function, signature, the package whose version the row reports, check's options)
ROWS = [
    ("textbook: masked_fill(-inf), softmax, @ v", textbook, "qkv_mask", "torch", {}),
    ("torch `scaled_dot_product_attention` (bool mask)", sdpa, "qkv_mask", "torch", {}),
    ("torch `scaled_dot_product_attention` (is_causal)",
     lambda q, k, v, c: F.scaled_dot_product_attention(q, k, v, is_causal=c), "qkv_causal", "torch", {}),
    ("torch `nn.MultiheadAttention` (identity projections)", multihead, "qkv_torch_mask", "torch", {}),
    ("torch `flex_attention` (eager, score_mod mask; outputs only: no backward on CPU)", flex, "qkv_mask", "torch",
     {"grad": False}),
    ("transformers Llama `eager_attention_forward`", transformers_eager, "qkv_bias", "transformers", {}),
    ("attnlab `attention`", attnlab_attention, "qkv_mask", "attnlab", {}),
    ("attnlab `attention` (causal=, bottom-right aligned)", attnlab_causal, "qkv_causal", "attnlab",
     {"causal": "bottom_right"}),
]


def _cell(report, column: str, dtypes) -> str:
    tags = [f"[{str(d).removeprefix('torch.')}, cpu]" for d in dtypes]
    names = [f"{c} {t}" for c in ([column] if column != "empty" else
             ["empty keys (k = 0)", "empty batch (b = 0)", "empty queries (q = 0)"]) for t in tags]
    rules = list(dict.fromkeys((f.case.split(" [")[0] + ": " if column == "empty" else "") + f.rule
                               for f in report.failures if f.case in names))
    if rules:
        return "✗ " + "; ".join(rules)
    return "n/a" if all(n in report.skipped for n in names) else "✓"


def _half(report) -> str:
    full = {f.case.split(" [")[0]: f.rule for f in report.failures if "[float32" in f.case}
    new = [f"{f.case}: {f.rule}" for f in report.failures
           if "[float32" not in f.case and full.get(f.case.split(" [")[0]) != f.rule]
    return "✓" if not new else "✗ " + "; ".join(dict.fromkeys(n.split(": ", 1)[1] for n in new))


def scorecard(rows=ROWS, half: bool = True) -> str:
    """The Markdown table: one row per implementation, one column per rule (float32 on the CPU),
    and one for what half precision adds."""
    lines = ["| implementation | signature | " + " | ".join(COLUMNS) + (" | float16, bfloat16 |" if half else " |"),
             "|" + "---|" * (len(COLUMNS) + 2 + half)]
    for name, fn, sig, package, options in rows:
        version = _version(package)
        if not version:
            print(f"{name}: {package} is not installed, left out", file=sys.stderr)
            continue
        report = check(fn, signature=sig, dtypes=(torch.float32, *HALF) if half else (torch.float32,), **options)
        cells = [_cell(report, c, (torch.float32,)) for c in COLUMNS] + ([_half(report)] if half else [])
        lines.append(f"| {name} ({version}) | `{sig}` | " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(scorecard())
