"""``attnlab caption --out DIR``: the files it writes and what each picture shows (read back from the figures)."""

from __future__ import annotations

import importlib
import json
from types import SimpleNamespace

import numpy as np
import pytest

pytest.importorskip("matplotlib", reason="the overlays need matplotlib (pip install 'attnlab[viz]')")

from attnlab.cli.caption import _write_overlays  # noqa: E402

heatmap_module = importlib.import_module("attnlab.viz.heatmap")  # (attnlab.viz.heatmap is also a function)


def test_overlays_a_file_per_word_a_strip_and_a_row_per_head(tmp_path, monkeypatch, capsys):
    figs, real = {}, heatmap_module.save

    def keep(fig, path):
        figs[path.name] = fig
        return real(fig, path)

    monkeypatch.setattr(heatmap_module, "save", keep)
    rng = np.random.default_rng(0)
    head_maps = rng.random((2, 2, 3, 3))  # 2 heads, 2 words, a 3 × 3 region grid
    cap = SimpleNamespace(words=["cat", "dog"], text="cat dog", maps=head_maps.mean(0), head_maps=head_maps)
    image = rng.random((3, 12, 12))
    _write_overlays(tmp_path, image, cap, 3)
    names = ["01_cat.png", "02_dog.png", "caption.png", "caption_heads.png"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [".attnlab-files", *names] and list(figs) == names
    assert json.loads((tmp_path / ".attnlab-files").read_text()) == {"files": names}  # what it may overwrite later
    assert capsys.readouterr().out == f"wrote 2 overlays, caption.png and caption_heads.png to {tmp_path}/\n"
    grid = np.array(figs["caption_heads.png"].axes).reshape(2, 3)  # a row per head: the image, then each word
    assert [a.get_title() for a in grid[0]] == ["image", "cat", "dog"]
    assert [a.get_ylabel() for a in grid[:, 0]] == ["head 1", "head 2"]
    for h in range(2):
        for w in range(2):
            np.testing.assert_array_equal(np.asarray(grid[h, w + 1].images[1].get_array()), head_maps[h, w])
    strip = figs["caption.png"].axes
    assert [a.get_title() for a in strip] == ["“cat dog”", *(f"{w} ({cap.maps[i].max():.2f})"
                                                          for i, w in enumerate(cap.words))]
