"""``faithfulness.write`` writes results.json (indented by two), table.md and faithfulness.png into its
folder, creating it, and writes them again into a folder that already holds them."""

from __future__ import annotations

import json

from attnlab.experiments import faithfulness


def _results():
    method = {"out_tvd": 0.25, "out_jsd": 0.125, "changed": 50.0, "accuracy": 50.0, "att_jsd": 0.5,
              "att_jsd_median": 0.5, "att_jsd_hist": [1] + [0] * 19}
    methods = {m: dict(method) for m in faithfulness.METHODS}
    return {"config": {"epsilon": 0.05, "data": "numbers-de-en"},
            "models": {"bahdanau": {"learned_accuracy": 100.0, "positions": 4, "methods": methods}}}


def test_write_creates_the_folder_and_writes_again_into_it(tmp_path):
    out = tmp_path / "a" / "b"
    res = _results()
    faithfulness.write(res, out)
    faithfulness.write(res, out)  # a second run into the same folder
    assert sorted(p.name for p in out.iterdir()) == [".attnlab-files", "faithfulness.png", "results.json", "table.md"]
    raw = (out / "results.json").read_text(encoding="utf-8")
    assert json.loads(raw) == res and raw == json.dumps(res, indent=2)
    assert (out / "table.md").read_text(encoding="utf-8").startswith("| decoder | weights | output TVD |")
    assert (out / "faithfulness.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
