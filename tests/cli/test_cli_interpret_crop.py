"""``attnlab interpret rollout|flow``: ``--tokens A:B`` / ``--last N`` crop the attention JSON, a long input
prints each row's largest entries instead of the whole matrix, and the picture is labelled with the tokens."""

from __future__ import annotations

import json

import pytest

from attnlab.cli import main

# 2 layers, 1 head, 3 tokens (as in test_cli_interpret.py): A1 = [[1,0,0],[1,0,0],[0,1,0]], A2 = [[1,0,0],[0,1,0],[1,0,0]]
LAYERS = [[[[1, 0, 0], [1, 0, 0], [0, 1, 0]]], [[[1, 0, 0], [0, 1, 0], [1, 0, 0]]]]


def _json(tmp_path, tokens, layers) -> str:
    path = tmp_path / "w.json"
    path.write_text(json.dumps({"tokens": tokens, "layers": layers}))
    return str(path)


@pytest.mark.parametrize("crop", [["--tokens", "2:3"], ["--tokens=-2:"], ["--last", "2"]])
def test_a_crop_keeps_the_span_and_renormalises_its_rows(capsys, tmp_path, crop):
    # tokens 2..3: A1 → [[0,0],[1,0]] (row 1 lost its only key: stays zero), A2 → [[1,0],[0,0]].
    # With the residual: Â1 = [[1,0],[.5,.5]], Â2 = [[1,0],[0,1]], R = Â2 Â1 = [[1,0],[.5,.5]].
    path = _json(tmp_path, ["a", " b", "\n"], LAYERS)
    assert main(["interpret", "rollout", "--json", path, *crop]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["␣b", "\\n"]
    assert [[float(v) for v in line.split()[1:]] for line in lines[1:3]] == [[1, 0], [0.5, 0.5]]


@pytest.mark.parametrize("argv, says", [
    (["--tokens", "3"], "expected A:B"),
    (["--tokens", "0:2"], "expected A:B"),
    (["--tokens", "4:9"], "--tokens 4:9 selects no token of the 3"),
    (["--tokens", "1:2", "--last", "2"], "not allowed with"),
    (["--last", "0"], ">= 1"),
])
def test_a_bad_crop_is_one_line_exit_2(capsys, tmp_path, argv, says):
    path = _json(tmp_path, ["a", "b", "c"], LAYERS)
    try:
        code = main(["interpret", "rollout", "--json", path, *argv])
    except SystemExit as e:  # argparse's refusal
        code = e.code
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0]


def _long(n: int) -> list:
    """One layer, one head: token i attends 0.7 to itself and 0.3 to the first token (token 0: all to itself)."""
    rows = [[(1.0 if j == 0 else 0.0) for j in range(n)]]
    rows += [[0.3 if j == 0 else 0.7 if j == i else 0.0 for j in range(n)] for i in range(1, n)]
    return [[rows]]


def test_a_long_input_prints_each_rows_largest_entries_with_positions_from_one(capsys, tmp_path):
    tokens = [chr(97 + i) for i in range(20)]
    path = _json(tmp_path, tokens, _long(20))
    assert main(["interpret", "rollout", "--json", path, "--no-residual"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 21 and lines[0].startswith("20 tokens: each output token's 5 largest input tokens")
    assert lines[1].split() == ["1", "a", "←", "1", "a", "1.000"]  # zero weights are left out
    assert lines[6].split() == ["6", "f", "←", "6", "f", "0.700", "1", "a", "0.300"]


def test_a_cropped_summary_counts_positions_in_the_whole_input(capsys, tmp_path):
    tokens = [chr(97 + i) for i in range(26)]
    path = _json(tmp_path, tokens, _long(26))
    assert main(["interpret", "rollout", "--json", path, "--no-residual", "--tokens", "4:23"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("20 tokens")
    # token 'd' (position 4) is first of the crop; 'f' lost the first token 'a': all its weight on itself
    assert lines[1].split() == ["4", "d", "←", "4", "d", "1.000"]
    assert lines[3].split() == ["6", "f", "←", "6", "f", "1.000"]


def test_flow_on_a_long_input_says_how_to_crop_and_then_runs(capsys, tmp_path):
    tokens = [chr(65 + i % 26) for i in range(80)]
    path = _json(tmp_path, tokens, _long(80))
    assert main(["interpret", "flow", "--json", path]) == 2
    assert "--last 64" in capsys.readouterr().err
    assert main(["interpret", "flow", "--json", path, "--last", "64", "--no-residual"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("64 tokens") and lines[1].split()[:2] == ["17", "Q"]  # token 17 of 80 comes first


def test_the_picture_is_labelled_with_the_tokens(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    import attnlab.cli.interpret as cli

    drawn = {}
    monkeypatch.setattr(cli, "save_figure", lambda fig, path: drawn.update(fig=fig, path=path))
    tokens = [chr(97 + i % 26) for i in range(100)]
    path = _json(tmp_path, tokens, _long(100))
    assert main(["interpret", "rollout", "--json", path, "--picture", str(tmp_path / "r.png")]) == 0
    ax = drawn["fig"].axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == tokens
    assert [t.get_text() for t in ax.get_yticklabels()] == tokens
    width, height = drawn["fig"].get_size_inches() * drawn["fig"].dpi
    assert max(width, height) <= 4000


def test_a_long_inputs_summary_lines_up_its_columns(capsys, tmp_path):
    # the widest cell is a 2-digit position, a space and a 1-letter token: 4 characters; every cell is
    # right-aligned to 4, cells are joined by two spaces (worked by hand)
    tokens = [chr(97 + i) for i in range(20)]
    path = _json(tmp_path, tokens, _long(20))
    assert main(["interpret", "rollout", "--json", path, "--no-residual"]) == 0
    lines = capsys.readouterr().out.splitlines()[1:]
    assert lines[0] == " 1 a ←  1 a 1.000"
    assert lines[5] == " 6 f ←  6 f 0.700   1 a 0.300"
    assert lines[11] == "12 l ← 12 l 0.700   1 a 0.300"
    assert {line.index("←") for line in lines} == {5}
