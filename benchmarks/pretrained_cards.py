"""The shipped models' cards as one Markdown table (the figures in benchmarks/RESULTS.md).

    PYTHONPATH=src .venv/bin/python benchmarks/pretrained_cards.py

Every figure is read from the model's ``card.json``, which ``python -m attnlab.pretrained.make``
measured on the shipped weights; the tests measure them again.
"""

from __future__ import annotations

from attnlab import pretrained


def _score(s: dict) -> str:
    d = s.get("digits", 1)
    return f"{s['value']:.{d}f} ({s['low']:.{d}f}–{s['high']:.{d}f})"


def table() -> str:
    rows = ["| model | parameters | shipped | trained | held-out scores (95% interval) |", "|---|---|---|---|---|"]
    for name in pretrained.names():
        c = pretrained.card(name)
        scores = "; ".join(f"{metric} {_score(s)}" for metric, s in c["scores"].items())
        rows.append(f"| `{name}` | {c['parameters']:,} | {c['dtype']}, {c['size_bytes'] / 1e6:.1f} MB | "
                    f"{c['train_seconds'] / 60:.1f} min | {scores} |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(table())
