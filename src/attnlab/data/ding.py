"""German–English sentence pairs from the Ding dictionary (Debian package ``trans-de-en``).

The dictionary file (``/usr/share/trans/de-en``, GPL, by Frank Richter, TU
Chemnitz) has one entry per line, ``German :: English``, each side a list of
``|``-separated senses that correspond one to one; many senses are example
sentences ("Es kommt Bewegung in die Sache. :: Change is afoot."). This loader
keeps the senses that are sentences on both sides (a capital letter first, a
full stop, question or exclamation mark last), strips the annotations
(``{n}``, ``[coll.]``, ``(...)``, ``<...>``), keeps the first of ``;``-separated
alternatives, and 3–15 words per side: about 20k pairs.

The data is read from the installed package at run time and never copied into
this repository. ``load_pairs(path)`` reads any file in the same format (the
tests write a small one).
"""

from __future__ import annotations

import functools
import random
import re
from pathlib import Path

from .numbers import Splits

DEFAULT_PATH = Path("/usr/share/trans/de-en")
_ANNOT = re.compile(r"\{[^}]*\}|\[[^\]]*\]|<[^>]*>|\([^)]*\)")
_END = re.compile(r"[.!?]$")


def _clean(sense: str) -> str:
    text = _ANNOT.sub("", sense)
    text = text.split("; ")[0]
    text = re.sub(r"\s+", " ", text).strip()
    return re.sub(r" ([.,!?;:])", r"\1", text)


def _is_sentence(text: str, min_words: int, max_words: int) -> bool:
    return bool(text) and text[0].isupper() and bool(_END.search(text)) and min_words <= len(text.split()) <= max_words


@functools.lru_cache(maxsize=2)
def _senses(path: str, mtime_ns: int, size: int) -> tuple[tuple[str, str], ...]:
    """Every cleaned (German, English) sense pair of the file, in file order (read once per file version)."""
    out = []
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            if line.startswith("#") or " :: " not in line:
                continue
            de, en = line.rstrip("\n").split(" :: ", 1)
            de_senses, en_senses = de.split(" | "), en.split(" | ")
            if len(de_senses) == len(en_senses):
                out += [(_clean(d), _clean(e)) for d, e in zip(de_senses, en_senses)]
    return tuple(out)


def _read(path: str | Path) -> tuple[tuple[str, str], ...]:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"no Ding dictionary at {path}; install the Debian package trans-de-en "
            "(apt-get install trans-de-en) or pass the path of a file in its format"
        )
    st = path.stat()
    return _senses(str(path.resolve()), st.st_mtime_ns, st.st_size)


def load_pairs(path: str | Path = DEFAULT_PATH, *, min_words: int = 3, max_words: int = 15) -> list[tuple[str, str]]:
    """(German, English) sentence pairs, in file order, without duplicates."""
    pairs, seen = [], set()
    for d, e in _read(path):
        if _is_sentence(d, min_words, max_words) and _is_sentence(e, min_words, max_words) and d not in seen:
            seen.add(d)
            pairs.append((d, e))
    if not pairs:
        raise ValueError(f"{path} holds no sentence pairs in the Ding format (German :: English, senses split by ' | ')")
    return pairs


def load_phrases(path: str | Path = DEFAULT_PATH, *, max_words: int = 4) -> list[tuple[str, str]]:
    """The dictionary's word and phrase pairs: the senses that are not sentences, cleaned like
    ``load_pairs`` (first ``;`` alternative each side), 1–``max_words`` words a side, without duplicates."""
    pairs, seen = [], set()
    for d, e in _read(path):
        if d and e and not _END.search(d) and 1 <= len(d.split()) <= max_words \
                and 1 <= len(e.split()) <= max_words and (d, e) not in seen:
            seen.add((d, e))
            pairs.append((d, e))
    return pairs


def ding_splits(
    path: str | Path = DEFAULT_PATH, *, seed: int = 0, valid_frac: float = 0.05, test_frac: float = 0.05,
    reverse: bool = False, phrases: bool = False,
) -> Splits:
    """Shuffled train / valid / test splits of ``load_pairs`` (de → en, or en → de with ``reverse``).

    ``phrases``: the training split also gets the dictionary's word and phrase pairs
    (``load_phrases``) whose words all occur in the training sentences, so the vocabulary stays
    the sentences' and the valid and test sentences stay exactly those without ``phrases``."""
    from .vocab import tokenize

    pairs = load_pairs(path)
    if reverse:
        pairs = [(e, d) for d, e in pairs]
    random.Random(seed).shuffle(pairs)
    n = len(pairs)
    n_valid, n_test = max(1, int(n * valid_frac)), max(1, int(n * test_frac))
    train = pairs[n_valid + n_test :]
    if phrases:
        src_words = {t for s, _ in train for t in tokenize(s, "word")}
        tgt_words = {t for _, t_ in train for t in tokenize(t_, "word")}
        extra = [(e, d) if reverse else (d, e) for d, e in load_phrases(path)]
        extra = [(s, t) for s, t in extra if set(tokenize(s, "word")) <= src_words and set(tokenize(t, "word")) <= tgt_words]
        train = train + extra
        random.Random(seed + 1).shuffle(train)
    return Splits(train, pairs[:n_valid], pairs[n_valid : n_valid + n_test])


__all__ = ["load_pairs", "load_phrases", "ding_splits", "DEFAULT_PATH"]
