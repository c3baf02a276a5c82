"""The page writes a number as the command line does (``f"{x:.{d}f}"``, ``attnlab.explain.render_text.fmt_number``):
the viewer's own rounding function, run in Node.js, against Python's format on the values where a naive
``toFixed`` or a cut string differ (0.5653 → 0.57 at two digits, not 0.56; the exact tie 0.125 → 0.12;
-0.0001 → 0.000) and on 2,000 random float32 weights."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from importlib import resources

import numpy as np
import pytest

from attnlab.explain.render_text import fmt_number

NODE = shutil.which("node") or shutil.which("nodejs")
pytestmark = pytest.mark.skipif(NODE is None, reason="needs Node.js (apt-get install nodejs) to run the page's script")


def _page_function() -> str:
    page = (resources.files("attnlab.viz") / "viewer.html").read_text(encoding="utf-8")
    m = re.search(r"// ROUND-START[^\n]*\n(.*?)// ROUND-END", page, re.S)
    assert m, "viewer.html lost its ROUND-START/ROUND-END markers around pyFixed"
    return m.group(1)


def _node(values: list[float], digits: list[int]) -> list[str]:
    """pyFixed(x, d) for every pair, computed by the page's own function in Node.js."""
    script = _page_function() + (
        "\nconst xs = " + json.dumps(values) + ", ds = " + json.dumps(digits) + ";"
        "\nprocess.stdout.write(JSON.stringify(xs.map((x, i) => pyFixed(x, ds[i]))));")
    out = subprocess.run([NODE, "-e", script], capture_output=True, text=True, timeout=60, check=True)
    return json.loads(out.stdout)


TRICKY = [(0.5653, 2), (0.5653, 3), (0.125, 2), (0.375, 2), (0.0625, 3), (0.005, 2), (1.005, 2), (0.045, 2),
          (2.5, 0), (3.5, 0), (-0.125, 2), (-0.0001, 3), (0.0, 3), (-0.0, 2), (0.999999, 2), (1.0, 4), (0.5, 0)]


def test_tricky_values_round_as_python_formats_them():
    values = [float(np.float32(x)) for x, _ in TRICKY]  # as the page holds them: float32 weights
    digits = [d for _, d in TRICKY]
    assert _node(values, digits) == [fmt_number(x, d) for x, d in zip(values, digits)]


def test_the_examples_of_the_page_comment_are_what_python_prints():
    got = _node([float(np.float32(0.5653)), 0.125, 0.125, -0.0001], [2, 2, 3, 3])
    assert got == ["0.57", "0.12", "0.125", "0.000"]  # by hand: 0.5653 > 0.565; 0.125 is an exact tie, 2 is even


def test_random_float32_weights_and_exact_ties_round_as_python():
    rng = np.random.default_rng(0)
    w = rng.random(1000).astype(np.float32).tolist()
    ties = (np.arange(0, 1000) / 1000 + 0.0005).astype(np.float64)  # n.nnn5: exact ties only where binary allows
    sixteenths = (np.arange(17) / 16).tolist()  # exact binary ties at 3 and 4 digits
    values = w + ties.tolist() + sixteenths
    digits = [2] * 500 + [3] * 500 + [3] * len(ties) + [3] * 17
    assert _node(values, digits) == [fmt_number(x, d) for x, d in zip(values, digits)]
