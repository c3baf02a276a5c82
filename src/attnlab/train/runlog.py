"""Run logs: ``metrics.jsonl`` in each training run's checkpoint folder.

One JSON object per line, in step order: ``{"step": 20, "loss": 3.1, "tokens_per_s": 1342.0,
"wall_s": 15.2}`` for training, ``{"step": 500, "valid_loss": ..., "valid_exact": ...}`` for
validation. The log is written with the checkpoint (as one of its files), so it always
matches the saved weights, and a resumed run continues it. ``attnlab plot-run DIR`` draws it.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

NAME = "metrics.jsonl"


def to_jsonl(records: list[dict]) -> str:
    return "".join(json.dumps(r, ensure_ascii=False, allow_nan=False) + "\n" for r in records)


def _clean(r: dict) -> dict:
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in r.items()}


def read(directory: str | Path) -> list[dict]:
    """The records of ``DIR/metrics.jsonl`` ([] when the run has none)."""
    path = Path(directory) / NAME
    if not path.is_file():
        return []
    out = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}, line {n}: not a JSON object ({e.msg})") from None
        if not isinstance(rec, dict) or not isinstance(rec.get("step"), int):
            raise ValueError(f"{path}, line {n}: expected an object with an integer 'step'")
        out.append(rec)
    return out


def jsonl(records: list[dict]) -> str:
    """The file's text for ``records`` (non-finite floats written as null)."""
    return to_jsonl([_clean(r) for r in records])


__all__ = ["NAME", "read", "jsonl"]
