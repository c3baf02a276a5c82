"""Shared by the CLI tests: ``attnlab evaluate``'s figures against sacrebleu on ``attnlab translate``'s output.

The test sentences are rebuilt with ``attnlab.data.load_dataset`` (as training split them),
translated with the ``translate`` verb, scored here with sacrebleu directly (not through
``attnlab.train.metrics``), overall and for the two halves of the source lengths, and
compared with the table ``evaluate --limit 10 --buckets 2`` prints.
"""

from __future__ import annotations

import re

import pytest

from attnlab.cli import main
from attnlab.data import load_dataset
from attnlab.data.vocab import tokenize


def check_evaluate_against_translate(run_dir, capsys, header: str, beam: int = 1) -> None:
    sacrebleu = pytest.importorskip("sacrebleu")
    ds = load_dataset("numbers-de-en", n=300, seed=0, max_digits=3)
    assert ds.src_level == "char"
    srcs, refs = zip(*ds.splits.test[:10])
    guard = 2 * max(len(tokenize(r, ds.tgt_level)) for r in refs) + 10  # evaluate's length guard (one batch)
    argv = ["translate", "--checkpoint", str(run_dir), "--no-alignment", "--max-len", str(guard), "--beam", str(beam)]
    assert main([*argv, *srcs]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [ln.split(" → ")[0] for ln in lines] == list(srcs)
    hyps = [ln.split(" → ", 1)[1].removesuffix(f"  (stopped at --max-len {guard})") for ln in lines]

    assert main(["evaluate", "--checkpoint", str(run_dir), "--limit", "10", "--buckets", "2", "--beam", str(beam)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"numbers-de-en test: 10 sentences, {header}, beam {beam}"

    def expect(h, r):
        exact = 100 * sum(a == b for a, b in zip(h, r)) / len(r)
        return exact, sacrebleu.corpus_bleu(h, [r]).score, sacrebleu.corpus_chrf(h, [r]).score

    m = re.fullmatch(r"exact % (\S+) \(95% (\S+)–(\S+)\)  BLEU (\S+) \(95% (\S+)–(\S+)\)  chrF (\S+) \(95% (\S+)–(\S+)\)",
                     out[1])
    exact, bleu, chrf = (float(m.group(i)) for i in (1, 4, 7))
    assert (exact, bleu, chrf) == pytest.approx(expect(hyps, refs), abs=0.051)
    for i in (1, 4, 7):  # each figure lies within its bootstrap interval
        assert float(m.group(i + 1)) - 0.05 <= float(m.group(i)) <= float(m.group(i + 2)) + 0.05
    # two buckets: the shorter and the longer half of the source lengths (in characters)
    lengths = sorted(len(s) for s in srcs)
    assert lengths[4] < lengths[5]
    halves = [(lengths[0], lengths[4]), (lengths[5], lengths[9])]
    rows = [ln for ln in out if re.match(r"\| \d", ln)]
    assert len(rows) == 2
    for row, (lo, hi) in zip(rows, halves):
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[0] == f"{lo}–{hi}" and cells[1] == "5"
        sel = [i for i, s in enumerate(srcs) if lo <= len(s) <= hi]
        want = expect([hyps[i] for i in sel], [refs[i] for i in sel])
        assert tuple(map(float, cells[2:])) == pytest.approx(want, abs=0.051)
