"""attnlab.viz: pictures (PNG, SVG), CJK fonts with a fallback warning, and the offline viewer page."""

from __future__ import annotations

import base64
import json
import re
import warnings
import zlib

import numpy as np
import pytest
import torch

pytest.importorskip("matplotlib", reason="attnlab.viz needs matplotlib (pip install 'attnlab[viz]')")

from attnlab.cli import main  # noqa: E402
from attnlab.explain import load, run  # noqa: E402
from attnlab.viz import (  # noqa: E402
    alignment,
    fonts,  # noqa: E402
    from_example,
    head_grid,
    heatmap,
    load_json,
    pattern,
    save,
    spatial_overlay,
    write_html,
)
from attnlab.viz.viewer import normalise, payload, render_html  # noqa: E402


def _rows(n, k, seed=0):
    w = torch.rand(n, k, generator=torch.Generator().manual_seed(seed))
    return w / w.sum(-1, keepdim=True)


def test_heatmap_png_and_svg(tmp_path):
    fig = heatmap(_rows(3, 4), ["a", "b", "c", "d"], ["x", "y", "z"], title="t")
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["a", "b", "c", "d"]
    img = ax.images[0].get_array()
    np.testing.assert_allclose(np.asarray(img), _rows(3, 4).numpy())  # the picture shows the weights as given
    png = save(fig, tmp_path / "w.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    svg = save(heatmap(np.eye(2)), tmp_path / "w.svg")
    assert "<svg" in svg.read_text()[:500]
    with pytest.raises(ValueError, match="labels"):
        heatmap(_rows(3, 4), ["a"])
    with pytest.raises(ValueError, match=".png or .svg"):
        save(heatmap(np.eye(2)), tmp_path / "w.jpg")


def test_cells_carry_their_weight_as_text_only_when_asked():
    w = _rows(3, 4).numpy()
    texts = [t.get_text() for t in heatmap(w, annotate=True).axes[0].texts]
    assert texts == [f"{x:.2f}" for x in w.flatten()]
    assert len(heatmap(w, annotate=False).axes[0].texts) == 0
    assert all(len(a.texts) == 0 for a in head_grid(np.stack([w, w])).axes)  # head_grid: off by default


def test_many_heads_of_a_long_input_draw_block_means_no_bigger_than_their_panels():
    """32 heads share 28 inches at 120 dpi: 105 pixels a panel, so 300 tokens are drawn as 100 × 100
    means of 3 × 3 blocks (more cells than pixels would alias)."""
    w = np.random.default_rng(0).random((32, 300, 300))
    fig = head_grid(w)
    panels = [a for a in fig.axes if a.images]
    assert len(panels) == 32
    for i in (0, 31):
        shown = np.asarray(panels[i].images[0].get_array())
        np.testing.assert_allclose(shown, w[i].reshape(100, 3, 100, 3).mean(axis=(1, 3)), rtol=1e-12)
    assert "300 × 300 drawn as 100 × 100 (each cell the mean of a 3 × 3 block)" in fig.texts[0].get_text()


def test_head_grid_alignment_pattern_overlay(tmp_path):
    fig = head_grid(torch.stack([_rows(3, 3, s) for s in range(4)]).reshape(2, 2, 3, 3))
    assert len([a for a in fig.axes if a.images]) == 4
    al = alignment(_rows(2, 3), ["le", "chat", "noir"], ["the", "cat"])
    assert [t.get_text() for t in al.axes[0].get_yticklabels()] == ["the", "cat"]
    mask = torch.tril(torch.ones(5, 5, dtype=torch.bool))
    p = pattern(mask)
    np.testing.assert_array_equal(np.asarray(p.axes[0].images[0].get_array()), mask.numpy())
    assert "15 of 25" in p.axes[0].get_title()
    ov = spatial_overlay(np.random.rand(8, 8), np.arange(4.0).reshape(2, 2))
    big = np.asarray(ov.axes[1].images[1].get_array())
    assert big.shape == (8, 8) and big[0, 0] == 0 and big[7, 7] == 3
    save(ov, tmp_path / "o.png")


def test_cjk_labels_get_a_font_or_a_warning(monkeypatch):
    assert fonts.has_cjk(["猫"]) and not fonts.has_cjk(["cat"])
    # the blocks' edges: CJK radicals from U+2E80 to the last unified ideograph U+9FFF, hangul syllables,
    # compatibility ideographs and full-width forms; Yi (U+A000), Hangul Jamo Extended-B (U+D7B0) are not
    inside = ["\u2e80", "\u9fff", "\uac00", "\ud7af", "\uf900", "\ufaff", "\uff00", "\uffef"]
    outside = ["\u2e7f", "\ua000", "\uabff", "\ud7b0", "\uf8ff", "\ufb00", "\ufeff", "\ufff0"]
    assert [fonts.has_cjk([c]) for c in inside] == [True] * 8
    assert [fonts.has_cjk(["a" + c]) for c in outside] == [False] * 8
    if fonts.cjk_font() is None:
        pytest.skip("no CJK font installed (Debian: fonts-wqy-microhei or fonts-noto-cjk); fallback tested below")
    name = fonts.use_cjk_font(["猫"])
    import matplotlib

    assert matplotlib.rcParams["font.sans-serif"][0] == name
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "missing glyph" warnings with the CJK font
        fig = heatmap(_rows(2, 2), ["猫", "垫子"], ["坐", "上"])
        fig.canvas.draw()


def test_cjk_fallback_warns(monkeypatch):
    monkeypatch.setattr(fonts, "cjk_font", lambda: None)
    with pytest.warns(UserWarning, match="fonts-wqy-microhei"):
        assert fonts.use_cjk_font(["猫"]) is None


def _unpack(e, dtype):
    raw = zlib.decompress(base64.b64decode(e["b64"]))
    return np.frombuffer(raw, dtype=dtype).reshape(e["shape"])


def test_viewer_packs_large_pages_as_8_bit_with_missing_and_masked_entries():
    w = np.full((1, 1, 2, 3), 0.25, np.float32)
    w[0, 0, 0] = [0.0, 0.5, 1.0]
    w[0, 0, 1, 2] = np.nan  # no weight (a JSON null)
    masked = np.zeros((2, 3), bool)
    masked[1, 2] = True
    p = payload({"layers": w, "masked": masked}, precision="uint8")["sections"][0]
    u = _unpack(p["weights"], np.uint8)[0, 0]
    assert u.tolist() == [[0, 127, 254], [64, 64, 255]]  # round(w · 254), 255 = none
    bits = np.unpackbits(np.frombuffer(zlib.decompress(base64.b64decode(p["masked"]["b64"])), np.uint8))[:6]
    assert bits.tolist() == [0, 0, 0, 0, 0, 1]
    auto = payload({"layers": np.zeros((1, 1, 1025, 1024), np.float32)})["sections"][0]["weights"]["dtype"]
    assert auto == "uint8" and payload({"layers": w})["sections"][0]["weights"]["dtype"] == "float32"
    with pytest.raises(ValueError, match="precision"):
        payload({"layers": w}, precision="int4")


def test_view_shows_inline_in_jupyter():
    v = normalise({"layers": [[0.5, 0.5]], "tokens": ["<a>"], "key_tokens": ["x", "y"]})
    frame = v._repr_html_()
    assert frame.startswith("<iframe srcdoc=") and "&lt;!DOCTYPE html&gt;" in frame
    assert "<a>" not in frame  # the page is escaped inside the attribute


def test_viewer_page_is_self_contained(tmp_path):
    ex = load("tutorial2-multi-head")
    data = from_example(ex, run(ex))
    assert len(data["layers"]) == 1 and len(data["layers"][0]) == 2
    page = render_html(data)
    assert not re.search(r"(src|href)\s*=\s*[\"']?(https?:)?//", page), "the page must not load anything"
    assert "http://" not in page and "https://" not in page
    payload = re.search(r'<script type="application/json" id="data">(.*?)</script>', page, re.S).group(1)
    back = json.loads(payload)["sections"][0]
    assert back["weights"]["dtype"] == "float32" and back["weights"]["shape"] == [1, 2, 5, 5]
    np.testing.assert_allclose(_unpack(back["weights"], "<f4")[0], run(ex)["weights"].value[0].numpy(), rtol=1e-6)
    qh = _unpack(back["queries"], "<f4")  # the neuron view's per-head queries
    np.testing.assert_allclose(qh[0], run(ex)["query_heads"].value[0].numpy(), rtol=1e-6)
    # a token that tries to close the script tag cannot
    evil = render_html({"layers": [[0.5, 0.5]], "tokens": ["</script><b>"], "key_tokens": ["a", "b"]})
    assert "</script><b>" not in evil


def test_viewer_reads_model_json_and_explain_json(tmp_path, capsys):
    layers = torch.softmax(torch.randn(2, 3, 4, 4), -1)
    f = tmp_path / "att.json"
    f.write_text(json.dumps({"tokens": list("abcd"), "layers": layers.tolist()}))
    data = load_json(f)
    assert len(data["layers"]) == 2 and len(data["layers"][1]) == 3 and data["key_tokens"] == list("abcd")
    assert main(["view", "--json", str(f), "-o", str(tmp_path / "v.html")]) == 0
    capsys.readouterr()
    assert main(["explain", "masked", "--format", "json"]) == 0
    doc = tmp_path / "doc.json"
    doc.write_text(capsys.readouterr().out, encoding="utf-8")
    d = load_json(doc)
    np.testing.assert_array_equal(d["masked"][0][0], np.triu(np.ones((4, 4), bool), 1))
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"tokens": ["a"], "layers": [[[0.5, 0.5], [0.5]]]}))
    assert main(["view", "--json", str(bad), "-o", str(tmp_path / "b.html")]) == 2


def test_cli_view_with_picture(tmp_path):
    out, pic = tmp_path / "p.html", tmp_path / "p.png"
    assert main(["view", "--example", "tutorial2-self-attention", "-o", str(out), "--picture", str(pic)]) == 0
    assert out.read_text(encoding="utf-8").startswith("<!DOCTYPE html>") and pic.stat().st_size > 1000
    data = from_example(load("attnlab-masked-causal"), run(load("attnlab-masked-causal")))
    write_html(data, tmp_path / "m.html")
    assert data["masked"][0][0][0].tolist() == [False, True, True, True]


def test_pictures_stay_under_4000_px_with_a_note(tmp_path):
    Image = pytest.importorskip("PIL.Image")
    g = torch.Generator().manual_seed(0)
    lm = torch.softmax(torch.randn(1, 4, 300, 300, generator=g), -1)  # the character LM's page: many tokens
    f = tmp_path / "lm.json"
    f.write_text(json.dumps({"tokens": [chr(97 + i % 26) for i in range(300)], "layers": lm.tolist()}))
    assert main(["view", "--json", str(f), "-o", str(tmp_path / "lm.html"), "--picture", str(tmp_path / "lm.png")]) == 0
    with Image.open(tmp_path / "lm.png") as im:
        assert max(im.size) <= 4000 and min(im.size) > 300
    one_w = torch.softmax(torch.randn(3000, 3000, generator=g), -1).numpy()
    one = heatmap(one_w, title="one long head " * 20)
    notes = " ".join(t.get_text() for t in one.texts)
    assert "3000 × 3000 drawn as 1500 × 1500 (each cell the mean of a 2 × 2 block)" in notes
    assert "one every 63 tokens" in notes
    assert "\n" in one.axes[0].get_title()  # the long title is wrapped to fit
    save(one, tmp_path / "one.png")
    with Image.open(tmp_path / "one.png") as im:
        assert max(im.size) <= 4000
    pooled = np.asarray(one.axes[0].images[0].get_array())
    assert pooled.shape == (1500, 1500)
    assert pooled[0, 0] == pytest.approx(float(one_w[:2, :2].astype(np.float64).mean()), rel=1e-6)
    assert pooled[-1, 7] == pytest.approx(float(one_w[-2:, 14:16].astype(np.float64).mean()), rel=1e-6)


def test_masked_cells_hatched_with_a_legend_colour_bar_and_named_axes(tmp_path):
    w = _rows(3, 3)
    mask = torch.triu(torch.ones(3, 3, dtype=torch.bool), 1)
    fig = heatmap(w, masked=mask)
    ax = fig.axes[0]
    shown = ax.images[0].get_array()
    assert np.ma.getmaskarray(shown).tolist() == mask.tolist()  # masked cells are not drawn as values ...
    assert any(p.get_hatch() == "///" for p in ax.patches)  # ... the hatched background shows through
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["masked"]
    assert fig.axes[1].get_ylabel() == "weight"  # the colour bar
    al = alignment(_rows(2, 3), ["le", "chat", "noir"], ["the", "cat"])
    assert "largest weight" in al.axes[0].get_legend().get_texts()[0].get_text()
    assert [t.get_text() for t in pattern(mask).axes[0].get_legend().get_texts()] == ["attended", "not attended"]
    pic = tmp_path / "s.png"
    assert main(["view", "--example", "attnlab-spatial", "-o", str(tmp_path / "s.html"), "--picture", str(pic)]) == 0
    data = from_example(load("attnlab-spatial"), run(load("attnlab-spatial")))
    assert (data["y_axis"], data["x_axis"]) == ("row (height)", "column (width)")
    sp = heatmap(data["layers"][0, 0], xlabel=data["x_axis"], ylabel=data["y_axis"])
    assert sp.axes[0].get_xlabel() == "column (width)" and sp.axes[0].get_ylabel() == "row (height)"


def _inside(fig, artists):
    """The artists (drawn) whose boxes stick out of the figure, as (text, box) pairs."""
    fig.canvas.draw()
    r, W, H = fig.canvas.get_renderer(), fig.bbox.width, fig.bbox.height
    out = []
    for a in artists:
        b = a.get_window_extent(r)
        if b.x0 < -0.5 or b.y0 < -0.5 or b.x1 > W + 0.5 or b.y1 > H + 0.5:
            out.append((a.get_text(), tuple(np.round(b.extents, 1))))
    return out


def test_heatmap_long_labels_and_the_colour_bar_fit_inside_the_figure():
    # a 2 × 3 heatmap is 4.0 × 2.6 inches; a 29-character query label is wider than the default left margin
    fig = heatmap(np.full((2, 3), 1 / 3), ["k1", "k2", "k3"], ["a very long query token label", "q2"],
                  title="title", xlabel="keys of the sentence", ylabel="queries")
    ax, bar = fig.axes
    assert tuple(fig.get_size_inches()) == (4.0, 2.6)
    texts = [*ax.get_xticklabels(), *ax.get_yticklabels(), ax.xaxis.label, ax.yaxis.label, ax.title, bar.yaxis.label]
    assert [t.get_text() for t in texts][-4:] == ["keys of the sentence", "queries", "title", "weight"]
    assert _inside(fig, texts) == []
    assert ax.get_position().x1 < bar.get_position().x0  # the colour bar beside the map, not over it


def test_head_grid_hatches_each_heads_masked_cells():
    w = np.full((1, 2, 3, 3), 1 / 3)
    masked = np.zeros((1, 2, 3, 3), bool)
    masked[0, 0] = np.triu(np.ones((3, 3), bool), 1)  # head 1 causal, head 2 one masked cell
    masked[0, 1, 2, 0] = True
    fig = head_grid(w, masked=masked)
    panels = [a for a in fig.axes if a.images]
    assert [a.get_title() for a in panels] == ["head 1", "head 2"]
    for a, m in zip(panels, masked[0]):
        shown = a.images[0].get_array()
        assert np.ma.getmaskarray(shown).tolist() == m.tolist()
        np.testing.assert_array_equal(shown.compressed(), np.full(int((~m).sum()), 1 / 3))
        assert any(p.get_hatch() == "///" for p in a.patches)
    shared = head_grid(w[0], masked=masked[0, 0])  # one (q, k) mask for every head
    for a in [a for a in shared.axes if a.images]:
        assert np.ma.getmaskarray(a.images[0].get_array()).tolist() == masked[0, 0].tolist()


def test_head_grid_has_one_colour_bar_beside_the_whole_grid():
    fig = head_grid(np.random.default_rng(0).random((2, 2, 3, 3)))
    fig.canvas.draw()  # constrained layout places the axes when drawn
    panels = [a for a in fig.axes if a.images]
    bars = [a for a in fig.axes if not a.images]
    assert len(panels) == 4 and len(bars) == 1 and bars[0].get_ylabel() == "weight"
    bar, boxes = bars[0].get_position(), [a.get_position() for a in panels]
    assert all(bar.x0 > b.x1 for b in boxes)  # right of every panel
    top, bottom = max(b.y1 for b in boxes), min(b.y0 for b in boxes)
    assert bar.y0 < bottom + 0.25 * (top - bottom) and bar.y1 > top - 0.25 * (top - bottom)  # spans both rows
    widths = {round(b.width, 6) for b in boxes}
    assert len(widths) == 1  # no panel gave up room for the bar


def test_png_is_written_at_120_dpi(tmp_path):
    fig = heatmap(np.eye(2))  # 4.0 × 2.6 inches
    png = save(fig, tmp_path / "e.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and png[12:16] == b"IHDR"
    assert (int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")) == (480, 312)


def test_pattern_fills_attended_cells_with_the_legends_colours():
    import matplotlib

    mask = np.array([[True, False, False], [True, True, False]])
    ax = pattern(mask).axes[0]
    im = ax.images[0]
    blues = matplotlib.colormaps["Blues"]  # attended at 1 / 1.3 of the map, not attended at its bottom
    want = np.where(mask[..., None], np.array(blues(1 / 1.3)), np.array(blues(0.0)))
    np.testing.assert_allclose(im.to_rgba(im.get_array().astype(float)), want, atol=1e-6)
    legend = {t.get_text(): p.get_facecolor() for t, p in zip(ax.get_legend().get_texts(), ax.get_legend().get_patches())}
    np.testing.assert_allclose(legend["attended"], blues(1 / 1.3), atol=1e-6)
    np.testing.assert_allclose(legend["not attended"], blues(0.0), atol=1e-6)


def test_spatial_overlay_of_a_channels_first_image_draws_it_channels_last():
    img = np.zeros((3, 4, 6))  # (C, H, W): a red left half, a blue right half
    img[0, :, :3] = 1.0
    img[2, :, 3:] = 1.0
    att = np.array([[0.1, 0.2], [0.3, 0.4]])
    fig = spatial_overlay(img, att)
    want = np.zeros((4, 6, 3))
    want[:, :3, 0] = 1.0
    want[:, 3:, 2] = 1.0
    for ax in fig.axes[:2]:
        np.testing.assert_array_equal(np.asarray(ax.images[0].get_array()), want)
    big = np.asarray(fig.axes[1].images[1].get_array())  # each cell covers 2 × 3 pixels
    np.testing.assert_array_equal(big, np.repeat(np.repeat(att, 2, 0), 3, 1))


def test_alignment_legend_sits_under_the_weights_not_over_them():
    fig = alignment(_rows(3, 4), ["a", "b", "c", "d"], ["x", "y", "z"])
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    ax = fig.axes[0]
    box, plot = ax.get_legend().get_window_extent(r), ax.get_window_extent(r)
    assert box.y1 <= plot.y0 + 0.5  # below the cells
    assert abs(box.x0 - plot.x0) < 20  # and starts at their left edge


def test_head_grid_names_the_axes_on_the_outer_panels_in_small_type():
    fig = head_grid(np.full((2, 2, 3, 3), 1 / 3), xlabel="source", ylabel="target")
    panels = np.array([a for a in fig.axes if a.images]).reshape(2, 2)
    assert [[a.get_xlabel() for a in row] for row in panels] == [["", ""], ["source", "source"]]  # last row only
    assert [[a.get_ylabel() for a in row] for row in panels] == [["target", ""], ["target", ""]]  # first column only
    assert {a.xaxis.label.get_fontsize() for a in panels[1]} == {8.0}
    assert {a.yaxis.label.get_fontsize() for a in panels[:, 0]} == {8.0}


def test_viewer_numbers_the_rows_when_an_examples_tokens_do_not_match_its_queries():
    import dataclasses

    ex = load("tutorial2-multi-head")  # 5 queries
    data = from_example(dataclasses.replace(ex, tokens=list("abcdef")), run(ex))
    assert data["tokens"] == ["1", "2", "3", "4", "5"] and data["sections"][0]["tokens"] == data["tokens"]
