"""torch.compile of MultiHeadAttention and a Transformer layer matches eager; ONNX export of
MultiHeadAttention runs in onnxruntime and matches (fully masked rows included)."""

from __future__ import annotations

import importlib.util
import shutil

import pytest
import torch

from attnlab.nn import MultiHeadAttention, TransformerEncoderLayer
from attnlab.nn.backends import BlockSparse

HAS_ORT = all(importlib.util.find_spec(m) is not None for m in ("onnx", "onnxruntime", "onnxscript"))
HAS_CXX = shutil.which("g++") is not None or shutil.which("c++") is not None


pytestmark = pytest.mark.usefixtures("one_thread")


class _Padded(torch.nn.Module):
    """MultiHeadAttention with a (b, k) padding mask as a second input (what is exported)."""

    def __init__(self, m: MultiHeadAttention):
        super().__init__()
        self.m = m

    def forward(self, x: torch.Tensor, pad: torch.Tensor) -> torch.Tensor:
        return self.m(x, mask=pad)[0]


@pytest.mark.skipif(not HAS_CXX, reason="torch.compile on CPU needs a C++ compiler (g++)")
def test_torch_compile_matches_eager():
    """One compile (they are slow on CPU): a layer whose MultiHeadAttention has GQA heads and RoPE."""
    torch.manual_seed(0)
    layer = TransformerEncoderLayer(16, 4, ffn_dim=32, dropout=0.0, norm_first=True, num_kv_heads=2, rope=True).eval()
    x = torch.randn(2, 6, 16)
    pad = torch.tensor([[True] * 6, [True] * 4 + [False] * 2])
    compiled = torch.compile(layer, dynamic=False)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x, mask=pad), layer(x, mask=pad), atol=1e-5, rtol=0)


@pytest.mark.skipif(not HAS_CXX, reason="torch.compile on CPU needs a C++ compiler (g++)")
def test_torch_compile_of_a_sparse_pattern_module_matches_eager():
    """The block-sparse kernel is one custom op (torch.library) in the compiled graph: forward and gradients match eager."""
    from attnlab import patterns as P
    from attnlab.nn import MultiHeadAttention

    torch.manual_seed(0)
    m = MultiHeadAttention(16, 4, backend=BlockSparse(P.sliding_window(3) | P.global_tokens([0]), block=8))
    x = torch.randn(2, 21, 16, requires_grad=True)
    pad = torch.tensor([[True] * 21, [True] * 15 + [False] * 6])
    ref = m(x, mask=pad)[0]
    (g_ref,) = torch.autograd.grad(ref.sum(), x)
    out = torch.compile(m, dynamic=False)(x, mask=pad)[0]
    (g,) = torch.autograd.grad(out.sum(), x)
    torch.testing.assert_close(out, ref, atol=1e-6, rtol=0)
    torch.testing.assert_close(g, g_ref, atol=1e-6, rtol=0)


@pytest.mark.skipif(not HAS_ORT, reason="onnx, onnxruntime or onnxscript not installed (pip install -e '.[onnx]')")
def test_onnx_export_runs_in_onnxruntime_and_matches(tmp_path):
    import onnxruntime as ort

    torch.manual_seed(0)
    m = MultiHeadAttention(16, 4).eval()
    with torch.no_grad():
        m.in_proj_bias.normal_()
    model = _Padded(m).eval()
    x = torch.randn(2, 5, 16)
    pad = torch.tensor([[True] * 5, [True] * 3 + [False] * 2])
    path = tmp_path / "mha.onnx"
    torch.onnx.export(model, (x, pad), str(path), dynamo=True, input_names=["x", "pad"], verbose=False)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for p in (pad, torch.tensor([[True] * 5, [False] * 5])):  # the second: a fully padded sequence
        (got,) = sess.run(None, {"x": x.numpy(), "pad": p.numpy()})
        with torch.no_grad():
            want = model(x, p).numpy()
        assert abs(got - want).max() < 1e-5
