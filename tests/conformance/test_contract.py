"""The contract, checked over every registered mechanism and every public functional entry point.

The entries (how to build and call each one) are in ``entries.py``; a name in
``attnlab.available()`` without an entry fails ``test_every_registered_name_has_an_entry``.
Each check is compared against an independent run of the same entry: the
clean run (for the masking checks), float64 (for the dtype budgets),
``torch.autograd.gradcheck`` (finite differences), eager (for compile). The rules themselves
(a planted NaN/inf leaves outputs and gradients untouched, a fully masked row is zero with finite
gradients, an empty input's shape, a budget around float64) are ``attnlab.testing.rules``' functions,
the ones ``attnlab.testing.check`` applies to anyone's attention.
"""

from __future__ import annotations

import math

import pytest
import torch
from conformance.entries import ENTRIES, KNOWN_GAPS, SPARSE_KERNEL_XFAIL, Entry

import attnlab
from attnlab.testing.rules import close, finite_gradients, has_shape, rows_zero, untouched

pytestmark = pytest.mark.usefixtures("one_thread")
TOL = 1e-6
BUDGET = {torch.float32: 1e-5, torch.bfloat16: 6e-2, torch.float16: 1e-2}  # max |x - x64| ≤ budget · (1 + |x64|)
POISONS = {"nan": float("nan"), "+inf": float("inf"), "-inf": float("-inf")}


def _params(check: str, cases):
    """pytest params for (entry name, *rest) with the sparse-kernel xfail marks from the one set."""
    out = []
    for case in cases:
        name = case[0] if isinstance(case, tuple) else case
        marks = ()
        extra = tuple(str(c) for c in case[1:2]) if isinstance(case, tuple) else ()
        if (name, check) in SPARSE_KERNEL_XFAIL or (name, check, *extra) in SPARSE_KERNEL_XFAIL:
            marks = (pytest.mark.xfail(reason="a known gap of the sparse kernel (SPARSE_KERNEL_XFAIL)", strict=True),)
        elif (name, check) in KNOWN_GAPS:
            marks = (pytest.mark.xfail(reason=KNOWN_GAPS[(name, check)], strict=True),)
        out.append(pytest.param(*(case if isinstance(case, tuple) else (case,)), marks=marks,
                                id="-".join(map(str, case if isinstance(case, tuple) else (case,)))))
    return out


def _entries(pred=lambda e: True) -> list[str]:
    return [n for n, e in ENTRIES.items() if pred(e)]


def _pad(b: int, k: int, masked: int = 2) -> torch.Tensor:
    """(b, k) bool, True = real: the last ``masked`` positions of batch 1 are padding."""
    pad = torch.ones(b, k, dtype=torch.bool)
    pad[1, k - masked:] = False
    return pad


def _poison(entry: Entry, case, positions: torch.Tensor, value: float, batch: int | None = 1) -> None:
    """Write ``value`` into every key/value input at ``positions`` (of batch ``batch``, or all)."""
    with torch.no_grad():
        for name in entry.kv:
            t = case.inputs[name]
            sel = t if batch is None else t[batch]
            axis = entry.kv_axis if batch is None else entry.kv_axis - 1
            sel.index_fill_(axis, positions, value)


def _grads(case, out: torch.Tensor, g: torch.Tensor, params: bool = True) -> list[torch.Tensor]:
    leaves = [*case.inputs.values(), *(case.params if params else [])]
    leaves = [t for t in leaves if t.requires_grad]
    got = torch.autograd.grad((out * g).sum(), leaves, allow_unused=True)
    return [torch.zeros_like(t) if x is None else x for t, x in zip(leaves, got)]


def _named(grads: list[torch.Tensor]) -> dict[str, torch.Tensor]:
    return {f"input or parameter {i}": g for i, g in enumerate(grads)}


def test_every_registered_name_has_an_entry():
    missing = sorted(set(attnlab.available()) - set(ENTRIES))
    assert not missing, f"add a conformance entry (tests/conformance/entries.py) for: {missing}"


# ---- masked positions never influence anything ---------------------------------------------------

MASKED = [(n, p, v) for n in _entries(lambda e: e.masked and e.kv) for p in ENTRIES[n].paths for v in POISONS]


@pytest.mark.parametrize("name,path,poison", _params("masked_positions", MASKED))
def test_nonfinite_at_padded_positions_changes_nothing(name, path, poison):
    entry = ENTRIES[name]
    runs = []
    for value in (None, POISONS[poison]):
        case = entry.make()
        k = case.inputs[entry.kv[0]].shape[entry.kv_axis]
        pad = _pad(2, k)
        if value is not None:
            _poison(entry, case, torch.arange(k - 2, k), value)
        out, _ = case.run(path, pad, False)
        g = torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view(out.shape)
        runs.append((out, _grads(case, out, g)))
    (out0, g0), (out1, g1) = runs
    planted = f"{poison} in a masked key or value"
    untouched(planted, "the output", out1, out0, atol=TOL)
    for i, (a, b) in enumerate(zip(g1, g0)):
        untouched(planted, f"gradient {i} (inputs, then parameters)", a, b, atol=TOL)
    if entry.self_attention:  # padded tokens are not queries: zero output
        rows_zero(out0[1, -2:], what="a padded query's row")


CAUSAL = [(n, p) for n in _entries(lambda e: e.causal) for p in ENTRIES[n].paths if p in ("fast", "weights", "trace")]


@pytest.mark.parametrize("name,path", _params("causal_future", CAUSAL))
def test_nonfinite_in_a_future_key_never_reaches_earlier_rows(name, path):
    entry = ENTRIES[name]
    runs, j = [], 3
    for value in (None, float("nan")):
        case = entry.make(q=6, k=6)
        if value is not None:
            _poison(entry, case, torch.tensor([j]), value, batch=None)
        out, _ = case.run(path, None, True)
        rows = torch.arange(out.shape[case.q_axis]) < j
        shape = [1] * out.dim()
        shape[case.q_axis] = -1
        g = torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view(out.shape) * rows.view(shape)
        early = out.narrow(case.q_axis, 0, j)
        runs.append((early, _grads(case, torch.where(rows.view(shape), out, 0.0), g, entry.params_under_causal)))
    (out0, g0), (out1, g1) = runs
    untouched("a NaN in a future key", "an earlier row", out1, out0, atol=TOL)
    for i, (a, b) in enumerate(zip(g1, g0)):
        untouched("a NaN in a future key", f"gradient {i}", a, b, atol=TOL)


FULLY = [(n, p) for n in _entries(lambda e: e.masked and e.kv) for p in ENTRIES[n].paths]


@pytest.mark.parametrize("name,path", _params("fully_masked", FULLY))
def test_fully_masked_rows_give_zeros_and_finite_gradients(name, path):
    entry = ENTRIES[name]
    case = entry.make()
    k = case.inputs[entry.kv[0]].shape[entry.kv_axis]
    pad = _pad(2, k, masked=k)  # batch 1 may attend nothing
    out, w = case.run(path, pad, False)
    if w is not None:
        rows_zero(w[1], what="a fully masked row's weights")
    if entry.context_is_output:
        rows_zero(out[1])
    finite_gradients(_named(_grads(case, out, torch.ones_like(out))), "fully masked row")


# ---- empty and degenerate input -------------------------------------------------------------

EMPTY = [(n, which) for n, e in ENTRIES.items() for which in e.sizes]


@pytest.mark.parametrize("name,which", _params("empty", EMPTY))
def test_empty_input_gives_an_empty_output_of_the_right_shape(name, which):
    """b = 0 or q = 0: an empty output; k = 0 (nothing to attend): every row is fully masked, zeros."""
    entry = ENTRIES[name]
    square = entry.self_attention or name.startswith("kernels.")
    sizes = {"b": 2, "q": 6 if square else 4, "k": 6}
    want = list(entry.make(**sizes).run(entry.paths[0], None, False)[0].shape)
    sizes[which] = 0
    if square and which in "qk":
        sizes["q"] = sizes["k"] = 0
    case = entry.make(**sizes)
    out, _ = case.run(entry.paths[0], None, False)
    if which == "b":
        want[0] = 0
    elif which == "q" or square:
        want[case.q_axis] = 0
    elif not entry.masked or entry.output_has_k:  # scores or weights (..., q, k): the k axis is the last
        want[-1] = 0
    has_shape(out, tuple(want))
    if which == "k" and entry.masked and entry.context_is_output and not entry.output_has_k:
        rows_zero(out, what="a row with no keys")
    finite_gradients(_named(_grads(case, out, torch.ones_like(out))))


# ---- numerics -----------------------------------------------------------------------------------

@pytest.mark.parametrize("name", _params("gradcheck", _entries(lambda e: e.gradcheck)))
def test_float64_gradcheck(name):
    entry = ENTRIES[name]
    case = entry.make(b=2, q=3, k=4) if not entry.self_attention else entry.make(b=2, q=4, k=4)
    pad = _pad(2, case.inputs[entry.kv[0]].shape[entry.kv_axis], 1) if entry.masked and entry.kv else None
    names = list(case.inputs)

    def f(*xs):
        for n, x in zip(names, xs):
            case.inputs[n] = x
        return case.run(entry.paths[0], pad, False)[0]

    xs = tuple(case.inputs[n].detach().clone().requires_grad_() for n in names)
    assert torch.autograd.gradcheck(f, xs, eps=1e-6, atol=1e-5)


DTYPES = [(n, str(d).split(".")[1]) for n in ENTRIES for d in BUDGET]


@pytest.mark.parametrize("name,dtype", _params("dtypes", DTYPES))
def test_low_precision_forward_agrees_with_float64(name, dtype):
    entry = ENTRIES[name]
    dt = getattr(torch, dtype)
    pad = _pad(2, 6) if entry.masked and entry.kv else None
    ref = entry.make().run(entry.paths[0], pad, False)[0].detach()
    got = entry.make(dtype=dt).run(entry.paths[0], pad, False)[0].detach().double()
    close(got, ref, BUDGET[dt], f"{dtype} differs from float64 by more than {BUDGET[dt]} · (1 + |x64|)")


BOTH = [n for n, e in ENTRIES.items() if "fast" in e.paths and len(e.paths) > 1]


@pytest.mark.parametrize("name", _params("weights_equal_fast", BOTH))
def test_every_path_agrees_with_the_fast_path(name):
    entry = ENTRIES[name]
    pad = _pad(2, 6) if entry.masked and entry.kv else None
    fast = entry.make().run("fast", pad, False)[0]
    for path in entry.paths[1:]:
        got = entry.make().run(path, pad, False)[0]
        decoding = path in ("cached", "window-cached") and entry.causal  # decoding is causal
        want = entry.make().run("fast", pad, True)[0] if decoding else fast
        torch.testing.assert_close(got, want, atol=1e-10, rtol=0, msg=lambda m, p=path: f"{p}: {m}")


# ---- compile, meta, bad input --------------------------------------------------------------------

@pytest.mark.parametrize("name", _params("compile", _entries(lambda e: e.compile)))
def test_compiles_with_zero_graph_breaks_and_matches_eager(name):
    entry = ENTRIES[name]
    case = entry.make(dtype=torch.float32)
    pad = _pad(2, 6) if entry.masked and entry.kv else None
    path = entry.paths[0]
    names = list(case.inputs)

    def f(*xs):
        for n, x in zip(names, xs):
            case.inputs[n] = x
        return case.run(path, pad, False)[0]

    xs = tuple(case.inputs[n].detach() for n in names)
    torch._dynamo.reset()
    explained = torch._dynamo.explain(f)(*xs)
    assert explained.graph_break_count == 0, [str(r.reason)[:300] for r in explained.break_reasons]
    got = torch.compile(f, fullgraph=True, backend="eager")(*xs)
    torch.testing.assert_close(got, f(*xs), atol=1e-6, rtol=0)


@pytest.mark.parametrize("name", _params("meta", list(ENTRIES)))
def test_meta_device_propagates_shapes(name):
    entry = ENTRIES[name]
    want = entry.make(dtype=torch.float32).run(entry.paths[0], None, False)[0].shape
    pad = None
    case = entry.make(dtype=torch.float32, device="meta")
    if entry.masked and entry.kv:
        pad = _pad(2, case.inputs[entry.kv[0]].shape[entry.kv_axis]).to("meta")
    out = case.run(entry.paths[0], pad, False)[0]
    assert out.device.type == "meta" and out.shape == want


BAD = [(n, what) for n, e in ENTRIES.items() for what in e.bad]


@pytest.mark.parametrize("name,what", _params("bad_input", BAD))
def test_bad_input_raises_a_clear_error(name, what):
    with pytest.raises((ValueError, TypeError)) as info:
        ENTRIES[name].bad[what]()
    msg = str(info.value)
    assert "got" in msg or "must" in msg, msg  # names what was given / expected, not a raw torch error
    assert not isinstance(info.value, RuntimeError)


def test_scale_and_mask_messages_name_the_argument():
    q = torch.randn(1, 3, 4)
    for bad in (float("nan"), 0.0, -1.0, math.inf):
        with pytest.raises(ValueError, match=r"scale must be a finite positive number.*got"):
            attnlab.attention(q, q, q, scale=bad)
    with pytest.raises(TypeError, match=r"query must be a floating-point tensor.*got dtype torch.int64"):
        attnlab.attention(q.long(), q, q)
    with pytest.raises(TypeError, match=r"query, key, value must share one dtype; got query torch.float32, key torch.float64"):
        attnlab.attention(q, q.double(), q.double())
    with pytest.raises(TypeError, match=r"scores' dtype torch.float32; got mask dtype torch.float64"):
        attnlab.attention(q, q, q, mask=torch.zeros(3, 3, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"\+inf"):
        attnlab.attention(q, q, q, mask=torch.full((3, 3), math.inf))
    with pytest.raises(ValueError, match=r"projected_keys must be \(b, k, d\) = \(2, 6, 5\).*got \(2, 5, 5\)"):
        m = attnlab.create("bahdanau", query_dim=4, key_dim=4, attn_dim=5)
        keys = torch.randn(2, 6, 4)
        m(torch.randn(2, 4), keys, projected_keys=m.precompute(keys)[:, :5])
    with pytest.raises(ValueError, match=r"^v must have shape \(5\)"):
        attnlab.scores.additive(q, q, torch.randn(5, 4), torch.randn(5, 4), torch.randn(3))


@pytest.mark.parametrize("positional", ["learned", "rope", "alibi"])
def test_a_four_layer_gpt_compiles_into_one_graph(positional):
    """The trace's ContextVar used to break the graph at every attention (10 graphs, 9 breaks)."""
    from attnlab.models.gpt import GPT, GPTConfig

    torch.manual_seed(0)
    m = GPT(GPTConfig(vocab_size=50, num_layers=4, dim=32, num_heads=4, positional=positional)).eval()
    x = torch.randint(0, 50, (2, 10))
    torch._dynamo.reset()
    explained = torch._dynamo.explain(m)(x)
    assert (explained.graph_count, explained.graph_break_count) == (1, 0), explained.break_reasons
