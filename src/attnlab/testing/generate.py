"""Generated inputs, with hypothesis (imported only when generation is asked for).

``specs(signature)`` is a hypothesis strategy of ``Spec``: a shape (b, h, q, k, d), zero lengths
included; a mask (none, a (b, k) key padding, a (q, k) mask broadcast over batch and heads, a random
(b, h, q, k) one, or a random one whose first query of every head is fully masked); and what is
planted at the keys no query may attend (nothing, NaN in the values, inf in the keys).
``build(spec)`` turns one into a case's input; ``check(fn, examples=N)`` tries N of them and reports
the first failure, shrunk by hypothesis to the smallest spec that still fails.

In your own property tests::

    from hypothesis import given
    from attnlab.testing import judge
    from attnlab.testing.generate import build, specs

    @given(specs())
    def test_mine(spec):
        name, s = build(spec)  # ``s.allow``: bool, True = may attend
        judge(name, my_attention(s.q, s.k, s.v, s.allow), s.q, s.k, s.v, allow=s.allow, grad=False)
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

import torch

from .cases import Setup
from .reference import allowed
from .report import HUNG
from .signatures import signature as _signature

MASKS = ("none", "key padding", "broadcast (q, k)", "random", "fully masked rows")  # simplest first
PLANTS = (None, "masked NaN value", "masked inf key")  # the names ``judge`` knows them by


@dataclass(frozen=True)
class Spec:
    """One generated input: its shape, its mask, what is planted at unattended keys, the seed of its values."""

    b: int
    h: int
    q: int
    k: int
    d: int
    mask: str
    plant: str | None
    seed: int


def _hypothesis():
    try:
        import hypothesis
    except ImportError as e:
        raise ImportError("generated inputs (examples=N) need hypothesis: pip install 'attnlab[testing]'") from e
    return hypothesis


def specs(signature: str = "qkv_mask"):
    """A hypothesis strategy of the ``Spec``s that ``signature`` can express."""
    st = _hypothesis().strategies
    sig = _signature(signature)
    masks = MASKS if sig.pairs else MASKS[:2] if signature == "qkv_padding" else MASKS[:1]
    plants = PLANTS if len(masks) > 1 else PLANTS[:1]  # no mask: no key is unattended
    return st.builds(Spec, b=st.integers(0, 3), h=st.integers(1, 3), q=st.integers(0, 5), k=st.integers(0, 6),
                     d=st.integers(1, 4), mask=st.sampled_from(masks), plant=st.sampled_from(plants),
                     seed=st.integers(0, 2**16))


def _mask(spec: Spec, g: torch.Generator) -> torch.Tensor:
    b, h, n, m = spec.b, spec.h, spec.q, spec.k
    if spec.mask == "none":
        return torch.ones(1, 1, 1, m, dtype=torch.bool)
    shape = {"key padding": (b, 1, 1, m), "broadcast (q, k)": (n, m)}.get(spec.mask, (b, h, n, m))
    allow = torch.rand(shape, generator=g) < 0.7
    if spec.mask == "fully masked rows" and n:
        allow[..., 0, :] = False
    return allow


def build(spec: Spec) -> tuple[str, Setup]:
    """(the case name ``judge`` applies, the input) for ``spec``; float64, ``allow`` True = may attend."""
    g = torch.Generator().manual_seed(spec.seed)
    q, k, v = (torch.randn(spec.b, spec.h, n, spec.d, generator=g, dtype=torch.float64)
               for n in (spec.q, spec.k, spec.k))
    allow = _mask(spec, g)
    if spec.plant:
        unattended = ~allowed(allow, False, (spec.b, spec.h, spec.q, spec.k), "cpu").any(-2)  # (b, h, k)
        (v if spec.plant == "masked NaN value" else k)[unattended] = (
            torch.nan if spec.plant == "masked NaN value" else torch.inf)
    return spec.plant or "values", Setup(q, k, v, allow)


class _Hung(Exception):
    """A generated input made the function hang: stop searching (each further try could hang too)."""


def smallest_failure(attempt: Callable, signature: str, examples: int, seed: int):
    """Try ``examples`` generated inputs with ``attempt(name, setup)`` (``None`` = passed); the
    failure of the smallest failing spec hypothesis shrinks to, or ``None`` if all passed. A call that
    hangs (``check``'s time limit) is returned at once, not shrunk."""
    hypothesis = _hypothesis()
    from hypothesis.errors import NoSuchExample

    hung: list = []  # the first hang: after it, no input is tried again (hypothesis shrinks on any error)

    def fails(spec: Spec) -> bool:
        if not hung:
            found = attempt(*build(spec))
            if found is None or found[0] != HUNG:
                return found is not None
            hung.append(found)
        raise _Hung  # one place, so that hypothesis sees one error and raises it as it is

    # report_multiple_bugs=False: stop generating at the first failure. Otherwise hypothesis keeps looking
    # for up to 10 s after it, so what it shrinks would depend on how fast the machine is.
    settings = hypothesis.settings(max_examples=examples, database=None, deadline=None, report_multiple_bugs=False,
                                   suppress_health_check=list(hypothesis.HealthCheck))
    try:
        spec = hypothesis.find(specs(signature), fails, settings=settings, random=random.Random(seed))
    except NoSuchExample:
        return None
    except Exception:
        if hung:  # _Hung, or an exception group of it
            return hung[0]
        raise
    return attempt(*build(spec))

__all__ = ["MASKS", "PLANTS", "Spec", "build", "smallest_failure", "specs"]
