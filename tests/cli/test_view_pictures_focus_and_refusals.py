"""``attnlab view``, run in this process: ``--focus N`` reaches the page as its starting query, the pictures
(one heatmap for one layer and one head, a head grid otherwise; one file per section named after it, the
title, axis names and masked cells passed on), ``--screenshot`` with its view and focus, and each refusal's
exact line (output and screenshot suffixes, focus out of range, ``--text`` / ``--target`` / ``--hf`` without
their partners, a missing file or model folder)."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest

import attnlab.viz
import attnlab.viz.screenshot
import attnlab.viz.viewer
from attnlab.cli import main
from attnlab.cli.view import write_pictures

W = [[[[0.5, 0.5, 0.0], [0.2, 0.3, 0.5]]]]  # 1 layer, 1 head, 2 queries, 3 keys


def _json(tmp_path, doc, name="w.json"):
    path = tmp_path / name
    path.write_text(json.dumps(doc), encoding="utf-8")
    return str(path)


def _err(capsys, argv) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("attnlab view: error: ") and err.count("\n") == 1
    return err[len("attnlab view: error: ") : -1]


@pytest.fixture
def pages(monkeypatch):
    calls = []

    def fake_write_html(data, path, start=None):
        calls.append((data, path, start))
        return path

    monkeypatch.setattr(attnlab.viz.viewer, "write_html", fake_write_html)
    return calls


def test_the_page_opens_on_the_focused_query(tmp_path, pages, capsys):
    src = _json(tmp_path, {"tokens": ["a", "b"], "key_tokens": ["x", "y", "z"], "layers": W})
    out = str(tmp_path / "p.html")
    assert main(["view", "--json", src, "-o", out]) == 0
    assert main(["view", "--json", src, "-o", out, "--focus", "1"]) == 0
    assert main(["view", "--json", src, "-o", out, "--focus", "2"]) == 0
    assert [start for _, _, start in pages] == [None, {"query": 1}, {"query": 2}]
    assert [path for _, path, _ in pages] == [out] * 3
    assert capsys.readouterr().out == f"wrote {out}\n" * 3
    assert _err(capsys, ["view", "--json", src, "-o", out, "--focus", "3"]) == (
        "--focus counts from 1 and this page has 2 query tokens (1..2); got 3"
    )
    assert _err(capsys, ["view", "--json", src, "-o", out, "--focus", "0"]) == (
        "--focus counts from 1 (the first token is 1); got 0"
    )
    assert len(pages) == 3


def test_the_default_page_is_attention_html(tmp_path, pages, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["view", "--example", "attnlab-gqa"]) == 0
    data, path, _ = pages[0]
    assert (
        path == "attention.html"
        and data["title"]
        == "attnlab: grouped-query attention, two query heads and one key/value head"
    )


def test_a_real_page_is_written_whole(tmp_path, capsys):
    out = tmp_path / "real.htm"
    assert main(["view", "--example", "attnlab-gqa", "-o", str(out), "--focus", "2"]) == 0
    assert capsys.readouterr().out == f"wrote {out}\n"
    assert out.read_text(encoding="utf-8").lstrip().lower().startswith("<!doctype html>")


def test_view_refusals(tmp_path, capsys):
    src = _json(tmp_path, {"tokens": ["a", "b"], "layers": [[[[1.0, 0.0], [0.5, 0.5]]]]})
    assert (
        _err(capsys, ["view", "--json", src, "-o", "page.png"])
        == "--out must be an .html file; got 'page.png'"
    )
    assert _err(
        capsys, ["view", "--json", src, "-o", str(tmp_path / "p.html"), "--screenshot", "s.jpg"]
    ) == ("--screenshot must be a .png file; got 's.jpg'")
    assert (
        _err(capsys, ["view", "--json", src, "--target", "x"])
        == "--target goes with --hf MODEL_DIR"
    )
    assert _err(capsys, ["view", "--json", src, "--text", "x"]) == (
        "--text goes with --hf MODEL_DIR, --checkpoint DIR or --pretrained NAME"
    )
    assert (
        _err(capsys, ["view", "--hf", str(tmp_path)])
        == "--hf needs --text: the text to run the model on"
    )
    assert _err(capsys, ["view", "--hf", str(tmp_path / "none"), "--text", "x"]) == (
        f"no such model folder: {tmp_path / 'none'}"
    )
    assert (
        _err(capsys, ["view", "--json", str(tmp_path / "none.json")])
        == f"no such file: {tmp_path / 'none.json'}"
    )
    assert not list(tmp_path.glob("*.html"))


def test_the_screenshot_gets_the_page_view_and_focus(tmp_path, monkeypatch, capsys):
    shots = []

    def fake_screenshot(page, png, *, view, focus):
        shots.append((str(page), png, view, focus))
        return png

    monkeypatch.setattr(attnlab.viz.screenshot, "screenshot", fake_screenshot)
    page, png = tmp_path / "p.html", str(tmp_path / "s.png")
    assert main(["view", "--example", "attnlab-gqa", "-o", str(page), "--screenshot", png]) == 0
    assert (
        main(
            [
                "view",
                "--example",
                "attnlab-gqa",
                "-o",
                str(page),
                "--screenshot",
                png,
                "--focus",
                "2",
                "--screenshot-view",
                "matrix",
            ]
        )
        == 0
    )
    assert shots == [(str(page), png, "head", None), (str(page), png, "matrix", 2)]
    assert capsys.readouterr().out == f"wrote {page}\nwrote {png}\n" * 2

    def broken(page, png, *, view, focus):
        raise RuntimeError("no chromium on the PATH")

    monkeypatch.setattr(attnlab.viz.screenshot, "screenshot", broken)
    assert _err(
        capsys, ["view", "--example", "attnlab-gqa", "-o", str(page), "--screenshot", png]
    ) == ("no chromium on the PATH")


@pytest.fixture
def drawn(monkeypatch):
    calls = []
    module = sys.modules["attnlab.viz.heatmap"]
    monkeypatch.setattr(
        attnlab.viz, "heatmap", lambda *a, **k: calls.append(("heatmap", a, k)) or "FIG"
    )
    monkeypatch.setattr(
        module, "head_grid", lambda *a, **k: calls.append(("head_grid", a, k)) or "GRID"
    )
    monkeypatch.setattr(
        attnlab.viz, "save", lambda fig, out: calls.append(("save", fig, str(out))) or out
    )
    return calls


def test_one_head_is_a_heatmap_with_the_page_title_and_axes(tmp_path, drawn, capsys):
    data = attnlab.viz.viewer.normalise(
        {
            "title": "T",
            "tokens": ["a", "b"],
            "key_tokens": ["x", "y", "z"],
            "layers": W,
            "masked": [[[[False, False, True], [False, False, False]]]],
            "x_axis": "source",
            "y_axis": "output",
        }
    )
    pic = tmp_path / "pic.png"
    write_pictures(data, str(pic))
    (kind, args, kwargs), save = drawn
    assert kind == "heatmap"
    np.testing.assert_array_equal(args[0], np.array(W[0][0], dtype=np.float32))
    assert args[1:] == (["x", "y", "z"], ["a", "b"])
    assert {k: v for k, v in kwargs.items() if k != "masked"} == {
        "title": "T",
        "xlabel": "source",
        "ylabel": "output",
    }
    np.testing.assert_array_equal(kwargs["masked"], [[False, False, True], [False, False, False]])
    assert save == ("save", "FIG", str(pic))
    assert capsys.readouterr().out == f"wrote {pic}\n"


def test_no_mask_is_passed_as_none(tmp_path, drawn):
    write_pictures(
        attnlab.viz.viewer.normalise(
            {"tokens": ["a", "b"], "key_tokens": ["x", "y", "z"], "layers": W}
        ),
        str(tmp_path / "pic.svg"),
    )
    kind, _, kwargs = drawn[0]
    assert kind == "heatmap" and kwargs["masked"] is None
    assert (kwargs["title"], kwargs["xlabel"], kwargs["ylabel"]) == ("attention", "key", "query")


@pytest.mark.parametrize("shape", [(1, 2), (2, 1)])
def test_several_heads_or_layers_are_a_head_grid(tmp_path, drawn, shape):
    layers = np.full((*shape, 2, 2), 0.5)
    write_pictures(
        attnlab.viz.viewer.normalise({"title": "G", "tokens": ["a", "b"], "layers": layers}),
        str(tmp_path / "g.png"),
    )
    kind, args, kwargs = drawn[0]
    assert kind == "head_grid"
    assert args[0].shape == (*shape, 2, 2) and args[1:] == (["a", "b"], ["a", "b"])
    assert {k: v for k, v in kwargs.items()} == {
        "title": "G",
        "masked": None,
        "xlabel": "key",
        "ylabel": "query",
    }


def test_each_section_is_a_picture_named_after_it(tmp_path, drawn, capsys):
    sec = {"tokens": ["a", "b"], "key_tokens": ["x", "y", "z"], "layers": W}
    data = attnlab.viz.viewer.normalise(
        {"title": "T", "sections": [{**sec, "name": "encoder"}, {**sec, "name": "cross"}]}
    )
    write_pictures(data, str(tmp_path / "pic.png"))
    saved = [c[2] for c in drawn if c[0] == "save"]
    assert saved == [str(tmp_path / "pic-encoder.png"), str(tmp_path / "pic-cross.png")]
    assert [c[2]["title"] for c in drawn if c[0] == "heatmap"] == ["T: encoder", "T: cross"]
    assert capsys.readouterr().out.splitlines() == [f"wrote {p}" for p in saved]


def test_the_picture_flag_writes_after_the_page(tmp_path, drawn, capsys):
    page, pic = tmp_path / "p.html", tmp_path / "w.png"
    assert main(["view", "--example", "attnlab-gqa", "-o", str(page), "--picture", str(pic)]) == 0
    assert capsys.readouterr().out == f"wrote {page}\nwrote {pic}\n"
