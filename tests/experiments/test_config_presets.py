"""Every experiment's configuration, field by field: the defaults are the sizes that
``benchmarks/RESULTS.md`` reports for the full runs, ``quick()`` the seconds-long smoke sizes (only
the named fields shrink, the rest keep their defaults, and keyword arguments override both),
``VisionConfig.full()`` the larger run that RESULTS describes; and the checks each config makes, with
their messages."""

from __future__ import annotations

from dataclasses import asdict

import pytest

from attnlab.data.interactions import InteractionConfig
from attnlab.experiments.alignment import DECODERS as ALIGNMENT_DECODERS
from attnlab.experiments.alignment import AlignmentConfig
from attnlab.experiments.bottleneck import DECODERS, MODEL_NAMES, BottleneckConfig
from attnlab.experiments.distance import MODELS as DISTANCE_MODELS
from attnlab.experiments.distance import DistanceConfig
from attnlab.experiments.faithfulness import METHODS as FAITHFULNESS_METHODS
from attnlab.experiments.faithfulness import FaithfulnessConfig
from attnlab.experiments.length import LengthConfig
from attnlab.experiments.recommendation import MODELS as RECOMMENDATION_MODELS
from attnlab.experiments.recommendation import RecommendationConfig
from attnlab.experiments.rope_scaling import METHODS as ROPE_METHODS
from attnlab.experiments.rope_scaling import RopeScalingConfig
from attnlab.experiments.vision import DATASETS, VARIANTS, VisionConfig

# -- the names each experiment compares --------------------------------------------------------------


def test_the_model_and_method_names():
    assert ALIGNMENT_DECODERS == ("bahdanau", "luong")
    assert DECODERS == ("none", "bahdanau", "luong")
    assert MODEL_NAMES == ("none", "bahdanau", "luong", "transformer")
    assert DISTANCE_MODELS == ("gru", "lstm", "attention")
    assert FAITHFULNESS_METHODS == ("uniform", "permuted", "random", "adversarial")
    assert RECOMMENDATION_MODELS == ("mean", "gru", "din", "sasrec")
    assert ROPE_METHODS == (
        "rope",
        "linear",
        "ntk",
        "dynamic",
        "yarn",
        "llama3",
        "longrope",
        "alibi",
    )
    assert VARIANTS == ("none", "se", "eca", "cbam")
    assert list(DATASETS) == ["mnist5k", "fashion"]


# -- alignment: ≤ 25 source and ≤ 30 target words, 400 held-out verses, emb 64 / hidden 128 / attention 128,
#    2,000 steps of batch 32 at lr 3e-3, words seen once are <unk>, threshold 0.3, IBM 1 with 5 EM rounds

ALIGNMENT = dict(
    max_src=25,
    max_tgt=30,
    max_verses=None,
    test_size=400,
    source_form="lemma",
    min_count=2,
    steps=2000,
    batch_size=32,
    lr=3e-3,
    emb_dim=64,
    hidden=128,
    attn_dim=128,
    threshold=0.3,
    ibm_iterations=5,
    buckets=3,
    decoders=("bahdanau", "luong"),
    seed=0,
)


def test_alignment_defaults_and_quick():
    assert asdict(AlignmentConfig()) == ALIGNMENT
    quick = dict(
        max_verses=400,
        test_size=40,
        steps=20,
        batch_size=16,
        emb_dim=16,
        hidden=24,
        attn_dim=24,
        ibm_iterations=2,
    )
    assert asdict(AlignmentConfig.quick()) == {**ALIGNMENT, **quick}
    assert asdict(AlignmentConfig.quick(steps=3, seed=7)) == {
        **ALIGNMENT,
        **quick,
        "steps": 3,
        "seed": 7,
    }


# -- bottleneck: numbers-en-zh, RNNs emb 48 / hidden 96, lr 3e-3; Transformer 2 + 2 layers, 4 heads, dim 96,
#    ff 192, no dropout, lr 2e-3

BOTTLENECK = dict(
    data="numbers-en-zh",
    n=12000,
    max_digits=12,
    steps=600,
    batch_size=64,
    lr=3e-3,
    emb_dim=48,
    hidden=96,
    attn_dim=96,
    buckets=4,
    test_size=400,
    seed=0,
    decoders=("none", "bahdanau", "luong"),
    tf_dim=96,
    tf_heads=4,
    tf_layers=2,
    tf_ff=192,
    tf_dropout=0.0,
    tf_lr=2e-3,
)


def test_bottleneck_defaults_and_quick():
    assert asdict(BottleneckConfig()) == BOTTLENECK
    quick = dict(
        n=600,
        max_digits=6,
        steps=30,
        batch_size=32,
        emb_dim=16,
        hidden=24,
        attn_dim=24,
        buckets=3,
        test_size=40,
        tf_dim=24,
        tf_heads=2,
        tf_layers=1,
        tf_ff=48,
    )
    assert asdict(BottleneckConfig.quick()) == {**BOTTLENECK, **quick}
    assert asdict(BottleneckConfig.quick(n=50, decoders=["luong"])) == {
        **BOTTLENECK,
        **quick,
        "n": 50,
        "decoders": ("luong",),
    }


@pytest.mark.parametrize("decoders, names", [((), "none"), (("none", "rnn"), "none, rnn")])
def test_bottleneck_refuses_unknown_or_no_models(decoders, names):
    with pytest.raises(ValueError) as e:
        BottleneckConfig(decoders=decoders)
    assert (
        str(e.value)
        == f"models must be a non-empty selection of none, bahdanau, luong, transformer; got {names}"
    )


def test_bottleneck_takes_every_model_name_as_a_tuple():
    assert BottleneckConfig(decoders=["transformer", "none"]).decoders == ("transformer", "none")


# -- distance: k = 4, 16, 64, 256; 3 seeds; 300 steps of batch 32, lr 3e-3; 64 units; 4 classes, 16 distractors,
#    4 before the cue; 512 test sequences

DISTANCE = dict(
    distances=(4, 16, 64, 256),
    models=("gru", "lstm", "attention"),
    seeds=3,
    steps=300,
    batch_size=32,
    lr=3e-3,
    hidden=64,
    classes=4,
    distractors=16,
    prefix=4,
    test_size=512,
)


def test_distance_defaults_and_quick():
    assert asdict(DistanceConfig()) == DISTANCE
    assert asdict(DistanceConfig.quick()) == {
        **DISTANCE,
        "distances": (2, 8),
        "seeds": 2,
        "steps": 20,
        "batch_size": 16,
        "hidden": 16,
        "test_size": 64,
    }


# -- faithfulness: numbers-de-en, 6,000 numbers up to 9 digits; emb 32, hidden 64, attention 64; 350 steps of batch 64,
#    lr 3e-3; 300 test sentences; ε = 0.01, 40 Adam steps at lr 0.3, penalty 10

FAITHFULNESS = dict(
    data="numbers-de-en",
    n=6000,
    max_digits=9,
    decoders=("bahdanau", "luong"),
    steps=350,
    batch_size=64,
    lr=3e-3,
    emb_dim=32,
    hidden=64,
    attn_dim=64,
    test_size=300,
    epsilon=0.01,
    adv_steps=40,
    adv_lr=0.3,
    adv_penalty=10.0,
    seed=0,
)


def test_faithfulness_defaults_and_quick():
    assert asdict(FaithfulnessConfig()) == FAITHFULNESS
    quick = dict(
        n=600,
        max_digits=4,
        steps=20,
        batch_size=32,
        emb_dim=16,
        hidden=24,
        attn_dim=24,
        test_size=24,
        adv_steps=4,
    )
    assert asdict(FaithfulnessConfig.quick()) == {**FAITHFULNESS, **quick}
    assert asdict(FaithfulnessConfig.quick(epsilon=0.5)) == {
        **FAITHFULNESS,
        **quick,
        "epsilon": 0.5,
    }
    assert FaithfulnessConfig(decoders=["luong"]).decoders == ("luong",)


@pytest.mark.parametrize(
    "kw, message",
    [
        (dict(decoders=()), "decoders must be a non-empty selection of bahdanau, luong; got none"),
        (
            dict(decoders=("luong", "none")),
            "decoders must be a non-empty selection of bahdanau, luong; got luong, none",
        ),
        (dict(epsilon=0.0), "epsilon must be in (0, 1); got 0.0"),
        (dict(epsilon=1.0), "epsilon must be in (0, 1); got 1.0"),
        (dict(steps=0), "steps must be >= 1; got 0"),
        (dict(batch_size=0), "batch_size must be >= 1; got 0"),
        (dict(test_size=0), "test_size must be >= 1; got 0"),
        (dict(adv_steps=0), "adv_steps must be >= 1; got 0"),
    ],
)
def test_faithfulness_config_checks(kw, message):
    with pytest.raises(ValueError) as e:
        FaithfulnessConfig(**kw)
    assert str(e.value) == message


def test_faithfulness_accepts_the_smallest_sizes():
    cfg = FaithfulnessConfig(steps=1, batch_size=1, test_size=1, adv_steps=1, epsilon=0.999)
    assert (cfg.steps, cfg.batch_size, cfg.test_size, cfg.adv_steps) == (1, 1, 1, 1)


# -- length: ding-de-en, emb 64 / hidden 128 / attention 128, 1,500 steps of batch 64 at lr 3e-3, 4 buckets, the 939
#    test pairs, 200 bootstrap resamples

LENGTH = dict(
    data="ding-de-en",
    steps=1500,
    batch_size=64,
    lr=3e-3,
    emb_dim=64,
    hidden=128,
    attn_dim=128,
    buckets=4,
    test_size=939,
    resamples=200,
    decoders=("none", "bahdanau", "luong"),
    seed=0,
)


def test_length_defaults_and_quick():
    assert asdict(LengthConfig()) == LENGTH
    quick = dict(
        steps=15,
        batch_size=16,
        emb_dim=16,
        hidden=24,
        attn_dim=24,
        buckets=2,
        test_size=40,
        resamples=20,
    )
    assert asdict(LengthConfig.quick()) == {**LENGTH, **quick}
    assert asdict(LengthConfig.quick(resamples=3)) == {**LENGTH, **quick, "resamples": 3}


# -- recommendation: 3 seeds of 2,000 steps; the held-out item among 100 unseen ones; hit rate and NDCG at 10

RECOMMENDATION = dict(
    models=("mean", "gru", "din", "sasrec"),
    seeds=3,
    steps=2000,
    batch_size=128,
    lr=1e-2,
    dim=32,
    window=50,
    train_negatives=20,
    eval_negatives=100,
    k=10,
)


def test_recommendation_defaults_and_quick():
    cfg = RecommendationConfig()
    assert asdict(cfg) == {**RECOMMENDATION, "data": asdict(InteractionConfig())}
    quick = RecommendationConfig.quick()
    assert asdict(quick) == {
        **RECOMMENDATION,
        "seeds": 2,
        "steps": 800,
        "batch_size": 64,
        "dim": 16,
        "window": 20,
        "train_negatives": 10,
        "data": asdict(InteractionConfig(num_users=500, min_len=12, max_len=24)),
    }
    assert cfg.data is not RecommendationConfig().data  # each config its own data settings


# -- rope scaling: L = 128, n = 128 … 1,024, s = 8; 500 steps of batch 32; 4 layers, dim 128, 4 heads; 8 plays;
#    16,384 tokens per length

ROPE = dict(
    block_size=128,
    lengths=(128, 256, 512, 1024),
    factor=8.0,
    steps=500,
    batch_size=32,
    dim=128,
    num_layers=4,
    num_heads=4,
    lr=3e-3,
    plays=8,
    eval_tokens=16384,
    eval_batch=8,
    methods=ROPE_METHODS,
    seed=0,
)


def test_rope_scaling_defaults_and_quick():
    assert asdict(RopeScalingConfig()) == ROPE
    quick = dict(
        block_size=16,
        lengths=(16, 32, 64),
        factor=4.0,
        steps=8,
        batch_size=8,
        dim=32,
        num_layers=1,
        num_heads=2,
        plays=1,
        eval_tokens=512,
        eval_batch=8,
    )
    assert asdict(RopeScalingConfig.quick()) == {**ROPE, **quick}
    assert asdict(RopeScalingConfig.quick(methods=("rope",), steps=2)) == {
        **ROPE,
        **quick,
        "methods": ("rope",),
        "steps": 2,
    }


@pytest.mark.parametrize(
    "kw, message",
    [
        (
            dict(methods=()),
            "methods must be names from ('rope', 'linear', 'ntk', 'dynamic', 'yarn', 'llama3', 'longrope', "
            "'alibi'); got ()",
        ),
        (
            dict(methods=("rope", "xpos")),
            "methods must be names from ('rope', 'linear', 'ntk', 'dynamic', 'yarn', "
            "'llama3', 'longrope', 'alibi'); got ('rope', 'xpos')",
        ),
        (dict(lengths=()), "lengths must be >= 2 and factor >= 1; got (), 8.0"),
        (dict(lengths=(16, 1)), "lengths must be >= 2 and factor >= 1; got (16, 1), 8.0"),
        (dict(factor=0.5), "lengths must be >= 2 and factor >= 1; got (128, 256, 512, 1024), 0.5"),
    ],
)
def test_rope_scaling_config_checks(kw, message):
    with pytest.raises(ValueError) as e:
        RopeScalingConfig(**kw)
    assert str(e.value) == message


def test_rope_scaling_accepts_the_smallest_values():
    cfg = RopeScalingConfig(lengths=(2,), factor=1.0)
    assert (cfg.lengths, cfg.factor) == ((2,), 1.0)


# -- vision: mnist5k, 5 seeds, 1,000 and 2,500 canvases, 6 epochs of batch 64 at peak lr 0.01, 1,000 test canvases of
#    40 × 40 with 6 fragments, widths 16/32/48; --full: 10 seeds, 1,000 / 2,500 / 4,000 canvases, 10 epochs

VISION = dict(
    dataset="mnist5k",
    data_root=None,
    variants=("none", "se", "eca", "cbam"),
    seeds=(0, 1, 2, 3, 4),
    train_sizes=(1000, 2500),
    epochs=6,
    batch_size=64,
    lr=1e-2,
    n_test=1000,
    canvas=40,
    clutter=6,
    widths=(16, 32, 48),
    reduction=4,
    n_overlays=6,
    out_dir="runs/vision",
)


def test_vision_defaults_quick_and_full():
    assert asdict(VisionConfig()) == VISION
    assert asdict(VisionConfig.quick()) == {
        **VISION,
        "seeds": (0, 1),
        "train_sizes": (96,),
        "epochs": 1,
        "n_test": 64,
        "canvas": 36,
        "clutter": 3,
        "widths": (4, 8),
        "n_overlays": 2,
    }
    assert asdict(VisionConfig.quick(out_dir=None, epochs=2))["epochs"] == 2
    assert asdict(VisionConfig.full()) == {
        **VISION,
        "seeds": tuple(range(10)),
        "train_sizes": (1000, 2500, 4000),
        "epochs": 10,
    }
    assert asdict(VisionConfig.full(out_dir=None)) == {
        **VISION,
        "seeds": tuple(range(10)),
        "train_sizes": (1000, 2500, 4000),
        "epochs": 10,
        "out_dir": None,
    }


@pytest.mark.parametrize(
    "kw, message",
    [
        (dict(dataset="cifar"), "dataset must be one of mnist5k, fashion; got 'cifar'"),
        (dict(variants=()), "variants must be among none, se, eca, cbam; got none"),
        (dict(variants=("se", "gate")), "variants must be among none, se, eca, cbam; got se, gate"),
        (dict(seeds=()), "give at least one seed"),
        (dict(train_sizes=()), "train_sizes must be positive; got ()"),
        (dict(train_sizes=(10, 0)), "train_sizes must be positive; got (10, 0)"),
        (dict(canvas=27), "canvas must be >= 28 pixels; got 27"),
        (dict(widths=()), "widths must be positive channel counts; got ()"),
        (dict(widths=(4, 0)), "widths must be positive channel counts; got (4, 0)"),
    ],
)
def test_vision_config_checks(kw, message):
    with pytest.raises(ValueError) as e:
        VisionConfig(**kw, out_dir=None).validate()
    assert str(e.value) == message


def test_vision_accepts_the_smallest_values():
    VisionConfig(
        canvas=28,
        train_sizes=(1,),
        widths=(1,),
        epochs=1,
        batch_size=1,
        n_test=1,
        clutter=0,
        dataset="fashion",
        out_dir=None,
    ).validate()
