"""The Greek–English verse loader on a small fixture in the package's file layout: lemma or surface
source tokens, target words cleaned, excluded words dropped, gold links within a verse only."""

from __future__ import annotations

import json

import pytest

from attnlab.data.bible import ALIGNMENT, SOURCE, TARGET, Verse, load_verses

SOURCE_TSV = """id\taltId\ttext\tstrongs\tgloss\tgloss2\tlemma\tpos\tmorph
n40001001001\tΒίβλος-1\tΒίβλος\tG0976\tbook\tbook\tβίβλος\tnoun\tN-NSF
n40001001002\tγενέσεως-1\tγενέσεως,\tG1078\tgenealogy\tgenealogy\tγένεσις\tnoun\tN-GSF
n40001001003\t—-1\t—\t\t\t\t—\tpunct\t
n40001001004\tἸησοῦ-1\tἸησοῦ\tG2424\tJesus\tJesus\tἸησοῦς\tnoun\tN-GSM
n40001002001\tἈβραὰμ-1\tἈβραὰμ\tG0011\tAbraham\tAbraham\tἈβραάμ\tnoun\tN-NSM
n40001003001\tκαὶ-1\tκαὶ\tG2532\tand\tand\tκαί\tconj\tCONJ
"""

TARGET_TSV = """id\tsource_verse\ttext\tskip_space_after\texclude\tid_range_end\tsource_verse_range_end
40001001001\t40001001\tThis\t\t\t\t
40001001002\t40001001\tis\t\t\t\t
40001001003\t40001001\tthe\t\ty\t\t
40001001004\t40001001\tgenealogy,\t\t\t\t
40001001005\t40001001\tJesus.\t\t\t\t
40001002001\t40001002\tAbraham\t\t\t\t
40001003001\t40001003\tand\t\t\t\t
"""

RECORDS = [
    {"source": ["n40001001001", "n40001001002"], "target": ["40001001001", "40001001004"]},  # a 2 × 2 group
    {"source": ["n40001001004"], "target": ["40001001005", "40001001003"]},  # the excluded word is left out
    {"source": ["n40001001003"], "target": ["40001001002"]},  # the source punctuation is no token: no link
    {"source": ["n40001002001"], "target": ["40001001002"]},  # across verses: left out
]  # verse 3 has no link: it is not returned


@pytest.fixture
def root(tmp_path):
    for rel, text in ((SOURCE, SOURCE_TSV), (TARGET, TARGET_TSV),
                      (ALIGNMENT, json.dumps({"type": "alignment", "records": RECORDS}))):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text, encoding="utf-8")
    return tmp_path


def test_lemmas_targets_and_links_by_hand(root):
    assert load_verses(root) == [
        Verse("40001001", ("βίβλος", "γένεσις", "ἰησοῦς"), ("this", "is", "genealogy", "jesus"),
              frozenset({(0, 0), (0, 2), (1, 0), (1, 2), (2, 3)})),
    ]


def test_surface_forms_as_source(root):
    (v,) = load_verses(root, source_form="text")
    assert v.source == ("βίβλος", "γενέσεως", "ἰησοῦ")  # the inflected forms, punctuation removed, lower-cased
    assert v.target == ("this", "is", "genealogy", "jesus") and len(v.links) == 5


def test_unknown_source_form(root):
    with pytest.raises(ValueError, match=r"source_form must be 'lemma' or 'text'; got 'gloss'"):
        load_verses(root, source_form="gloss")


def test_data_root_is_the_installed_packages_folder_of_its_data():
    from importlib import metadata
    from pathlib import Path

    from attnlab.data.bible import data_root

    try:
        dist = metadata.distribution("bible-alignments")
    except metadata.PackageNotFoundError:
        pytest.skip("bible-alignments is not installed (make test installs it)")
    alignment = Path(dist.locate_file(ALIGNMENT))  # where pip put the file, found without attnlab
    assert alignment.is_file()
    assert data_root() / ALIGNMENT == alignment
