"""Sharding layouts and argument checks of attnlab.distributed, in one process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from attnlab.distributed import context_parallel_attention, positions, shard

ROOT = Path(__file__).resolve().parents[2]


def test_contiguous_and_zigzag_positions_by_hand():
    assert [positions(8, 2, r).tolist() for r in range(2)] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    # zigzag: 2W = 4 chunks of 2; rank 0 holds chunks 0 and 3, rank 1 chunks 1 and 2
    assert [positions(8, 2, r, "zigzag").tolist() for r in range(2)] == [[0, 1, 6, 7], [2, 3, 4, 5]]
    # every position exactly once, and causal work balanced: the sums of positions are equal
    z = [positions(16, 4, r, "zigzag") for r in range(4)]
    assert sorted(torch.cat(z).tolist()) == list(range(16))
    assert len({int(p.sum()) for p in z}) == 1


def test_uneven_split_names_the_fix():
    with pytest.raises(ValueError, match=r"n=10 .* zigzag layout over 2 processes needs n divisible by 4"):
        positions(10, 2, 0, "zigzag")
    with pytest.raises(ValueError, match="layout must be one of"):
        positions(8, 2, 0, "striped")


def test_without_a_process_group_the_error_says_how_to_start_one():
    with pytest.raises(RuntimeError, match="init_process_group"):
        shard(torch.zeros(1, 1, 4, 2))


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(mode="tree"), "mode must be one of"),
        (dict(layout="striped"), "layout must be one of"),
        (dict(mask=torch.ones(1, 3)), r"mask must be bool \(b, n/W\) = \(1, 4\)"),
    ],
)
def test_bad_arguments(kwargs, message):
    q = torch.zeros(1, 2, 4, 3)
    with pytest.raises(ValueError, match=message):
        context_parallel_attention(q, q, q, **kwargs)


def test_q_k_v_must_be_shards_of_one_sequence():
    q = torch.zeros(1, 2, 4, 3)
    with pytest.raises(ValueError, match=r"k must be this rank's shard \(b, h, n/W, d\); got shape \(2, 4, 3\)"):
        context_parallel_attention(q, q[0], q)
    with pytest.raises(ValueError, match="must share"):
        context_parallel_attention(q, q[:, :, :3], q[:, :, :3])


def test_docs_example_is_the_script_and_runs_under_torchrun():
    script = (ROOT / "examples" / "context_parallel.py").read_text()
    page = (ROOT / "docs" / "distributed.md").read_text()
    assert script.strip() in page, "docs/distributed.md's context-parallel block differs from the script"
    run = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "examples/context_parallel.py"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    lines = [ln for ln in run.stdout.splitlines() if "max |error|" in ln]
    assert len(lines) == 3, run.stdout


def test_a_contiguous_shard_is_a_view_of_the_whole_and_a_zigzag_one_its_two_chunks(monkeypatch):
    """Rank 1 of 2 (the process group stood in for): the contiguous layout narrows ``x`` (no copy, the
    memory of one view), the zigzag layout gathers chunks 1 and 2 of 4."""
    import attnlab.distributed.layout as layout

    monkeypatch.setattr(layout, "world", lambda group=None: (1, 2))
    x = torch.arange(16.0).reshape(1, 1, 8, 2)
    y = shard(x)
    assert torch.equal(y, x[:, :, 4:]) and y.data_ptr() == x[:, :, 4:].data_ptr()  # the same memory
    assert torch.equal(shard(x, layout="zigzag"), x[:, :, [2, 3, 4, 5]])
    assert torch.equal(shard(x.transpose(-1, -2), dim=-1), x.transpose(-1, -2)[..., 4:])
