"""The offline viewer in a real headless browser: it renders, hover shows a query's weights, the matrix view's
labels line up with its cells, one head control, every view opens on a --focus token, no console errors.

Uses Debian's chromium driven by Playwright for Python (never `playwright
install`: the system browser is launched by path). The set-up installs
chromium with apt-get where it can (as root); the test skips with a message
only where no browser can be installed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time

import numpy as np
import pytest
import torch

from attnlab.explain import load, run
from attnlab.viz.viewer import from_example, write_html

ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name) or (f"/usr/bin/{name}" if os.path.exists(f"/usr/bin/{name}") else None)
        if path:
            return path
    if os.geteuid() == 0 and shutil.which("apt-get"):  # the set-up: install Debian's chromium
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        try:
            subprocess.run("apt-get update -qq && apt-get install -y -qq chromium", shell=True, env=env,
                           timeout=600, check=True, capture_output=True)
        except (subprocess.SubprocessError, OSError):
            return None
        return shutil.which("chromium")
    return None


@pytest.fixture(scope="module")
def browser_page():
    sync_api = pytest.importorskip("playwright.sync_api", reason="needs the playwright package (pip install playwright)")
    exe = _chromium()
    if exe is None:
        pytest.skip("no chromium browser, and it could not be installed (apt-get install chromium as root)")
    profile = tempfile.mkdtemp(prefix="attnlab-chromium-")
    with sync_api.sync_playwright() as p:
        ctx = p.chromium.launch_persistent_context(profile, executable_path=exe, headless=True, args=ARGS)
        try:
            yield ctx.new_page()
        finally:
            ctx.close()
            shutil.rmtree(profile, ignore_errors=True)


def _open(page, path):
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("request", lambda r: errors.append("network: " + r.url) if not r.url.startswith(("file:", "data:")) else None)
    page.goto(path.as_uri())
    page.wait_for_selector("body[data-ready='1']", timeout=5000)
    return errors


def _weights(page, sel):
    return [float(x) for x in page.eval_on_selector_all(sel, "els => els.map(e => e.dataset.w)")]


def test_matrix_view_hover_shows_weights(browser_page, tmp_path):
    ex = load("tutorial2-multi-head")
    t = run(ex)
    w = t["weights"].value[0]  # (h, q, k)
    page = browser_page
    errors = _open(page, write_html(from_example(ex, t), tmp_path / "mh.html"))
    page.click("#views button[data-view='matrix']")
    assert page.locator(".qtok").count() == 5 and page.locator(".ktok").count() == 5
    assert page.inner_text(".qtok[data-i='3']") == "垫子"
    assert page.eval_on_selector("#mx-canvas", "c => [c.width, c.height]") == [5 * 40, 5 * 40]

    page.hover(".qtok[data-i='1']")  # 坐, head 1
    assert _weights(page, ".ktok") == pytest.approx(w[0, 1].tolist(), abs=1e-6)  # float32 on the page
    assert "坐" in page.inner_text("#readout") and "上" in page.inner_text("#readout")

    page.check("#heads input[data-h='1']")  # head 2
    page.hover(".qtok[data-i='0']")
    assert _weights(page, ".ktok") == pytest.approx(w[1, 0].tolist(), abs=1e-6)
    assert "head 2" in page.inner_text("#readout")

    page.click(".qtok[data-i='2']")  # click keeps the selection while hovering elsewhere
    page.hover(".qtok[data-i='4']")
    assert "query 3" in page.inner_text("#readout")
    page.hover("#mx-canvas", position={"x": 40 * 4 + 5, "y": 40 * 2 + 5})  # cell (query 3, key 5)
    assert f"{w[1, 2, 4].item():.3f}" in page.inner_text("#readout") and "key 5" in page.inner_text("#readout")
    assert errors == []


def test_head_view_lines_follow_the_hovered_token_and_the_head_filter(browser_page, tmp_path):
    ex = load("tutorial2-multi-head")
    t = run(ex)
    w = t["weights"].value[0]
    page = browser_page
    errors = _open(page, write_html(from_example(ex, t), tmp_path / "hv.html"))
    assert page.get_attribute("body", "data-view") == "head"
    assert page.locator("#hv-left .tok").count() == 5 and page.locator("#heads input").count() == 2
    page.uncheck("#heads input[data-h='0']")  # only head 2 drawn
    page.hover("#hv-left .tok[data-i='3']")
    assert _weights(page, "#hv-right .tok") == pytest.approx(w[1, 3].tolist(), abs=1e-6)
    page.check("#heads input[data-h='0']")  # both heads: the mean over them
    page.hover("#hv-left .tok[data-i='2']")
    assert _weights(page, "#hv-right .tok") == pytest.approx(w[:, 2].mean(0).tolist(), abs=1e-6)
    page.hover("#hv-right .tok[data-i='0']")  # a key: the weights every query gives it
    assert _weights(page, "#hv-left .tok") == pytest.approx(w[:, :, 0].mean(0).tolist(), abs=1e-6)
    # something is drawn: the canvas has coloured pixels
    painted = page.evaluate("""() => { const c = document.getElementById('hv-canvas');
        const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
        let n = 0; for (let i = 3; i < d.length; i += 4) if (d[i] > 0) n++; return n; }""")
    assert painted > 100
    assert errors == []


def test_neuron_view_shows_q_k_their_product_and_the_score(browser_page, tmp_path):
    ex = load("tutorial2-multi-head")
    t = run(ex)
    q, k = t["query_heads"].value[0].numpy(), t["key_heads"].value[0].numpy()  # (h, n, d)
    page = browser_page
    errors = _open(page, write_html(from_example(ex, t), tmp_path / "nv.html"))
    page.click("#views button[data-view='neuron']")
    page.check("#heads input[data-h='1']")
    page.select_option("#nv-q", index=2)
    page.select_option("#nv-k", index=4)
    row = lambda r: [float(x) for x in page.eval_on_selector_all(f"#nv-table tr[data-row='{r}'] td", "els => els.map(e => e.dataset.v)")]  # noqa: E731
    assert row("q") == pytest.approx(q[1, 2].tolist()) and row("k") == pytest.approx(k[1, 4].tolist())
    assert row("qk") == pytest.approx((q[1, 2] * k[1, 4]).tolist())
    by_hand = sum(a * b for a, b in zip(q[1, 2].tolist(), k[1, 4].tolist()))
    assert float(page.get_attribute("#nv-sum", "data-sum")) == pytest.approx(by_hand)
    assert f"{t['scaled_scores'].value[0, 1, 2, 4].item():.4f}" in page.inner_text("#nv-sum")
    assert errors == []


def test_model_view_thumbnails_open_the_matrix_view(browser_page, tmp_path):
    w = torch.softmax(torch.randn(3, 4, 6, 6, generator=torch.Generator().manual_seed(0)), -1)
    page = browser_page
    errors = _open(page, write_html({"layers": w, "tokens": ["a b", "\n", "c", " ", "d", "e"]}, tmp_path / "mv.html"))
    page.click("#views button[data-view='model']")
    assert page.locator("canvas.thumb").count() == 12
    page.click("canvas.thumb[data-l='2'][data-h='1']")
    assert page.get_attribute("body", "data-view") == "matrix"
    assert page.input_value("#layer") == "2" and page.is_checked("#heads input[data-h='1']")
    page.hover(".qtok[data-i='4']")
    assert _weights(page, ".ktok") == pytest.approx(w[2, 1, 4].tolist(), abs=1e-6)
    labels = page.eval_on_selector_all(".qtok", "els => els.map(e => e.textContent)")
    assert labels[:4] == ["a␣b", "⏎", "c", "␣"]  # whitespace shown
    assert errors == []


def test_matrix_view_toggles_masked_positions(browser_page, tmp_path):
    ex = load("attnlab-masked-causal")
    page = browser_page
    errors = _open(page, write_html(from_example(ex, run(ex)), tmp_path / "m.html"))
    page.click("#views button[data-view='matrix']")
    page.hover(".qtok[data-i='1']")
    masked = page.eval_on_selector_all(".ktok", "els => els.map(e => e.classList.contains('masked'))")
    assert masked == [False, False, True, True]
    page.uncheck("#show-masked")
    page.hover(".qtok[data-i='0']")
    page.hover(".qtok[data-i='1']")
    masked = page.eval_on_selector_all(".ktok", "els => els.map(e => e.classList.contains('masked'))")
    assert masked == [False, False, False, False]
    assert errors == []


def test_sections_are_tabs(browser_page, tmp_path):
    g = torch.Generator().manual_seed(1)
    enc = torch.softmax(torch.randn(1, 2, 3, 3, generator=g), -1)
    cross = torch.softmax(torch.randn(1, 2, 2, 3, generator=g), -1)
    data = {"title": "enc-dec", "sections": [
        {"name": "encoder", "layers": enc, "tokens": ["a", "b", "c"]},
        {"name": "cross", "layers": cross, "tokens": ["x", "y"], "key_tokens": ["a", "b", "c"]}]}
    page = browser_page
    errors = _open(page, write_html(data, tmp_path / "s.html"))
    assert page.eval_on_selector_all("#sections button", "els => els.map(e => e.textContent)") == ["encoder", "cross"]
    page.click("#sections button[data-sec='1']")
    page.click("#views button[data-view='matrix']")
    assert page.locator(".qtok").count() == 2 and page.locator(".ktok").count() == 3
    page.hover(".qtok[data-i='1']")
    assert _weights(page, ".ktok") == pytest.approx(cross[0, 0, 1].tolist(), abs=1e-6)
    assert errors == []


def test_budget_12_layers_12_heads_512_tokens(browser_page, tmp_path):
    """The issue's budget: the page ≤ 40 MB, first paint and a hover update within 3 s."""
    rng = np.random.default_rng(0)
    logits = rng.standard_normal((12, 12, 512, 512), dtype=np.float32) * 2
    w = np.exp(logits)
    w /= w.sum(-1, keepdims=True)
    path = write_html({"layers": w, "tokens": [f"t{i}" for i in range(512)]}, tmp_path / "big.html")
    size_mb = path.stat().st_size / 1e6
    assert size_mb <= 40
    page = browser_page
    start = time.perf_counter()
    errors = _open(page, path)
    first_paint = time.perf_counter() - start
    start = time.perf_counter()
    page.hover("#hv-left .tok[data-i='100']")
    page.wait_for_function("document.querySelector('#hv-right .tok').dataset.w !== undefined")
    hover = time.perf_counter() - start
    print(f"12x12x512 page: {size_mb:.1f} MB, first paint {first_paint:.2f} s, hover {hover:.2f} s")
    assert first_paint < 3 and hover < 3
    shown = _weights(page, "#hv-right .tok")
    assert shown == pytest.approx(w[0, :, 100].mean(0).tolist(), abs=1 / 254)  # 8-bit on the page
    assert errors == []


def test_cli_screenshot_of_the_head_view(tmp_path, capsys):
    pytest.importorskip("playwright.sync_api", reason="needs the playwright package (pip install playwright)")
    Image = pytest.importorskip("PIL.Image")
    if _chromium() is None:
        pytest.skip("no chromium browser, and it could not be installed (apt-get install chromium as root)")
    from attnlab.cli import main

    png = tmp_path / "hv.png"
    assert main(["view", "--example", "tutorial2-multi-head", "-o", str(tmp_path / "hv.html"),
                 "--screenshot", str(png), "--focus", "2"]) == 0
    with Image.open(png) as im:
        assert im.size == (900, 560)
        assert len(im.convert("RGB").getcolors(maxcolors=1 << 20)) > 20  # something was drawn, not a blank page
    assert main(["view", "--example", "tutorial2-multi-head", "-o", str(tmp_path / "x.html"),
                 "--screenshot", str(tmp_path / "x.jpg")]) == 2
    assert main(["view", "--example", "tutorial2-multi-head", "-o", str(tmp_path / "x.html"),
                 "--screenshot", str(png), "--focus", "9"]) == 2
    assert "--focus" in capsys.readouterr().err


def test_tokens_that_look_like_markup_render_as_text(browser_page, tmp_path):
    """Tokens such as ``<!--<script>`` and ``</script>`` would end or hide the page's data block if they
    reached the HTML parser: the page must still render, showing them as text."""
    tokens = ["<!--<script>", "</script>", "a&amp;b", "<b>x</b>"]
    w = torch.softmax(torch.randn(1, 1, 4, 4, generator=torch.Generator().manual_seed(0)), -1)
    page = browser_page
    errors = _open(page, write_html({"title": "</title><!--<script>", "layers": w, "tokens": tokens},
                                    tmp_path / "markup.html"))
    page.click("#views button[data-view='matrix']")
    assert page.eval_on_selector_all(".qtok", "els => els.map(e => e.textContent)") == tokens
    assert page.inner_text("#title") == "</title><!--<script>"
    assert errors == []


def _boxes(page, sel):
    return page.eval_on_selector_all(sel, """els => els.map(e => { const r = e.getBoundingClientRect();
        return [r.left, r.top, r.width, r.height]; })""")


def _labels_line_up(page, q, k, beside=True):
    """Row label i's middle lies in the canvas's row i, column label j's middle in its column j (and,
    unless scrolled, the labels lie left of and above the canvas)."""
    cx, cy, cw, ch = _boxes(page, "#mx-canvas")[0]
    rows, cols = _boxes(page, "#mx-rows .tok"), _boxes(page, "#mx-cols .tok")
    assert len(rows) == q and len(cols) == k
    for i, (x, y, w, h) in enumerate(rows):
        assert cy + i * ch / q <= y + h / 2 <= cy + (i + 1) * ch / q and (x + w <= cx + 1 or not beside)
    for j, (x, y, w, h) in enumerate(cols):
        assert cx + j * cw / k <= x + w / 2 <= cx + (j + 1) * cw / k and (y + h <= cy + 1 or not beside)


def test_matrix_view_labels_its_rows_with_queries_and_its_columns_with_keys(browser_page, tmp_path):
    g = torch.Generator().manual_seed(2)
    cross = torch.softmax(torch.randn(1, 2, 2, 3, generator=g), -1)
    data = {"sections": [{"name": "cross", "layers": cross, "tokens": ["x", "y y"], "key_tokens": ["猫", "b", "\n"]}]}
    page = browser_page
    errors = _open(page, write_html(data, tmp_path / "lab.html"))
    page.click("#views button[data-view='matrix']")
    assert page.eval_on_selector_all("#mx-rows .tok", "els => els.map(e => e.textContent)") == ["x", "y␣y"]
    assert page.eval_on_selector_all("#mx-cols .tok", "els => els.map(e => e.textContent)") == ["猫", "b", "⏎"]
    assert page.inner_text("#mx-corner").split() == ["key", "→", "query", "↓"]
    _labels_line_up(page, 2, 3)
    # the column labels are turned on their side; hovering a row label chooses that query
    assert page.eval_on_selector("#mx-cols .tok", "e => getComputedStyle(e).writingMode") == "vertical-rl"
    page.hover("#mx-rows .tok[data-i='1']")
    assert _weights(page, ".ktok") == pytest.approx(cross[0, 0, 1].tolist(), abs=1e-6)
    assert page.get_attribute("#mx-rows .tok.active", "data-i") == "1"
    best = int(cross[0, 0, 1].argmax())
    assert page.get_attribute("#mx-cols .tok.best", "data-j") == str(best)
    assert errors == []


def test_matrix_labels_of_a_long_input_scroll_and_stay_readable(browser_page, tmp_path):
    n = 100
    w = torch.softmax(torch.randn(1, 1, n, n, generator=torch.Generator().manual_seed(3)), -1)
    page = browser_page
    errors = _open(page, write_html({"layers": w, "tokens": [f"t{i}" for i in range(n)]}, tmp_path / "long.html"))
    page.click("#views button[data-view='matrix']")
    assert page.eval_on_selector("#mx-canvas", "c => c.width") == 12 * n  # 12 px cells past ~64 tokens
    font = page.eval_on_selector("#mx-rows .tok", "e => parseFloat(getComputedStyle(e).fontSize)")
    assert font >= 10
    _labels_line_up(page, n, n)
    pane = "#pane-matrix"
    assert page.eval_on_selector(pane, "p => p.scrollHeight > p.clientHeight && p.scrollWidth > p.clientWidth")
    page.eval_on_selector(pane, "p => { p.scrollTop = 900; p.scrollLeft = 700; }")
    # scrolled: the labels stay at the pane's edges, still in line with the cells
    top = _boxes(page, pane)[0][1]
    assert _boxes(page, "#mx-cols")[0][1] == pytest.approx(top + 1, abs=12)  # the border and padding
    assert _boxes(page, "#mx-rows")[0][0] == pytest.approx(_boxes(page, pane)[0][0] + 1, abs=12)
    _labels_line_up(page, n, n, beside=False)
    assert errors == []


def test_one_head_control_checkboxes_in_the_head_view_radio_buttons_elsewhere(browser_page, tmp_path):
    w = torch.softmax(torch.randn(2, 3, 4, 4, generator=torch.Generator().manual_seed(4)), -1)
    page = browser_page
    errors = _open(page, write_html({"layers": w}, tmp_path / "heads.html"))
    assert page.locator("#head").count() == 0 and page.locator(".controls select").count() == 1  # the layer
    types = lambda: page.eval_on_selector_all("#heads input", "els => els.map(e => e.type)")  # noqa: E731
    checked = lambda: page.eval_on_selector_all("#heads input", "els => els.map(e => e.checked)")  # noqa: E731
    assert types() == ["checkbox"] * 3 and checked() == [True] * 3
    page.uncheck("#heads input[data-h='2']")
    page.click("#views button[data-view='matrix']")
    assert types() == ["radio"] * 3 and checked() == [True, False, False]
    page.check("#heads input[data-h='2']")
    assert checked() == [False, False, True]
    page.hover(".qtok[data-i='1']")
    assert _weights(page, ".ktok") == pytest.approx(w[0, 2, 1].tolist(), abs=1e-6)
    assert "head 3" in page.inner_text("#readout")
    page.click("#views button[data-view='head']")  # back to the heads drawn: the choice kept
    assert types() == ["checkbox"] * 3 and checked() == [True, True, False]
    assert errors == []


def test_head_view_fills_its_panel(browser_page, tmp_path):
    ex = load("tutorial2-multi-head")
    page = browser_page
    page.set_viewport_size({"width": 1400, "height": 900})
    try:
        errors = _open(page, write_html(from_example(ex, run(ex)), tmp_path / "big-panel.html"))
        _, _, pw, ph = _boxes(page, "#pane-head")[0]
        _, _, cw, ch = _boxes(page, "#hv-canvas")[0]
        assert ch >= 0.25 * ph and cw >= 0.4 * pw  # before: 260 × 90 px of 1350 × 760
        font = page.eval_on_selector("#hv-left .tok", "e => parseFloat(getComputedStyle(e).fontSize)")
        assert font >= 18
        page.hover("#hv-left .tok[data-i='4']")  # the lines still start at their tokens
        y = _boxes(page, "#hv-left .tok[data-i='4']")[0]
        row = ch / 5
        assert y[3] == pytest.approx(row, abs=1)
        assert errors == []
    finally:
        page.set_viewport_size({"width": 1280, "height": 720})


FOCUS = 3  # the third token, 在, counted from 1 as the page shows it


def _focused(page, view, w):
    """What each view shows when the page opens with query 3 chosen (w: heads × q × k)."""
    i = FOCUS - 1
    if view == "head":
        assert page.get_attribute("#hv-left .tok.focus", "data-i") == str(i)
        assert _weights(page, "#hv-right .tok") == pytest.approx(w[:, i].mean(0).tolist(), abs=1e-6)
    elif view == "matrix":
        assert page.get_attribute(".qtok.active", "data-i") == str(i)
        assert page.get_attribute("#mx-rows .tok.active", "data-i") == str(i)
        assert _weights(page, ".ktok") == pytest.approx(w[0, i].tolist(), abs=1e-6)
    elif view == "neuron":
        assert page.input_value("#nv-q") == str(i)
    else:  # the model view: the query's row is red in each thumbnail
        px = page.evaluate(f"""() => {{ const c = document.querySelector('canvas.thumb');
            return Array.from(c.getContext('2d').getImageData(0, {i}, 1, 1).data); }}""")
        assert px[0] == 255 and px[1] < 200
    assert f"query {FOCUS} (在)" in page.inner_text("#readout")


@pytest.mark.parametrize("view", ["head", "model", "neuron", "matrix"])
def test_every_view_opens_on_the_focused_token(browser_page, tmp_path, capsys, view):
    from attnlab.cli import main

    ex = load("tutorial2-multi-head")
    w = run(ex)["weights"].value[0]
    out = tmp_path / "f.html"
    assert main(["view", "--example", "tutorial2-multi-head", "-o", str(out), "--focus", str(FOCUS)]) == 0
    page = browser_page
    errors = _open(page, out)  # the page itself opens on query 3 ...
    page.click(f"#views button[data-view='{view}']")
    _focused(page, view, w)
    page.goto("about:blank")  # ... and the address chooses the view, as the screenshot does
    page.goto(out.as_uri() + f"#view={view}&query={FOCUS}")
    page.wait_for_selector("body[data-ready='1']", timeout=5000)
    assert page.get_attribute("body", "data-view") == view
    _focused(page, view, w)
    assert errors == []


@pytest.mark.parametrize("view", ["model", "neuron", "matrix"])
def test_cli_screenshot_of_every_view_with_focus(tmp_path, capsys, view):
    pytest.importorskip("playwright.sync_api", reason="needs the playwright package (pip install playwright)")
    Image = pytest.importorskip("PIL.Image")
    if _chromium() is None:
        pytest.skip("no chromium browser, and it could not be installed (apt-get install chromium as root)")
    from attnlab.cli import main

    png = tmp_path / f"{view}.png"
    start = time.perf_counter()
    assert main(["view", "--example", "tutorial2-multi-head", "-o", str(tmp_path / "p.html"), "--screenshot", str(png),
                 "--screenshot-view", view, "--focus", "2"]) == 0
    assert time.perf_counter() - start < 25  # it used to wait 30 s for a hidden token, then fail
    with Image.open(png) as im:
        assert im.size == (900, 560) and len(im.convert("RGB").getcolors(maxcolors=1 << 20)) > 20
