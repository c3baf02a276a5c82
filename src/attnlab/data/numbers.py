"""The embedded default corpus: numbers written out in words, translated between languages.

``number_pairs("en", "de", n=...)`` draws distinct integers with a fixed seed
(the number of digits uniform in 1..``max_digits``, so that 10¹² and beyond, and
long sentences, are common), writes each in both languages with ``num2words``
(English, German, French, ...) or ``chinese`` (below, ``"zh"``), and splits the
*numbers* into train / valid / test, so no number is in two splits; every number
below 100 that is drawn goes to training (one- and two-character numbers are too
few to hold out, and a model that never saw 四 cannot write "four").

German reverses units and tens (21 = "einundzwanzig", one-and-twenty), so an
English → German alignment is not diagonal; Chinese groups by 10⁴ (万, 亿) and
writes one 零 for each run of zero digits between two non-zero ones (五亿零五千零四十
is 500,005,040), and 十 alone at the start (十五, 十万) but 一十 after another
digit (一百一十, 一万零一十).
Dataset names: ``numbers-SRC-TGT`` with SRC, TGT in ``LANGS``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

LANGS = ("en", "de", "fr", "es", "it", "zh", "digits")
# Word-level for languages that separate words; German compounds (and Chinese) are read by character.
DEFAULT_LEVEL = {"en": "word", "fr": "word", "es": "word", "it": "word", "de": "char", "zh": "char", "digits": "char"}


_ZH_DIGITS = "零一二三四五六七八九"
_ZH_UNITS = ((1000, "千"), (100, "百"), (10, "十"), (1, ""))
_ZH_GROUPS = ((10**8, "亿"), (10**4, "万"))


def _chinese_below_10000(n: int) -> str:
    """1 <= n < 10000 as its digits and units, one 零 per run of zeros inside, none at the end."""
    out, zero = [], False
    for unit, name in _ZH_UNITS:
        d, n = divmod(n, unit)
        if d:
            out.append(("零" if zero and out else "") + _ZH_DIGITS[d] + name)
            zero = False
        else:
            zero = True
    return "".join(out)


def _chinese_positive(n: int) -> str:
    for size, name in _ZH_GROUPS:
        if n >= size:
            high, low = divmod(n, size)
            if not low:
                return _chinese_positive(high) + name
            # a zero digit between the group and the rest: 一亿零五, 五亿零五千, 一万零一十
            return _chinese_positive(high) + name + ("零" if low < size // 10 else "") + _chinese_positive(low)
    return _chinese_below_10000(n)


def chinese(n: int) -> str:
    """The integer ``n`` >= 0 in Chinese numerals as they are written in full (mainland usage).

    Groups of four digits (万 = 10⁴, 亿 = 10⁸, 万亿 = 10¹²); one 零 for each run of zeros
    between two non-zero digits, inside a group or across groups (一千零一, 一亿零一万,
    五亿零五千零四十 = 500,005,040); none at the end (一万, 三千); 十 alone at the start
    (十, 十五, 十二万) and 一十 elsewhere (一百一十, 一万零一十); 二 (两 is the spoken form of
    二 before a unit: 两千 = 二千, which ``normalise_chinese`` maps back)."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"chinese() writes integers >= 0; got {n!r}")
    if n == 0:
        return "零"
    text = _chinese_positive(n)
    return text[1:] if text.startswith("一十") else text


def normalise_chinese(text: str) -> str:
    """Chinese numerals as ``chinese`` writes them, character for character: 两 → 二 (两千, 两万,
    两亿: the everyday spoken form), 〇 → 零. The length stays, so alignments still match the text."""
    return text.replace("两", "二").replace("兩", "二").replace("〇", "零")


_ZH_VALUE = {"十": 10, "百": 100, "千": 1000}


def chinese_value(text: str) -> int | None:
    """The integer that Chinese numerals ``text`` write (after ``normalise_chinese``), or None when
    ``text`` holds another character. Lenient: it reads 一万亿 and 一万零五亿 as written, and does not
    check that the form is the one ``chinese`` writes."""
    total = section = group = digit = 0
    for ch in normalise_chinese(text.strip()):
        if ch in _ZH_DIGITS:
            digit = _ZH_DIGITS.index(ch)
        elif ch in _ZH_VALUE:
            group, digit = group + (digit or 1) * _ZH_VALUE[ch], 0
        elif ch == "万":
            section, group, digit = section + (group + digit) * 10**4, 0, 0
        elif ch == "亿":
            total, section, group, digit = (total + section + group + digit) * 10**8, 0, 0, 0
        else:
            return None
    return total + section + group + digit


def spell(n: int, lang: str) -> str:
    """The integer ``n`` written out in ``lang``."""
    if lang == "digits":
        return str(n)
    if lang == "zh":
        return chinese(n)
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


def _zero_run(x: int, rng: random.Random) -> int:
    """``x`` with a run of its digits after the first set to zero (the run's start and length uniform)."""
    digits = list(str(x))
    if len(digits) < 3:
        return x
    start = rng.randint(1, len(digits) - 1)
    end = rng.randint(start + 1, len(digits))
    digits[start:end] = "0" * (end - start)
    return int("".join(digits))


def sample_numbers(n: int, *, seed: int = 0, max_digits: int = 13, min_digits: int = 1) -> list[int]:
    """``n`` distinct integers; digit count uniform in [min_digits, max_digits] (small counts saturate).

    A third of them have a run of zero digits (30,005, 500,005,040): drawn uniformly, a number
    of 13 digits almost never has a whole group of four zeros, which Chinese writes with 零."""
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
        if rng.random() < 1 / 3:
            x = _zero_run(x, rng)
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
    # held out first from the numbers of 100 and more: below 100, training only (see the module's docstring)
    held = [x for x in nums if x >= 100] + [x for x in nums if x < 100]
    n_valid, n_test = max(1, int(n * valid_frac)), max(1, int(n * test_frac))
    valid, test = set(held[:n_valid]), set(held[n_valid : n_valid + n_test])
    pairs = {x: (spell(x, src), spell(x, tgt)) for x in nums}
    train = [pairs[x] for x in nums if x not in valid and x not in test]
    return Splits(train, [pairs[x] for x in held[:n_valid]], [pairs[x] for x in held[n_valid : n_valid + n_test]])


__all__ = ["number_pairs", "sample_numbers", "spell", "chinese", "chinese_value", "normalise_chinese", "parse_name", "Splits", "LANGS", "DEFAULT_LEVEL"]
