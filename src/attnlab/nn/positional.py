"""Positional encodings: how order enters attention, which by itself is permutation-invariant.

* **Sinusoidal** (Vaswani et al. 2017, §3.5, https://arxiv.org/abs/1706.03762), added to
  the token embeddings:  PE(p, 2i) = sin(p / 10000^{2i/d}),  PE(p, 2i+1) = cos(p / 10000^{2i/d}).
* **Learned** absolute embeddings (GPT-2 style): a (max_len, d) table, added likewise.
* **Rotary, RoPE** (Su et al. 2021, https://arxiv.org/abs/2104.09864), applied to the query and
  key heads after the split: each pair (x_{2i}, x_{2i+1}) is rotated by the angle p·θ_i,
  θ_i = base^{-2i/d_h}. Then q_mᵀ k_n depends on m − n only (tested as a property).
* **RoPE scaling** (``RotaryEmbedding(d_h, scaling={"type": ..., "factor": s, "original_max_position": L})``),
  for running a model beyond the L positions it was trained on; θ_i = base^{-2i/d_h}, d = d_h:

  ==========  =====================================================================  ==================================
  type        inverse frequencies θ'_i                                               paper
  ==========  =====================================================================  ==================================
  linear      θ_i / s  (position interpolation: position p acts as p / s)            Chen et al. 2023, 2306.15595
  ntk         base' = base · s^{d/(d−2)},  θ'_i = base'^{-2i/d}  ("NTK-aware")       bloc97 2023; Peng et al. 2023 §3.2
  dynamic     ntk with s' = s·n/L − (s − 1) for the current length n > L (else θ)    emozilla 2023; Peng et al. 2023 §3.3
  yarn        θ'_i = (1 − γ_i) θ_i / s + γ_i θ_i,  γ_i = clamp((i − lo)/(hi − lo),   Peng et al. 2023, 2309.00071
              0, 1) ramping between the dims that rotate β_fast and β_slow
              times over L; cos and sin × attention factor √(1/t) = 0.1 ln s + 1
  llama3      λ_i = 2π/θ_i: θ_i / s where λ_i > L/low, θ_i where λ_i < L/high,       Llama 3 (Meta 2024, 2407.21783)
              else (1 − γ_i) θ_i / s + γ_i θ_i, γ_i = (L/λ_i − low)/(high − low)
              (low_freq_factor 1, high_freq_factor 4 by default)
  longrope    θ_i / λ_i with searched per-frequency factors λ: ``short_factor``      Ding et al. 2024, 2402.13753
              for lengths ≤ L, ``long_factor`` beyond; cos and sin ×
              √(1 + ln s / ln L) (or the given attention_factor)
  ==========  =====================================================================  ==================================

  (formulas as in transformers' ``modeling_rope_utils``; ``lo``/``hi`` are
  ⌊d·ln(L/(2π β_fast))/(2 ln base)⌋ and ⌈d·ln(L/(2π β_slow))/(2 ln base)⌉, clipped to [0, d − 1].)
  Dynamic NTK recomputes θ' from ``offset + n`` at every call, and LongRoPE switches to its long
  factors once ``offset + n`` exceeds L: keys cached at an earlier length keep their old rotation
  (as in transformers).
* **T5's relative bias** (Raffel et al. 2020, §2.1, https://arxiv.org/abs/1910.10683): a learned
  scalar per head and *bucket* of the distance j − i, added to the scores; exact buckets for short
  distances, logarithmic ones up to ``max_distance``, bidirectional (encoder) or causal (decoder).
* **ALiBi** (Press et al. 2021, https://arxiv.org/abs/2108.12409): no embedding at all; a
  per-head linear bias on the scores, bias_h(i, j) = −m_h·|i − j|, slopes m_h = 2^{−8(h'+1)/H}
  (geometric; for H not a power of two the paper's interleaving of the next power).

Every encoding takes an ``offset`` (the number of tokens already cached), so cached
decoding sees the same positions as recomputing the whole prefix. Rotary and ALiBi
plug into ``attnlab.nn.MultiHeadAttention(..., rope=True)`` / ``(..., alibi=True)``.
Shapes: embeddings (b, n, d); heads (b, h, n, d_h); ALiBi bias (h, q, k); T5 bias (1, h, q, k).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from .. import _checks


def _base(base: object) -> float:
    """The wavelength base of sinusoidal and rotary encodings: a finite number > 1 (θ_i = base^{-2i/d} falls with i)."""
    return _checks.number("base", base, 1.0, meaning="the wavelength base, e.g. 10000")


def sinusoidal_table(positions: torch.Tensor, dim: int, base: float = 10000.0) -> torch.Tensor:
    """(n,) positions → (n, dim) sinusoidal encodings (sin on even, cos on odd features)."""
    _base(base)
    if dim % 2:
        raise ValueError(f"sinusoidal encodings need an even dim; got {dim}")
    inv = base ** (-torch.arange(0, dim, 2, dtype=torch.float32, device=positions.device) / dim)  # (d/2,)
    angles = positions.float().unsqueeze(-1) * inv  # (n, d/2)
    return torch.stack([angles.sin(), angles.cos()], dim=-1).flatten(-2)  # (n, d): sin, cos interleaved


class SinusoidalPositionalEncoding(nn.Module):
    """x (b, n, d) → x + PE[offset : offset + n]; no parameters, no length limit."""

    def __init__(self, dim: int, *, base: float = 10000.0):
        super().__init__()
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 2 or dim % 2:
            raise ValueError(f"SinusoidalPositionalEncoding needs an even dim >= 2; got {dim!r}")
        _base(base)
        self.dim, self.base = dim, base

    def forward(self, x: torch.Tensor, offset: int = 0, *, positions: torch.Tensor | None = None) -> torch.Tensor:
        """``positions`` (n,): the rows' positions when they are not offset … offset + n − 1 (a shard)."""
        pos = torch.arange(offset, offset + x.shape[-2], device=x.device) if positions is None else _positions(x, positions)
        return x + sinusoidal_table(pos, self.dim, self.base).to(x.dtype)


class LearnedPositionalEmbedding(nn.Module):
    """x (b, n, d) → x + E[offset : offset + n] with a learned (max_len, d) table."""

    def __init__(self, max_len: int, dim: int):
        super().__init__()
        self.max_len = _checks.integer("max_len", max_len)
        _checks.integer("dim", dim)
        self.weight = nn.Parameter(torch.randn(max_len, dim) * 0.02)

    def forward(self, x: torch.Tensor, offset: int = 0, *, positions: torch.Tensor | None = None) -> torch.Tensor:
        """``positions`` (n,): the rows' positions when they are not offset … offset + n − 1 (a shard)."""
        n = x.shape[-2]
        first, last = (offset, offset + n - 1) if positions is None else _span(_positions(x, positions))
        if last >= self.max_len:
            raise ValueError(
                f"positions {first}..{last} exceed the learned table of max_len={self.max_len}; "
                "use a shorter input or a larger max_len (or rope/alibi/sinusoidal, which have no limit)"
            )
        rows = self.weight[offset : offset + n] if positions is None else self.weight[positions]
        return x + rows.to(x.dtype)


def _positions(x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """``positions`` checked: integer (n,) for the n rows of x (b, n, d), none negative."""
    if not isinstance(positions, torch.Tensor) or positions.dtype.is_floating_point or positions.dtype == torch.bool \
            or tuple(positions.shape) != (x.shape[-2],):
        got = f"{positions.dtype} {tuple(positions.shape)}" if isinstance(positions, torch.Tensor) else type(positions).__name__
        raise ValueError(f"positions must be integer ({x.shape[-2]},), one per row of x; got {got}")
    if positions.numel() and int(positions.min()) < 0:
        raise ValueError(f"positions must be >= 0; got {int(positions.min())}")
    return positions.to(x.device)


def _span(positions: torch.Tensor) -> tuple[int, int]:
    return (int(positions.min()), int(positions.max())) if positions.numel() else (0, -1)


# Each scaling type and the keys it reads besides "type", "factor" and "original_max_position" (L).
_SCALING_KEYS: dict[str, tuple[str, ...]] = {
    "linear": (),
    "ntk": (),
    "dynamic": (),
    "yarn": ("beta_fast", "beta_slow", "attention_factor"),
    "llama3": ("low_freq_factor", "high_freq_factor"),
    "longrope": ("short_factor", "long_factor", "attention_factor"),
}
ROPE_SCALING = tuple(_SCALING_KEYS)
_NEEDS_ORIGINAL = ("dynamic", "yarn", "llama3", "longrope")  # the types that read L


def _rope_inv_freq(head_dim: int, base: float) -> torch.Tensor:
    return base ** (-torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)  # (d_h/2,)


def _check_scaling(scaling: dict | None, head_dim: int) -> dict | None:
    if scaling is None:
        return None
    if not isinstance(scaling, dict) or scaling.get("type") not in ROPE_SCALING:
        raise ValueError(
            f"scaling must be None or a dict with 'type' one of {ROPE_SCALING} and 'factor'; got {scaling!r}"
        )
    kind = scaling["type"]
    known = {"type", "factor", "original_max_position", *_SCALING_KEYS[kind]}
    extra = set(scaling) - known
    if extra:
        raise ValueError(f"unknown RoPE scaling keys {sorted(extra)} for type {kind!r}; known: {sorted(known)}")
    _checks.number("scaling['factor']", scaling.get("factor"), 1.0, inclusive=True, meaning="the context extension")
    L = scaling.get("original_max_position")
    if kind in _NEEDS_ORIGINAL or L is not None:
        if isinstance(L, bool) or not isinstance(L, int) or L < 1:
            raise ValueError(
                f"scaling type {kind!r} needs 'original_max_position' (the trained context, an int >= 1); got {L!r}"
            )
    {"yarn": _check_yarn, "llama3": _check_llama3, "longrope": _check_longrope}.get(kind, lambda sc, d: None)(
        scaling, head_dim)
    return dict(scaling)


def _check_yarn(scaling: dict, head_dim: int) -> None:
    """YaRN's optional settings: rotation counts β_fast > β_slow > 0, an attention factor > 0."""
    fast = _checks.number("scaling['beta_fast']", scaling.get("beta_fast", 32.0), 0.0, meaning="rotations over L")
    slow = _checks.number("scaling['beta_slow']", scaling.get("beta_slow", 1.0), 0.0, meaning="rotations over L")
    if fast <= slow:
        raise ValueError(
            f"scaling['beta_fast'] must be greater than scaling['beta_slow'] (the fast dims rotate more often); "
            f"got beta_fast={fast:g}, beta_slow={slow:g}"
        )
    if scaling.get("attention_factor") is not None:
        _checks.number("scaling['attention_factor']", scaling["attention_factor"], 0.0, meaning="None for 0.1 ln s + 1")


def _check_llama3(scaling: dict, head_dim: int) -> None:
    """Llama 3's band: high_freq_factor > low_freq_factor > 0 (wavelengths L/high and L/low bound the ramp)."""
    low = _checks.number("scaling['low_freq_factor']", scaling.get("low_freq_factor", 1.0), 0.0,
                         meaning="wavelengths above L / low_freq_factor are divided by the factor")
    high = _checks.number("scaling['high_freq_factor']", scaling.get("high_freq_factor", 4.0), 0.0,
                          meaning="wavelengths below L / high_freq_factor are kept")
    if high <= low:
        raise ValueError(
            f"scaling['high_freq_factor'] must be greater than scaling['low_freq_factor'] (the kept band is the "
            f"shorter wavelengths); got low_freq_factor={low:g}, high_freq_factor={high:g}"
        )


def _check_longrope(scaling: dict, head_dim: int) -> None:
    """LongRoPE's per-frequency rescale factors: two lists of d_h/2 finite numbers > 0; an attention factor > 0."""
    for name in ("short_factor", "long_factor"):
        f = scaling.get(name)
        ok = isinstance(f, (list, tuple)) and len(f) == head_dim // 2 and all(
            not isinstance(x, bool) and isinstance(x, (int, float)) and math.isfinite(x) and x > 0 for x in f
        )
        if not ok:
            raise ValueError(
                f"scaling type 'longrope' needs scaling[{name!r}], a list of head_dim/2 = {head_dim // 2} finite "
                f"numbers > 0 (one rescale factor per frequency); got {f!r}"
            )
    if scaling.get("attention_factor") is not None:
        _checks.number("scaling['attention_factor']", scaling["attention_factor"], 0.0,
                       meaning="None for sqrt(1 + ln s / ln L)")


def _plain(head_dim: int, base: float, sc: dict) -> tuple[torch.Tensor, float]:
    return _rope_inv_freq(head_dim, base), 1.0


def _linear(head_dim: int, base: float, sc: dict) -> tuple[torch.Tensor, float]:
    return _rope_inv_freq(head_dim, base) / sc["factor"], 1.0


def _ntk(head_dim: int, base: float, sc: dict) -> tuple[torch.Tensor, float]:
    if head_dim == 2:  # one pair, θ_0 = base^0 = 1 whatever the base: NTK's new base changes nothing
        return _rope_inv_freq(head_dim, base), 1.0
    return _rope_inv_freq(head_dim, base * sc["factor"] ** (head_dim / (head_dim - 2))), 1.0


def _yarn(head_dim: int, base: float, sc: dict) -> tuple[torch.Tensor, float]:
    s, L = float(sc["factor"]), sc["original_max_position"]
    beta_fast, beta_slow = sc.get("beta_fast", 32.0), sc.get("beta_slow", 1.0)

    def dim_of(rotations: float) -> float:  # the dimension index that rotates `rotations` times over L positions
        return head_dim * math.log(L / (rotations * 2 * math.pi)) / (2 * math.log(base))

    lo: int = max(math.floor(dim_of(beta_fast)), 0)
    hi: float = min(math.ceil(dim_of(beta_slow)), head_dim - 1)
    hi = hi + 0.001 if lo == hi else hi
    ramp = ((torch.arange(head_dim // 2, dtype=torch.float32) - lo) / (hi - lo)).clamp(0, 1)  # (d_h/2,)
    theta = _rope_inv_freq(head_dim, base)
    keep = 1 - ramp  # γ: 1 for the fast (high-frequency) dims, which keep θ; 0 for the slow ones, θ / s
    inv = theta / s * (1 - keep) + theta * keep
    factor = sc.get("attention_factor")
    return inv, float(0.1 * math.log(s) + 1.0 if factor is None else factor)


def _llama3(head_dim: int, base: float, sc: dict) -> tuple[torch.Tensor, float]:
    """Llama 3: wavelengths λ_i = 2π/θ_i above L/low are interpolated (θ_i / s), below L/high kept, and
    in between θ'_i = (1 − γ_i) θ_i / s + γ_i θ_i with γ_i = (L/λ_i − low) / (high − low)."""
    s, L = float(sc["factor"]), sc["original_max_position"]
    low, high = sc.get("low_freq_factor", 1.0), sc.get("high_freq_factor", 4.0)
    theta = _rope_inv_freq(head_dim, base)
    gamma = ((L * theta / (2 * math.pi) - low) / (high - low)).clamp(0, 1)  # (d_h/2,): L/λ_i = L θ_i / 2π
    return (1 - gamma) * theta / s + gamma * theta, 1.0


def _longrope_factor(sc: dict) -> float:
    """LongRoPE's attention factor: given, else √(1 + ln s / ln L) (1 when s = 1)."""
    s, L, given = float(sc["factor"]), sc["original_max_position"], sc.get("attention_factor")
    if given is not None:
        return float(given)
    return 1.0 if s <= 1.0 or L <= 1 else math.sqrt(1 + math.log(s) / math.log(L))


def _longrope(head_dim: int, base: float, sc: dict, which: str = "short_factor") -> tuple[torch.Tensor, float]:
    """LongRoPE: θ'_i = θ_i / λ_i with the searched factors λ (short ones up to L positions, long ones beyond)."""
    return _rope_inv_freq(head_dim, base) / torch.tensor(sc[which], dtype=torch.float32), _longrope_factor(sc)


# type → (d_h, base, scaling) → (θ' at lengths ≤ L, attention factor)
_INV_FREQ = {"linear": _linear, "ntk": _ntk, "dynamic": _plain, "yarn": _yarn, "llama3": _llama3, "longrope": _longrope}


class RotaryEmbedding(nn.Module):
    """Rotate pairs of features of heads x (b, h, n, d_h) by position: the RoFormer convention.

    ``rope(x, offset)`` treats x[..., i, :] as position ``offset + i``. ``d_h`` must be even.
    ``scaling``: None, or ``{"type": t, "factor": s, "original_max_position": L, ...}`` with t one of
    ``ROPE_SCALING``; yarn also reads ``beta_fast`` (32), ``beta_slow`` (1), ``attention_factor`` (None);
    llama3 ``low_freq_factor`` (1), ``high_freq_factor`` (4); longrope ``short_factor`` and
    ``long_factor`` (d_h/2 numbers each), ``attention_factor`` (None). L is needed by dynamic, yarn,
    llama3 and longrope. ``inv_freq`` (d_h/2,) are the θ'_i in use (for dynamic and longrope: at
    lengths ≤ L); ``attention_factor`` multiplies cos and sin (YaRN's √(1/t), LongRoPE's
    √(1 + ln s / ln L); 1 otherwise).
    """

    theta: torch.Tensor  # (d_h/2,) buffer: θ'_i in use

    def __init__(self, head_dim: int, *, base: float = 10000.0, scaling: dict | None = None):
        super().__init__()
        if isinstance(head_dim, bool) or not isinstance(head_dim, int) or head_dim % 2 or head_dim < 2:
            raise ValueError(f"rotary embeddings need an even head_dim; got {head_dim!r}")
        _base(base)
        self.head_dim, self.base = head_dim, base
        self.scaling = sc = _check_scaling(scaling, head_dim)
        theta, self.attention_factor = _plain(head_dim, base, {}) if sc is None else _INV_FREQ[sc["type"]](head_dim, base, sc)
        self.register_buffer("theta", theta.float(), persistent=False)

    @property
    def inv_freq(self) -> torch.Tensor:
        """θ'_i, (d_h/2,): the angle per position of feature pair i."""
        return self.theta

    def inv_freq_at(self, seq_len: int) -> torch.Tensor:
        """θ' for a sequence of ``seq_len`` positions (differs from ``inv_freq`` only for dynamic NTK, and for
        LongRoPE, whose long factors replace the short ones beyond L)."""
        sc = self.scaling
        if sc is None or sc["type"] not in ("dynamic", "longrope") or seq_len <= sc["original_max_position"]:
            return self.theta
        if sc["type"] == "longrope":
            theta, _ = _longrope(self.head_dim, self.base, sc, "long_factor")
        else:
            s = sc["factor"] * seq_len / sc["original_max_position"] - (sc["factor"] - 1)
            theta, _ = _ntk(self.head_dim, self.base, {"factor": s})
        return theta.float().to(self.theta.device)

    def angles(
        self, n: int, offset: int = 0, device: torch.device | str | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin of p·θ'_i for p = offset … offset+n−1, times the attention factor: each (n, d_h/2)."""
        pos = torch.arange(offset, offset + n, dtype=torch.float32, device=device)
        a = pos.unsqueeze(-1) * self.inv_freq_at(offset + n).to(device)  # (n, d_h/2)
        if self.attention_factor != 1.0:
            return a.cos() * self.attention_factor, a.sin() * self.attention_factor
        return a.cos(), a.sin()

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        if x.shape[-1] != self.head_dim:
            raise ValueError(f"rotary embedding of head_dim={self.head_dim} got heads of size {x.shape[-1]} ({_checks.shape(x)})")
        cos, sin = self.angles(x.shape[-2], offset, x.device)  # (n, d_h/2)
        work = torch.promote_types(x.dtype, torch.float32)  # half precision rotates in float32; float64 stays float64
        cos, sin = cos.to(work), sin.to(work)
        pairs = x.to(work).unflatten(-1, (-1, 2))  # (..., n, d_h/2, 2)
        x1, x2 = pairs[..., 0], pairs[..., 1]
        out = torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)  # (..., n, d_h/2, 2)
        return out.flatten(-2).to(x.dtype)

    def extra_repr(self) -> str:
        sc = "" if self.scaling is None else f", scaling={self.scaling}"
        return f"head_dim={self.head_dim}, base={self.base}{sc}"


def alibi_slopes(num_heads: int) -> torch.Tensor:
    """The paper's head slopes: 2^{-8/H}, 2^{-16/H}, … for H a power of two, interleaved otherwise."""

    def power_of_two(n: int) -> list[float]:
        start = 2 ** (-8 / n)
        return [start ** (i + 1) for i in range(n)]

    _checks.integer("num_heads", num_heads)
    if math.log2(num_heads).is_integer():
        return torch.tensor(power_of_two(num_heads))
    closest = 2 ** math.floor(math.log2(num_heads))
    extra = power_of_two(2 * closest)[0::2][: num_heads - closest]
    return torch.tensor(power_of_two(closest) + extra)


class ALiBi(nn.Module):
    """``alibi(q_len, k_len)`` → (h, q, k) float bias −m_h·|i − j|, queries aligned bottom-right.

    Query i of q sits at position i + (k − q), so a cached decoding step (q = 1)
    gets the last row of the full bias. With a causal mask only j ≤ i counts,
    which is the paper's causal ALiBi; without one it is the symmetric variant.
    """

    slopes: torch.Tensor  # (h,) buffer: m_h

    def __init__(self, num_heads: int):
        super().__init__()
        self.num_heads = num_heads
        self.register_buffer("slopes", alibi_slopes(num_heads), persistent=False)

    def forward(self, q_len: int, k_len: int) -> torch.Tensor:
        q_len, k_len = _checks.integer("q_len", q_len, 0), _checks.integer("k_len", k_len, 0)
        device = self.slopes.device
        i = torch.arange(q_len, device=device).unsqueeze(-1) + (k_len - q_len)
        j = torch.arange(k_len, device=device)
        dist = (i - j).abs().float()  # (q, k)
        return -self.slopes[:, None, None] * dist  # (h, q, k)

    def extra_repr(self) -> str:
        return f"num_heads={self.num_heads}"


def t5_relative_position_bucket(
    relative_position: torch.Tensor, *, bidirectional: bool = True, num_buckets: int = 32, max_distance: int = 128
) -> torch.Tensor:
    """T5's bucket of each relative position (key position − query position, an int tensor), in [0, num_buckets).

    Bidirectional: half the buckets for keys after the query, half for the rest. Causal: only the
    distance into the past counts (keys after the query share bucket 0). Of each half, the first
    ``exact = half // 2`` buckets are the distances 0 … exact − 1; the rest grow logarithmically up to
    ``max_distance``, beyond which every distance shares the last bucket (as in Mesh TensorFlow and
    transformers: ``exact + ⌊ln(n / exact) / ln(max_distance / exact) · (half − exact)⌋`` in float32).
    """
    if bidirectional:
        half = num_buckets // 2
        offset = (relative_position > 0).long() * half  # keys after the query: the upper half
        n = relative_position.abs()
    else:
        half, offset = num_buckets, torch.zeros_like(relative_position, dtype=torch.long)
        n = (-relative_position).clamp(min=0)  # distance into the past; the future counts as 0
    exact = half // 2
    far = n.clamp(min=exact).float() / exact  # ≥ 1 (the near distances take the other branch of the where)
    large = exact + (torch.log(far) / math.log(max_distance / exact) * (half - exact)).long()
    return offset + torch.where(n < exact, n.long(), large.clamp(max=half - 1))


class T5RelativePositionBias(nn.Module):
    """T5's learned relative-position bias (Raffel et al. 2020, §2.1, https://arxiv.org/abs/1910.10683).

    ``bias(q_len, k_len, offset)`` → (1, h, q, k) float bias ``E[bucket(j − (offset + i)), h]``, to pass as
    an additive ``mask`` (T5 also scores without 1/√d: ``MultiHeadAttention(..., scale=1.0)``). Query i
    sits at position ``offset + i`` (the number of cached tokens, for cached decoding), key j at j.
    ``bidirectional=True`` for an encoder, False for a decoder (see ``t5_relative_position_bucket``).

    | paper            | here                                                    |
    |------------------|---------------------------------------------------------|
    | bias table       | ``relative_attention_bias`` (an ``nn.Embedding(num_buckets, h)``, transformers' name) |
    """

    def __init__(self, num_heads: int, *, bidirectional: bool = True, num_buckets: int = 32, max_distance: int = 128):
        super().__init__()
        _checks.integer("num_heads", num_heads)
        _checks.integer("num_buckets", num_buckets, 4 if bidirectional else 2)
        exact = (num_buckets // 2 if bidirectional else num_buckets) // 2
        _checks.integer("max_distance", max_distance, exact + 1)
        self.num_heads, self.bidirectional = num_heads, bool(bidirectional)
        self.num_buckets, self.max_distance = num_buckets, max_distance
        self.relative_attention_bias = nn.Embedding(num_buckets, num_heads)

    def forward(self, q_len: int, k_len: int, offset: int = 0) -> torch.Tensor:
        for name, value in (("q_len", q_len), ("k_len", k_len), ("offset", offset)):
            _checks.integer(name, value, 0)
        device = self.relative_attention_bias.weight.device
        i = torch.arange(offset, offset + q_len, device=device).unsqueeze(-1)  # (q, 1)
        j = torch.arange(k_len, device=device)  # (k,)
        buckets = t5_relative_position_bucket(j - i, bidirectional=self.bidirectional, num_buckets=self.num_buckets,
                                              max_distance=self.max_distance)  # (q, k)
        return self.relative_attention_bias(buckets).permute(2, 0, 1).unsqueeze(0)  # (1, h, q, k)

    def extra_repr(self) -> str:
        return (f"num_heads={self.num_heads}, bidirectional={self.bidirectional}, num_buckets={self.num_buckets}, "
                f"max_distance={self.max_distance}")


POSITIONAL = {
    "sinusoidal": "added to embeddings (SinusoidalPositionalEncoding)",
    "learned": "added to embeddings (LearnedPositionalEmbedding)",
    "rope": "rotates query and key heads (RotaryEmbedding)",
    "alibi": "bias on the scores (ALiBi)",
}

__all__ = [
    "SinusoidalPositionalEncoding",
    "LearnedPositionalEmbedding",
    "RotaryEmbedding",
    "ALiBi",
    "alibi_slopes",
    "T5RelativePositionBias",
    "t5_relative_position_bucket",
    "sinusoidal_table",
    "POSITIONAL",
    "ROPE_SCALING",
]
