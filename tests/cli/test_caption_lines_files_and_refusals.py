"""``attnlab caption`` on the shipped captioner (``--pretrained caption``): the announced default image, the
caption, each word's line (its region of the 6×6 grid, the weight, its cell of the 3×3 scene and the mass in
it, recomputed here from the model's maps), the marks against a ``scenes.json`` beside the image (right,
another cell, not in the scene) and the accuracy line; what ``--out`` and ``--attention-out`` write and
print; and each refusal as one exact line, exit 2."""

from __future__ import annotations

import importlib.util
import json
import shutil
import types

import numpy as np
import pytest

import attnlab.viz.overlays as overlays
from attnlab import pretrained
from attnlab.cli import UsageError, main
from attnlab.cli.caption import _print_words, _safe, attention_document

pytestmark = [
    pytest.mark.usefixtures("one_thread"),
    pytest.mark.skipif(importlib.util.find_spec("PIL") is None, reason="Pillow is not installed"),
]

SCENES = pretrained.folder("caption") / "test-scenes"


@pytest.fixture(scope="module")
def maps():
    """The shipped captioner's word maps (words, 6, 6) on held-out scene 000 (whale, horse)."""
    from attnlab.data.emoji import read_image
    from attnlab.train.caption import caption_image

    loaded = pretrained.load("caption")
    cap = caption_image(
        loaded.model, loaded.vocabs["vocab"], read_image(SCENES / "000.png", 48), "en"
    )
    assert cap.words == ["whale", "horse"] and cap.maps.shape == (2, 6, 6)
    return cap


def _word_line(i, word, m) -> str:
    """A word's line by hand: 6×6 regions, 3×3 cells, so a cell is 2×2 regions; rows and columns counted from 1."""
    r, c = np.unravel_index(np.argmax(m), (6, 6))
    cr, cc = r // 2, c // 2
    mass = m[2 * cr : 2 * cr + 2, 2 * cc : 2 * cc + 2].sum()
    return (
        f"  {i:2d} {word:<12} region (row {r + 1}, col {c + 1}) of 6×6, weight {m.max():.3f}; "
        f"cell (row {cr + 1}, col {cc + 1}) of 3×3, mass {mass:.2f}"
    )


def test_the_default_image_its_reference_and_every_words_line(maps, capsys):
    assert main(["caption", "--pretrained", "caption"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == [
        f"image: {SCENES / '000.png'} (a held-out scene that ships with the model)",
        "whale horse",
        "reference: whale horse",
        _word_line(1, "whale", maps.maps[0]) + "  ✓ on its emoji",
        _word_line(2, "horse", maps.maps[1]) + "  ✓ on its emoji",
        "attention accuracy on this image: 2/2; exact match: yes",
    ]
    assert lines[3].endswith(
        "cell (row 2, col 2) of 3×3, mass 0.62  ✓ on its emoji"
    )  # scenes.json: whale in 4, the middle cell


@pytest.mark.parametrize(
    "truth, marks, accuracy",
    [
        (
            {"caption": ["horse", "whale"], "token_cells": [0, 8]},
            ["  ✗ (its emoji: cell row 3, col 3)", "  ✗ (its emoji: cell row 1, col 1)"],
            "0/2; exact match: no",
        ),
        (
            {"caption": ["whale", "whale"], "token_cells": [8, 1]},
            ["  ✗ (its emoji: cell row 1, col 2, row 3, col 3)", "  ✗ (not in the scene)"],
            "0/2; exact match: no",
        ),
        (
            {"caption": ["whale", "cat"], "token_cells": [4, 0]},
            ["  ✓ on its emoji", "  ✗ (not in the scene)"],
            "1/2; exact match: no",
        ),
    ],
)
def test_each_word_is_marked_against_the_scene(maps, tmp_path, capsys, truth, marks, accuracy):
    shutil.copy(SCENES / "000.png", tmp_path / "s.png")
    (tmp_path / "scenes.json").write_text(json.dumps({"s.png": truth}))
    assert main(["caption", "--pretrained", "caption", str(tmp_path / "s.png")]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "whale horse",
        f"reference: {' '.join(truth['caption'])}",
        _word_line(1, "whale", maps.maps[0]) + marks[0],
        _word_line(2, "horse", maps.maps[1]) + marks[1],
        f"attention accuracy on this image: {accuracy}",
    ]


def test_without_a_reference_no_marks_and_no_accuracy(maps, tmp_path, capsys):
    shutil.copy(SCENES / "000.png", tmp_path / "s.png")
    (tmp_path / "scenes.json").write_text(json.dumps({"other.png": {}}))
    assert main(["caption", "--pretrained", "caption", str(tmp_path / "s.png")]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "whale horse",
        _word_line(1, "whale", maps.maps[0]),
        _word_line(2, "horse", maps.maps[1]),
    ]


def test_a_model_without_scene_cells_prints_regions_only(capsys):
    m = np.array([[0.1, 0.2], [0.6, 0.1]])
    cap = types.SimpleNamespace(words=["cat"], maps=[m])
    _print_words(cap, 2, None, None, "en")
    assert (
        capsys.readouterr().out == "   1 cat          region (row 2, col 1) of 2×2, weight 0.600\n"
    )
    _print_words(cap, 2, 2, {"caption": ["猫", "狗"], "token_cells": [2, 0]}, "zh")
    assert capsys.readouterr().out.splitlines() == [
        "reference: 猫狗",  # Chinese words are joined without spaces
        "   1 cat          region (row 2, col 1) of 2×2, weight 0.600; cell (row 2, col 1) of 2×2, mass 0.60"
        "  ✗ (not in the scene)",
        "attention accuracy on this image: 0/1; exact match: no",
    ]


def test_out_writes_the_overlays_and_no_overlays_writes_nothing(tmp_path, monkeypatch, capsys):
    calls = []
    monkeypatch.setattr(
        overlays,
        "save_word_overlay",
        lambda image, m, w, path, cells: calls.append(("word", w, path.name, cells, image.shape)),
    )
    monkeypatch.setattr(
        overlays,
        "save_caption_strip",
        lambda image, ms, words, path, cells, title: calls.append(
            ("strip", words, path.name, cells, title, ms.shape)
        ),
    )
    monkeypatch.setattr(
        overlays,
        "save_overlay_grid",
        lambda images, ms, path, column_titles, row_titles: calls.append(
            ("grid", len(images), path.name, column_titles, row_titles)
        ),
    )
    out = tmp_path / "maps"
    assert (
        main(["caption", "--pretrained", "caption", str(SCENES / "000.png"), "--out", str(out)])
        == 0
    )
    assert capsys.readouterr().out.splitlines()[-1] == (
        f"wrote 2 overlays, caption.png and caption_heads.png to {out}/"
    )
    assert calls == [
        ("word", "whale", "01_whale.png", 3, (3, 48, 48)),
        ("word", "horse", "02_horse.png", 3, (3, 48, 48)),
        ("strip", ["whale", "horse"], "caption.png", 3, "“whale horse”", (2, 6, 6)),
        ("grid", 2, "caption_heads.png", ["image", "whale", "horse"], ["head 1", "head 2"]),
    ]
    calls.clear()
    assert (
        main(
            [
                "caption",
                "--pretrained",
                "caption",
                str(SCENES / "000.png"),
                "--out",
                str(out),
                "--no-overlays",
            ]
        )
        == 0
    )
    assert "wrote" not in capsys.readouterr().out and calls == []


def test_attention_out_writes_the_grid_document_and_says_so(tmp_path, capsys):
    path = tmp_path / "a.json"
    assert (
        main(
            [
                "caption",
                "--pretrained",
                "caption",
                str(SCENES / "000.png"),
                "--attention-out",
                str(path),
            ]
        )
        == 0
    )
    assert (
        capsys.readouterr().out.splitlines()[-1]
        == f"attention weights (2 words × 36 cells, 2 heads): {path}"
    )
    doc = json.loads(path.read_text(encoding="utf-8"))
    assert doc["title"] == "“whale horse”"
    (s,) = doc["sections"]
    assert (s["name"], s["tokens"], s["x_axis"], s["y_axis"]) == (
        "cross-attention onto the image grid",
        ["whale", "horse"],
        "grid cell (row, column)",
        "word",
    )
    assert s["key_tokens"] == [f"r{r}c{c}" for r in range(1, 7) for c in range(1, 7)]
    assert np.asarray(s["layers"]).shape == (1, 2, 2, 36)


def test_an_empty_caption_has_no_attention_to_write():
    cap = types.SimpleNamespace(words=[], text="", head_maps=np.zeros((2, 0, 3, 3)))
    with pytest.raises(
        UsageError,
        match="^the caption is empty: there are no words whose attention could be written$",
    ):
        attention_document(cap, 3)


def test_words_become_safe_file_names():
    assert _safe("ice cream!") == "ice_cream"
    assert _safe("t-rex") == "t-rex" and _safe("épée") == "épée"
    assert _safe("?!") == "word"
    assert _safe("a" * 50) == "a" * 40


def _refused(capsys, argv, message):
    assert main(["caption", *argv]) == 2
    assert capsys.readouterr().err == f"attnlab caption: error: {message}\n"


def test_refusals(tmp_path, capsys):
    _refused(
        capsys,
        ["--checkpoint", str(tmp_path / "none"), "x.png"],
        f"no checkpoint at {tmp_path / 'none'}; train one with `attnlab train caption --out DIR`",
    )
    _refused(
        capsys,
        ["--pretrained", "caption", "--caption-lang", "zh"],
        "the checkpoint captions in 'en', not 'zh'; train one with `attnlab train caption --caption-lang zh --out DIR`",
    )
    _refused(
        capsys,
        ["--pretrained", "caption", str(tmp_path / "none.png")],
        f"no image file at {tmp_path / 'none.png'}",
    )
    bare = tmp_path / "bare"
    shutil.copytree(
        pretrained.folder("caption"), bare, ignore=shutil.ignore_patterns("test-scenes")
    )
    _refused(
        capsys,
        ["--checkpoint", str(bare)],
        f"{bare} ships no held-out scene (test-scenes/000.png): name an image to caption",
    )
    shutil.copy(SCENES / "000.png", tmp_path / "s.png")
    for content in ("not json", "[1]"):
        (tmp_path / "scenes.json").write_text(content)
        _refused(
            capsys,
            ["--pretrained", "caption", str(tmp_path / "s.png")],
            f"{tmp_path / 'scenes.json'} is not a scenes.json written by `attnlab train caption`",
        )
    assert (
        main(["caption", "--pretrained", "caption", "--caption-lang", "en"]) == 0
    )  # its own language is fine
