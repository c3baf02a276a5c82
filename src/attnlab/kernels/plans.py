"""A plan: one mask (a pattern at length n) prepared for the kernels, a value the caller holds.

    plan = kernels.plan(pattern, n, block=64, device="cpu")
    out, _ = kernels.block_sparse_attention(q, k, v, plan)      # q, k, v (b, h, n, d)

A ``Plan`` is the one prepared form of one mask. Its forms are built on first use and kept on the
plan itself, in ``plan.forms`` (nothing is kept in a module):

* the parts of the pattern (``parts.split``: its sliding window, its global tokens, the rest);
* the CPU tiles (``tiles.plan``) of the whole pattern and of its rest, per b·h (the groups are sized
  to a working-set budget that depends on b·h);
* the CUDA ``BlockMask`` of ``flex_attention`` (``flex_mask.block_mask``), per flex tile size.

``plan(pattern, n, ...)`` returns the plan held on the pattern (``pattern.kernel_plans``, a dict
keyed by (n, block, device), dropped with the pattern), so a call with a pattern, which builds its
plan through ``plan``, builds it once per pattern, n, block and device. ``Plan(pattern, n, ...)``
builds a plan that nothing else holds.

A plan is made for one n and one device: a call with tensors of another length or on another device
raises a ValueError naming both (``Plan.check``).

The custom CPU op (``block_sparse``) takes numbers, not Python objects: a plan goes in as its number
``plan.id``, found again through ``_LIVE`` (weak references only: a registry of the live plans,
not a cache; a plan that nobody holds is gone, and its entry is dropped when the next plan is made).
A plain dict of weak references, not a ``WeakValueDictionary``: that one deletes entries from
within the garbage collector, and ``torch.compile``, which reads the dict while it traces a call,
then met "dictionary changed size during iteration".
"""

from __future__ import annotations

import itertools
import weakref
from typing import TYPE_CHECKING, Any

import torch

from ..patterns import GlobalTokens, Pattern, Window
from .flex_mask import block_mask
from .parts import split
from .tiles import Tiles
from .tiles import plan as build_tiles

if TYPE_CHECKING:
    from torch.nn.attention.flex_attention import BlockMask

_LIVE: dict[int, weakref.ref] = {}  # plan.id → a weak reference to the plan (the op's numbers)
_NEXT = itertools.count(1)


def _device(device: torch.device | str) -> torch.device:
    try:
        return torch.device(device)
    except (TypeError, RuntimeError):
        raise ValueError(f"device must be a torch.device or a device name such as 'cpu' or 'cuda'; got {device!r}") from None


class Plan:
    """``pattern`` at length ``n`` in tiles of ``block`` for tensors on ``device``; see the module docstring.

    Attributes: ``pattern``, ``n``, ``block``, ``device``, ``id`` (the custom op's number),
    ``parts`` (window, global tokens, rest), ``forms`` (what it has built, by key)."""

    def __init__(self, pattern: Pattern, n: int, *, block: int = 64, device: torch.device | str = "cpu"):
        if not isinstance(pattern, Pattern):
            raise ValueError(f"pattern must be an attnlab.patterns.Pattern; got {type(pattern).__name__}")
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ValueError(f"n must be a non-negative integer (the sequence length); got {n!r}")
        if isinstance(block, bool) or not isinstance(block, int) or block < 1:
            raise ValueError(f"block must be a positive integer; got {block!r}")
        self.pattern, self.n, self.block, self.device = pattern, n, block, _device(device)
        self.parts: tuple[Window | None, GlobalTokens | None, Pattern | None] = split(pattern)
        self.forms: dict[tuple[Any, ...], Any] = {}
        self.id = next(_NEXT)
        for number in [n for n, ref in _LIVE.items() if ref() is None]:  # plans that nobody holds now
            del _LIVE[number]
        _LIVE[self.id] = weakref.ref(self)

    def __repr__(self) -> str:
        return f"Plan({self.pattern!r}, n={self.n}, block={self.block}, device={str(self.device)!r})"

    def check(self, n: int, device: torch.device) -> None:
        """Raise a ValueError unless tensors of length ``n`` on ``device`` fit this plan."""
        if n != self.n:
            raise ValueError(f"this plan was built for n={self.n}; the tensors have n={n} "
                             f"(build a plan for n={n}: attnlab.kernels.plan(pattern, {n}))")
        same = device.type == self.device.type and (device.index is None or self.device.index is None
                                                     or device.index == self.device.index)
        if not same:
            raise ValueError(f"this plan was built for device {str(self.device)!r}; the tensors are on "
                             f"{str(device)!r} (build a plan with device={str(device)!r})")

    def tiles(self, bh: int = 1, *, rest: bool = False) -> Tiles:
        """The CPU tiles of the whole pattern (or, ``rest=True``, of its rest beside the window and the
        global tokens; the caller checks ``parts[2]`` is not None) for b·h = ``bh``; built once, kept in ``forms``."""
        key = ("tiles", "rest" if rest else "whole", bh)
        if key not in self.forms:
            pattern = self.parts[2] if rest else self.pattern
            assert pattern is not None  # (rest=True only when the pattern has a rest)
            self.forms[key] = build_tiles(pattern, self.n, self.block, bh)
        tiles: Tiles = self.forms[key]
        return tiles

    def block_mask(self, block: int) -> BlockMask:
        """flex's ``BlockMask`` of the pattern at n on the plan's device, tiles of ``block``; built once, kept in ``forms``."""
        key = ("block_mask", block)
        if key not in self.forms:
            self.forms[key] = block_mask(self.pattern, self.n, self.device, block)
        return self.forms[key]

    def _any_tiles(self) -> Tiles:
        """Tiles of the whole pattern for any b·h (their counts do not depend on it): held ones first."""
        held = [t for key, t in self.forms.items() if key[:2] == ("tiles", "whole")]
        return held[0] if held else self.tiles()

    @property
    def nnz_blocks(self) -> int:
        """The non-empty tiles of the pattern at n."""
        return self._any_tiles().nnz_blocks

    @property
    def allowed(self) -> int:
        """The allowed (query, key) pairs at n."""
        return self._any_tiles().allowed

    @property
    def n_blocks(self) -> int:
        return -(-self.n // self.block)


def plan(pattern: Pattern, n: int, block: int = 64, bh: int | None = None, *,
         device: torch.device | str = "cpu") -> Plan:
    """The plan of ``pattern`` at length n (tiles of ``block``, for tensors on ``device``), held on the
    pattern (``pattern.kernel_plans``): the same object for the same (n, block, device). ``bh``: also
    build its CPU tiles for b·h heads now (a warm-up; otherwise on the first call)."""
    if not isinstance(pattern, Pattern):
        raise ValueError(f"pattern must be an attnlab.patterns.Pattern; got {type(pattern).__name__}")
    dev = _device(device)
    held: dict[tuple[int, int, str], Plan] = pattern.__dict__.setdefault("kernel_plans", {})
    key = (n, block, str(dev))
    if key not in held:
        held[key] = Plan(pattern, n, block=block, device=dev)
    if bh is not None:
        held[key].tiles(bh)
    return held[key]


def as_plan(pattern_or_plan: Pattern | Plan, n: int, block: int | None, device: torch.device) -> Plan:
    """A call's plan: the given plan (checked against n, device and block) or the pattern's (``plan``)."""
    if isinstance(pattern_or_plan, Plan):
        pattern_or_plan.check(n, device)
        if block is not None and block != pattern_or_plan.block:
            raise ValueError(f"block={block} was given with a plan built for block={pattern_or_plan.block}; "
                             "leave block out (the plan's is used) or build a plan with this block")
        return pattern_or_plan
    if not isinstance(pattern_or_plan, Pattern):
        raise ValueError(f"pattern must be an attnlab.patterns.Pattern or an attnlab.kernels.Plan; "
                         f"got {type(pattern_or_plan).__name__}")
    return plan(pattern_or_plan, n, 64 if block is None else block, device=device)


def live(plan_id: int) -> Plan:
    """The live plan with this number (the custom op's argument)."""
    pl: Plan | None = _LIVE[plan_id]()  # KeyError: no such number
    if pl is None:
        raise KeyError(plan_id)  # a plan that nobody holds any more
    return pl


__all__ = ["Plan", "plan"]
