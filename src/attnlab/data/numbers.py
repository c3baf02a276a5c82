"""The embedded default corpus: numbers written out in words, translated between languages.

``number_pairs("en", "de", n=...)`` draws distinct integers with a fixed seed
(the number of digits uniform in 1..``max_digits``, so that 10¹² and beyond, and
long sentences, are common), writes each in both languages with ``num2words``
(English, German, French, ...) or ``cn2an`` (Chinese, ``"zh"``), and splits the
*numbers* into train / valid / test, so no number is in two splits.

German reverses units and tens (21 = "einundzwanzig", one-and-twenty), so an
English → German alignment is not diagonal; Chinese groups by 10⁴ (万, 亿).
Dataset names: ``numbers-SRC-TGT`` with SRC, TGT in ``LANGS``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

LANGS = ("en", "de", "fr", "es", "it", "zh", "digits")
# Word-level for languages that separate words; German compounds (and Chinese) are read by character.
DEFAULT_LEVEL = {"en": "word", "fr": "word", "es": "word", "it": "word", "de": "char", "zh": "char", "digits": "char"}


def spell(n: int, lang: str) -> str:
    """The integer ``n`` written out in ``lang``."""
    if lang == "digits":
        return str(n)
    if lang == "zh":
        import cn2an

        return cn2an.an2cn(n)
    try:
        from num2words import num2words
    except ImportError:  # pragma: no cover - depends on the install
        raise ValueError("the numbers corpus needs num2words: pip install 'attnlab[lab]'") from None
    return num2words(n, lang=lang)


@dataclass(frozen=True)
class Splits:
    train: list[tuple[str, str]]
    valid: list[tuple[str, str]]
    test: list[tuple[str, str]]


def parse_name(name: str) -> tuple[str, str]:
    parts = name.split("-")
    if len(parts) != 3 or parts[0] != "numbers" or parts[1] not in LANGS or parts[2] not in LANGS or parts[1] == parts[2]:
        raise ValueError(
            f"unknown numbers dataset {name!r}; use numbers-SRC-TGT with two different languages from {', '.join(LANGS)}"
        )
    return parts[1], parts[2]


def sample_numbers(n: int, *, seed: int = 0, max_digits: int = 13, min_digits: int = 1) -> list[int]:
    """``n`` distinct integers; digit count uniform in [min_digits, max_digits] (small counts saturate)."""
    if not 1 <= min_digits <= max_digits:
        raise ValueError(f"need 1 <= min_digits <= max_digits; got {min_digits}, {max_digits}")
    rng = random.Random(seed)
    seen: set[int] = set()
    capacity = 10**max_digits - (10 ** (min_digits - 1) if min_digits > 1 else 0)
    if n > capacity:
        raise ValueError(f"cannot draw {n} distinct numbers with at most {max_digits} digits")
    out = []
    while len(out) < n:
        d = rng.randint(min_digits, max_digits)
        x = rng.randint(0 if d == 1 else 10 ** (d - 1), 10**d - 1)
        if x not in seen:
            seen.add(x)
            out.append(x)
    return out


def number_pairs(
    src: str,
    tgt: str,
    n: int = 20000,
    *,
    seed: int = 0,
    max_digits: int = 13,
    min_digits: int = 1,
    valid_frac: float = 0.05,
    test_frac: float = 0.05,
) -> Splits:
    """(source text, target text) pairs split by number into train / valid / test."""
    for lang in (src, tgt):
        if lang not in LANGS:
            raise ValueError(f"unknown language {lang!r}; known: {', '.join(LANGS)}")
    nums = sample_numbers(n, seed=seed, max_digits=max_digits, min_digits=min_digits)
    pairs = [(spell(x, src), spell(x, tgt)) for x in nums]
    n_valid, n_test = max(1, int(n * valid_frac)), max(1, int(n * test_frac))
    return Splits(pairs[n_valid + n_test :], pairs[:n_valid], pairs[n_valid : n_valid + n_test])


__all__ = ["number_pairs", "sample_numbers", "spell", "parse_name", "Splits", "LANGS", "DEFAULT_LEVEL"]
