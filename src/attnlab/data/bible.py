"""Greek–English New Testament verses with manually corrected word alignments.

The PyPI package ``bible-alignments`` (Clear Bible, https://github.com/Clear-Bible/Alignments)
ships the SBL Greek New Testament (SBLGNT, CC BY 4.0), the Berean Standard Bible (BSB, public
domain) and the manual SBLGNT–BSB word alignment (CC BY 4.0) as data files. Install it
without its (heavy, unused) dependencies: ``pip install --no-deps bible-alignments`` (the
Makefile does); its data files are found through the package's installed file list and read
here; the package itself is never imported.

``load_verses()`` returns one ``Verse`` per New Testament verse: the source tokens (Greek
lemmas by default, or the surface forms), the target tokens (BSB words, lower-cased,
punctuation and non-word characters removed) and the gold links {(source position, target
position)} of the manual alignment (every pair within an aligned group; the manual alignment
has no "possible" links, so every gold link is *sure*).
"""

from __future__ import annotations

import csv
import json
import re
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

ALIGNMENT = "data/eng/alignments/BSB/SBLGNT-BSB-manual.json"
SOURCE = "data/sources/SBLGNT.tsv"
TARGET = "data/eng/targets/BSB/nt_BSB.tsv"
_NON_WORD = re.compile(r"[^\w]+")


@dataclass(frozen=True)
class Verse:
    verse: str  # BBCCCVVV
    source: tuple[str, ...]
    target: tuple[str, ...]
    links: frozenset[tuple[int, int]]  # (source position, target position), 0-based


def data_root() -> Path:
    """The folder that holds the package's ``data/``; FileNotFoundError with the fix when absent."""
    try:
        files = metadata.files("bible-alignments") or []
    except metadata.PackageNotFoundError:
        files = []
    for f in files:
        if str(f).replace("\\", "/") == ALIGNMENT:
            root = Path(f.locate()).parents[len(Path(ALIGNMENT).parts) - 1]
            if (root / ALIGNMENT).is_file():
                return root
    raise FileNotFoundError(
        "the Greek–English alignments come with the PyPI package bible-alignments, which is not installed; "
        "install its data with: pip install --no-deps bible-alignments==0.4.2"
    )


def _word(text: str) -> str:
    return _NON_WORD.sub("", text).lower()


def load_verses(root: str | Path | None = None, *, source_form: str = "lemma") -> list[Verse]:
    """Every verse with at least one gold link, in canonical order."""
    if source_form not in ("lemma", "text"):
        raise ValueError(f"source_form must be 'lemma' or 'text'; got {source_form!r}")
    root = Path(root) if root is not None else data_root()
    src_pos: dict[str, tuple[str, int]] = {}
    source: dict[str, list[str]] = {}
    with open(root / SOURCE, encoding="utf-8", newline="") as fh:
        for row in csv.DictReader(fh, delimiter="\t"):
            tok = _word(row[source_form])
            if not tok:
                continue
            verse = row["id"][1:9]
            toks = source.setdefault(verse, [])
            src_pos[row["id"]] = (verse, len(toks))
            toks.append(tok)
    tgt_pos: dict[str, tuple[str, int]] = {}
    target: dict[str, list[str]] = {}
    with open(root / TARGET, encoding="utf-8", newline="") as fh:
        for row in csv.DictReader(fh, delimiter="\t"):
            tok = _word(row["text"])
            if row.get("exclude") == "y" or not tok:
                continue
            verse = row["source_verse"]
            toks = target.setdefault(verse, [])
            tgt_pos[row["id"]] = (verse, len(toks))
            toks.append(tok)
    links: dict[str, set[tuple[int, int]]] = {}
    records = json.loads((root / ALIGNMENT).read_text(encoding="utf-8"))["records"]
    for rec in records:
        ss = [src_pos[i] for i in rec["source"] if i in src_pos]
        ts = [tgt_pos[i] for i in rec["target"] if i in tgt_pos]
        for sv, si in ss:
            for tv, ti in ts:
                if sv == tv:  # links across verse boundaries are left out
                    links.setdefault(sv, set()).add((si, ti))
    return [Verse(v, tuple(source[v]), tuple(target[v]), frozenset(links[v]))
            for v in sorted(links) if v in source and v in target]


__all__ = ["Verse", "load_verses", "data_root"]
