"""A claim built in code (a float, not a number parsed from a file) is held to the decimals it is written
with: 0.8242 against a true 0.8238 is wrong, not exact within ½. The translator's walkthrough in bf16 writes
its claim to the 2 decimals bf16 holds, so it is exact there and says what the model used."""

from __future__ import annotations

from attnlab.cli import main
from attnlab.explain import load, run, verify
from attnlab.explain.verify import EXACT, WRONG, decimals


def test_a_float_has_the_decimals_of_its_shortest_repr():
    assert [decimals(x) for x in (0.8242, 0.5, 2.0, 0.1 + 0.2, 3)] == [4, 1, 1, 17, 0]


def test_a_float_claim_off_in_its_last_decimal_is_wrong():
    ex = load("tutorial1-additive")
    true = [float(w) for w in run(ex)["weights"].value.reshape(-1)]
    ok = [round(w, 4) for w in true]
    off = [ok[0] + 0.0004, *ok[1:]]  # the 4th decimal off by 4: within ½ of the number, not of 10⁻⁴
    for claim, status in ((ok, EXACT), (off, WRONG)):
        ex.claims[:] = [{"step": "weights", "value": claim}]
        assert [v.status for v in verify(ex)] == [status]


def test_the_translators_bf16_step_claims_two_decimals(capsys):
    assert main(["explain", "--pretrained", "de-en", "--text", "Das Wasser ist kalt.", "--precision", "bf16"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if "weights = [" in x)
    assert line.startswith("  ✓ exact  weights = [0.12, 0.82, 0.02, 0.02, 0.01]"), line
