"""Each experiment's Markdown table on results written here by hand: the header names each column, one row per
model (or method, or length bucket) in the results' order, every number at its stated rounding (percent with one
decimal, losses with three, ranking measures with three, ± the 95 % half-width unless it is nan)."""

from __future__ import annotations

from attnlab.experiments import (
    alignment,
    bottleneck,
    distance,
    faithfulness,
    length,
    recommendation,
)

NAN = float("nan")


def test_alignment_table_gives_aer_in_percent_overall_and_per_bucket():
    res = {
        "buckets": [[3, 13], [14, 25]],
        "aer": {"diagonal": 0.7054, "bahdanau ≥0.3": 0.25},
        "aer_by_length": {"diagonal": [0.664, 0.7349], "bahdanau ≥0.3": [0.1234, 1.0]},
    }
    assert alignment.table(res) == (
        "| alignment | AER (all) | src 3–13 | src 14–25 |\n"
        "|---|---:|---:|---:|\n"
        "| diagonal | 70.5 | 66.4 | 73.5 |\n"
        "| bahdanau ≥0.3 | 25.0 | 12.3 | 100.0 |\n"
    )


def _bucket(n, exact, chrf):
    return {"n": n, "exact": exact, "chrf": chrf}


def test_bottleneck_table_one_row_per_bucket_and_an_overall_row():
    res = {
        "buckets": [[1, 9], [10, 15]],
        "models": {
            "none": {
                "by_length": [_bucket(82, 85.44, 98.66), _bucket(69, 88.4, 94.31)],
                "overall": _bucket(151, 86.75, 96.02),
            },
            "luong": {
                "by_length": [_bucket(82, 91.5, 99.2), _bucket(69, 98.55, 99.84)],
                "overall": _bucket(151, 94.7, 99.5),
            },
        },
    }
    assert bottleneck.table(res) == (
        "| source length | n | none exact / chrF | luong exact / chrF |\n"
        "|---|---|---|---|\n"
        "| 1–9 | 82 | 85.4 / 98.7 | 91.5 / 99.2 |\n"
        "| 10–15 | 69 | 88.4 / 94.3 | 98.5 / 99.8 |\n"
        "| all | 151 | 86.8 / 96.0 | 94.7 / 99.5 |\n"
    )


def test_distance_table_accuracy_with_its_interval_and_the_gradient_at_chosen_distances():
    # prefix 4 and k up to 8: sequences of 13 tokens, so the gradient columns are d = 1 and 4 (16 is too far)
    res = {
        "config": {"distances": [2, 8], "prefix": 4},
        "accuracy": {
            "gru": {"2": (1.0, 0.0), "8": (0.251, 0.0756)},
            "attention": {"2": (0.5, NAN), "8": (0.99, NAN)},
        },
        "gradient_norm": {
            "gru": {
                "init": [9.0, 0.0756, 2, 3, 1.4e-2] + [0.0] * 8,
                "trained": [9.0, 1e-12, 2, 3, 0.00012345] + [0.0] * 8,
            }
        },
    }
    assert distance.table(res) == (
        "| model | k = 2 | k = 8 |\n"
        "|---|---|---|\n"
        "| gru | 100.0 ± 0.0 | 25.1 ± 7.6 |\n"
        "| attention | 50.0 | 99.0 |\n"
        "\n"
        "| ‖∂ logit / ∂ x_{T−d}‖ | d = 1 | d = 4 |\n"
        "|---|---|---|\n"
        "| gru (init) | 7.56e-02 | 1.40e-02 |\n"
        "| gru (trained) | 1.00e-12 | 1.23e-04 |\n"
    )


def test_distance_table_reaches_the_distances_its_longest_sequence_holds():
    # prefix 4, k = 256: 261 tokens; d = 256 < 261 is a column, 1,024 is not
    curve = [float(i) for i in range(261)]
    res = {
        "config": {"distances": [256], "prefix": 4},
        "accuracy": {},
        "gradient_norm": {"lstm": {"init": curve}},
    }
    lines = distance.table(res).splitlines()
    assert lines[3] == "| ‖∂ logit / ∂ x_{T−d}‖ | d = 1 | d = 4 | d = 16 | d = 64 | d = 256 |"
    assert lines[5] == "| lstm (init) | 1.00e+00 | 4.00e+00 | 1.60e+01 | 6.40e+01 | 2.56e+02 |"
    # k = 251 and prefix 4: 256 tokens, d = 256 is one past the first token
    res["config"] = {"distances": [251], "prefix": 4}
    assert distance.table(res).splitlines()[3].endswith("| d = 64 |")


def _method(tvd, jsd, changed, acc, att, med):
    return {
        "out_tvd": tvd,
        "out_jsd": jsd,
        "changed": changed,
        "accuracy": acc,
        "att_jsd": att,
        "att_jsd_median": med,
    }


def test_faithfulness_table_a_learned_row_then_each_replacement():
    res = {
        "config": {"epsilon": 0.02, "data": "numbers-de-en"},
        "models": {
            "bahdanau": {
                "learned_accuracy": 99.84,
                "positions": 3852,
                "methods": {
                    "uniform": _method(0.38123, 0.21617, 36.04, 63.94, 0.3172, 0.2951),
                    "adversarial": _method(0.00724, 0.00118, 0.0, 99.84, 0.5061, 0.5678),
                },
            },
            "luong": {
                "learned_accuracy": 99.4,
                "positions": 3852,
                "methods": {"permuted": _method(0.64749, 0.39301, 62.1, 37.9, 0.671, 0.6931)},
            },
        },
    }
    assert faithfulness.table(res) == (
        "| decoder | weights | output TVD | output JSD | argmax changed % | next-token accuracy % "
        "| attention JSD from learned (mean / median) |\n"
        "|---|---|---:|---:|---:|---:|---:|\n"
        "| bahdanau | learned | 0 | 0 | 0 | 99.8 | 0 |\n"
        "| bahdanau | uniform | 0.3812 | 0.2162 | 36.0 | 63.9 | 0.317 / 0.295 |\n"
        "| bahdanau | adversarial (TVD ≤ 0.02) | 0.0072 | 0.0012 | 0.0 | 99.8 | 0.506 / 0.568 |\n"
        "| luong | learned | 0 | 0 | 0 | 99.4 | 0 |\n"
        "| luong | permuted | 0.6475 | 0.3930 | 62.1 | 37.9 | 0.671 / 0.693 |\n"
        "\n"
        "3852 target positions (teacher forcing on the reference), numbers-de-en test split; "
        "JSD in nats (≤ ln 2 ≈ 0.693).\n"
    )


def test_length_table_bleu_and_chrf_with_their_bootstrap_intervals():
    def row(n, b, bl, bh, c, cl, ch):
        return {
            "n": n,
            "bleu": b,
            "bleu_ci": [bl, bh],
            "chrf": c,
            "chrf_ci": [cl, ch],
        }

    res = {
        "buckets": [[4, 6], [7, 19]],
        "models": {
            "none": {
                "by_length": [
                    row(245, 3.14, 1.51, 4.61, 15.72, 14.7, 16.94),
                    row(259, 1.6, 0.8, 2.3, 15.6, 15.0, 16.4),
                ],
                "overall": {"n": 504, "bleu": 1.44, "chrf": 15.86},
            },
            "bahdanau": {
                "by_length": [
                    row(245, 1.9, 1.5, 2.3, 16.7, 15.4, 18.1),
                    row(259, 2.5, 1.5, 3.6, 18.7, 17.7, 19.9),
                ],
                "overall": {"n": 504, "bleu": 2.0, "chrf": 18.1},
            },
        },
    }
    assert length.table(res) == (
        "| source words | n | none BLEU [95 % CI] | none chrF [95 % CI] | bahdanau BLEU [95 % CI] "
        "| bahdanau chrF [95 % CI] |\n"
        "|---|---:|---:|---:|---:|---:|\n"
        "| 4–6 | 245 | 3.1 [1.5, 4.6] | 15.7 [14.7, 16.9] | 1.9 [1.5, 2.3] | 16.7 [15.4, 18.1] |\n"
        "| 7–19 | 259 | 1.6 [0.8, 2.3] | 15.6 [15.0, 16.4] | 2.5 [1.5, 3.6] | 18.7 [17.7, 19.9] |\n"
        "| all | 504 | 1.4 | 15.9 | 2.0 | 18.1 |\n"
    )


def test_recommendation_table_with_intervals_the_weight_on_the_cause_and_chance():
    res = {
        "config": {"k": 5},
        "metrics": {
            "mean": {"hr": (0.7984, 0.0241), "ndcg": (0.5012, NAN)},
            "din": {
                "hr": (0.9371, 0.0042),
                "ndcg": (0.6951, 0.0013),
                "weight_on_source": (0.5144, 0.0601),
            },
            "sasrec": {"hr": (0.9, NAN), "ndcg": (0.85, NAN), "weight_on_source": (0.3414, NAN)},
        },
        "chance_hr": 5 / 101,
        "chance_weight_on_source": 0.03214,
    }
    assert recommendation.table(res) == (
        "| model | hit rate@5 | NDCG@5 | weight on the cause |\n"
        "|---|---|---|---|\n"
        "| mean | 0.798 ± 0.024 | 0.501 | – |\n"
        "| din | 0.937 ± 0.004 | 0.695 ± 0.001 | 0.514 ± 0.060 |\n"
        "| sasrec | 0.900 | 0.850 | 0.341 |\n"
        "| chance | 0.050 | | 0.032 |\n"
    )
