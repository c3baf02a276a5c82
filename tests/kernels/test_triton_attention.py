"""The Triton forward kernel that loads masked keys and values as zeros, run on the CPU under Triton's
interpreter (``TRITON_INTERPRET=1``, in a worker process started with it) and, where there is a CUDA
device, compiled; against float64 NumPy attention written here, with NaN and inf planted in the keys and
values the mask forbids and in some it allows."""

from __future__ import annotations

import importlib
import importlib.util
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor

import numpy as np
import pytest
import torch

NAME = "attnlab.kernels.triton_attention"
NO_TRITON = ("Triton is not installed (pip install triton==3.9.0; the dev extra installs it on Linux x86_64): "
             "the kernel cannot run, not even under Triton's interpreter")
# x − x on an inf, in the interpreter's arithmetic and in the reference: the NaN it gives is the point
pytestmark = pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")


@pytest.fixture(scope="module")
def interpreted():
    """``triton_attention`` called in a fresh Python started with TRITON_INTERPRET=1, on CPU tensors.

    Triton reads TRITON_INTERPRET when a function is decorated with ``@triton.jit``, and its own
    library functions (``tl.sum``, ``tl.max``, ...) are decorated when ``triton.language`` is first
    imported: in this process another test (or torch) may have imported Triton already, compiled.
    One worker process for the whole file: it starts in about as long as ``import torch`` takes."""
    if importlib.util.find_spec("triton") is None:
        pytest.skip(NO_TRITON)
    with pytest.MonkeyPatch.context() as env:
        env.setenv("TRITON_INTERPRET", "1")  # inherited by the worker when it starts (spawn: a fresh Python)
        pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
        assert pool.submit(os.getenv, "TRITON_INTERPRET").result(timeout=120) == "1"
    kernel = importlib.import_module(NAME).triton_attention  # pickled by name: imported in the worker
    with pool:
        yield lambda *args, **kwargs: pool.submit(kernel, *args, **kwargs).result(timeout=120)


def _np_attention(q, k, v, allowed):
    """float64 softmax(q kᵀ/√d over the allowed keys) v; a row with none is zero."""
    q, k, v = (np.asarray(t, dtype=np.float64) for t in (q, k, v))
    s = np.where(allowed, q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1]), -np.inf)
    top = np.where(allowed.any(-1, keepdims=True), s.max(-1, keepdims=True), 0.0)
    e = np.where(allowed, np.exp(s - top), 0.0)
    den = e.sum(-1, keepdims=True)
    return np.divide(e, den, out=np.zeros_like(e), where=den > 0) @ v


def _qkv(q_len, k_len, d=8, d_v=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(2, 2, n, f, generator=g) for n, f in ((q_len, d), (k_len, d), (k_len, d_v))]


def test_without_triton_the_call_says_what_it_needs(monkeypatch):
    mod = importlib.import_module(NAME)
    monkeypatch.setattr(mod, "triton", None)  # as where Triton is not installed (the import failed)
    with pytest.raises(ValueError) as e:
        mod.triton_attention(*_qkv(3, 3))
    assert str(e.value) == "triton_attention needs Triton (pip install triton); it is not installed here"


@pytest.mark.parametrize("q_len,k_len,d,d_v", [(5, 7, 8, 8), (20, 20, 4, 6), (3, 33, 16, 8)])
def test_padding_loads_the_padded_keys_as_zeros_nan_there_changes_nothing(q_len, k_len, d, d_v, interpreted):
    q, k, v = _qkv(q_len, k_len, d, d_v)
    lengths = [k_len, 2]
    k[1, :, 2:], v[1, :, 3] = float("nan"), float("inf")  # the padded keys and values of sequence 1
    out = interpreted(q, k, v, lengths=torch.tensor(lengths))
    allowed = (np.arange(k_len)[None, :] < np.array(lengths)[:, None])[:, None, None, :]
    want = _np_attention(q, np.nan_to_num(k.numpy()), np.nan_to_num(v.numpy(), posinf=0.0), allowed)
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("q_len,k_len", [(6, 6), (3, 9), (17, 17)])
def test_causal_a_nan_future_key_reaches_only_the_rows_that_may_attend_it(q_len, k_len, interpreted):
    q, k, v = _qkv(q_len, k_len, seed=1)
    k[:, :, k_len - 2, 1], v[:, :, k_len - 1, 0] = float("nan"), float("inf")
    out = interpreted(q, k, v, causal=True)
    allowed = np.arange(k_len)[None, :] <= np.arange(q_len)[:, None] + (k_len - q_len)
    want = _np_attention(q, k.nan_to_num(0.0, 0.0, 0.0), v.nan_to_num(0.0, 0.0, 0.0), allowed)
    first_hit = q_len - 2  # query i sees keys <= i + k - q: row q - 2 is the first to see key k - 2
    np.testing.assert_allclose(out[:, :, :first_hit].numpy(), want[:, :, :first_hit], rtol=1e-5, atol=1e-6)
    assert out[:, :, first_hit:].isnan().all()  # every feature of the rows that may attend it


def test_an_allowed_nan_value_a_nan_query_and_an_empty_sequence(interpreted):
    q, k, v = _qkv(4, 5, seed=2)
    v[0, 1, 3, 2] = float("nan")  # allowed for every row of (0, 1): those rows are NaN, whole
    q[0, 0, 2, 0] = float("inf")  # its own row only
    q[1, 0, 1, 0] = float("nan")  # in a sequence with no key: zeros win
    out = interpreted(q, k, v, lengths=torch.tensor([5, 0]))
    assert out[0, 1].isnan().all() and out[0, 0, 2].isnan().all()
    assert torch.isfinite(out[0, 0, [0, 1, 3]]).all()
    assert torch.equal(out[1], torch.zeros_like(out[1]))
    allowed = np.ones((4, 5), dtype=bool)
    np.testing.assert_allclose(out[0, 0, [0, 1, 3]].numpy(), _np_attention(q[0, 0], k[0, 0], v[0, 0], allowed)[[0, 1, 3]],
                               rtol=1e-5, atol=1e-6)


@pytest.mark.cuda
@pytest.mark.parametrize("causal", [False, True])
def test_cuda_the_compiled_kernel_keeps_the_rule_in_float32(causal):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device: the compiled kernel runs on CUDA only (on the CPU the tests above run it "
                    "under Triton's interpreter)")
    mod = importlib.import_module(NAME)
    if mod.triton is None:
        pytest.skip(NO_TRITON)
    q, k, v = _qkv(70, 100, 64, 32, seed=3)
    lengths = [100, 40]
    k[1, :, 40:], v[1, :, 50] = float("nan"), float("inf")  # padded: never read
    k[0, :, 99, 3] = float("nan")  # real: the rows that may attend key 99 are NaN
    out = mod.triton_attention(q.cuda(), k.cuda(), v.cuda(), lengths=torch.tensor(lengths), causal=causal).cpu()
    allowed = (np.arange(100)[None, :] < np.array(lengths)[:, None])[:, None, None, :]
    if causal:
        allowed = allowed & (np.arange(100)[None, :] <= np.arange(70)[:, None] + 30)
    want = _np_attention(q, k.nan_to_num(0.0, 0.0, 0.0), v.nan_to_num(0.0, 0.0, 0.0), allowed)
    sees_nan = np.broadcast_to(allowed[..., 99], want.shape[:-1]).copy()  # (b, h, q)
    sees_nan[1] = False
    assert out.isnan().all(-1).numpy().tolist() == sees_nan.tolist()
    np.testing.assert_allclose(out.numpy()[~sees_nan], want[~sees_nan], rtol=1e-5, atol=1e-5)  # TF32: ~1e-3
