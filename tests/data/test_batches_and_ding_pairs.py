"""Batches (padding, masks, BOS/EOS, bucketed order) and the Ding reader (cleaning, word limits, splits)."""

import pytest
import torch

from attnlab.data.batching import (
    Batch,
    batch_order,
    batches_in_order,
    collate,
    encode_pairs,
    pad,
    source_batch,
)
from attnlab.data.ding import ding_splits, load_pairs, load_phrases
from attnlab.data.vocab import Vocab


def test_pad_and_source_mask():
    assert pad([[5, 6, 7], [8]]).tolist() == [[5, 6, 7], [8, 0, 0]]
    assert pad([[5], []], value=9).tolist() == [[5], [9]]
    assert pad([]).shape == (0, 0)
    src, mask = source_batch([[4, 5], [6]])
    assert src.dtype == torch.long and src.tolist() == [[4, 5], [6, 0]]
    assert mask.dtype == torch.bool and mask.tolist() == [[True, True], [True, False]]


def test_collate_puts_bos_before_and_eos_after_the_target():
    b = collate([([4, 5], [7]), ([6], [8, 9])])
    assert b.src.tolist() == [[4, 5], [6, 0]]
    assert b.tgt_in.tolist() == [[1, 7, 0], [1, 8, 9]]
    assert b.tgt_out.tolist() == [[7, 2, 0], [8, 9, 2]]
    assert b.n_tokens == 5
    one = collate([([4], [7])])  # a batch of one
    assert one.src.tolist() == [[4]] and one.src_mask.tolist() == [[True]]
    assert (
        one.tgt_in.tolist() == [[1, 7]] and one.tgt_out.tolist() == [[7, 2]] and one.n_tokens == 2
    )
    moved = b.to("cpu")
    assert isinstance(moved, Batch) and moved.tgt_out.tolist() == b.tgt_out.tolist()
    assert (
        moved.src_mask.tolist() == b.src_mask.tolist()
        and moved.tgt_in.tolist() == b.tgt_in.tolist()
    )


def test_encode_pairs_drops_empty_sides_and_reads_unknowns():
    sv, tv = Vocab(["a"], "word"), Vocab(["x"], "word")
    assert encode_pairs([("a q", "x"), ("", "x"), ("a", ""), ("a", "x")], sv, tv) == [
        ([4, 3], [4]),
        ([4], [4]),
    ]


def test_batch_order_covers_every_example_once_and_sorts_within_buckets():
    ex = [([0] * (i % 5 + 1), [0]) for i in range(23)]
    order = batch_order(ex, 4, seed=1, epoch=0)
    flat = sorted(i for b in order for i in b)
    assert flat == list(range(23))
    assert sorted(len(b) for b in order) == [3, 4, 4, 4, 4, 4]
    for b in order:  # one bucket (4 * 20 > 23): every batch is a run of the length-sorted order
        lengths = [len(ex[i][0]) for i in b]
        assert lengths == sorted(lengths)
    assert batch_order(ex, 4, seed=1, epoch=0) == order
    assert batch_order(ex, 4, seed=1, epoch=1) != order
    assert batch_order(ex, 1, seed=1, epoch=0, bucket=1) != [[i] for i in range(23)]
    assert sorted(len(b) for b in batch_order(ex, 1, seed=0, epoch=0)) == [1] * 23


def test_batch_order_buckets_are_batch_size_times_bucket():
    ex = [([0] * (i + 1), [0]) for i in range(8)]
    # bucket=1: each chunk is one batch of 2, sorted inside; with bucket=4 all 8 are sorted together
    whole = batch_order(ex, 2, seed=3, epoch=0, bucket=4)
    assert sorted(map(tuple, whole)) == [(0, 1), (2, 3), (4, 5), (6, 7)]


def test_batch_order_refuses_batch_size_zero():
    with pytest.raises(ValueError) as e:
        batch_order([([1], [1])], 0, seed=0, epoch=0)
    assert str(e.value) == "batch_size must be >= 1; got 0"


def test_batches_in_order_sort_by_source_length():
    ex = [([1, 1, 1], [1]), ([1], [1]), ([1, 1], [1])]
    assert batches_in_order(ex, 2) == [[1, 2], [0]]
    assert batches_in_order(ex, 1) == [[1], [2], [0]]


DING = """# comment :: line
Der Hund {m} bellt laut. | Hund {m} :: The dog barks loudly. | dog
Er kommt (bald) nach Hause; Er kommt heim. :: He comes home ; He returns. [coll.]
Das ist gut . :: That is good .
Nur eine Seite | zwei :: only one side
keine Trennung hier
Eins zwei drei vier fünf. :: One two three four five.
Eins zwei drei vier fünf sechs. :: One two three four five six.
Zwei Worte. :: Two words.
Der Hund {m} bellt laut. :: A dog barks.
ja nein ja nein ja :: yes no yes no yes
ganz schnell :: very fast
ganz schnell :: very fast
"""


@pytest.fixture
def ding_file(tmp_path):
    p = tmp_path / "de-en"
    p.write_text(DING, encoding="utf-8")
    return p


def test_load_pairs_cleans_and_keeps_min_to_max_words_inclusive(ding_file):
    pairs = load_pairs(ding_file, min_words=3, max_words=5)
    assert pairs == [
        ("Der Hund bellt laut.", "The dog barks loudly."),
        ("Das ist gut.", "That is good."),
        ("Eins zwei drei vier fünf.", "One two three four five."),
    ]


def test_load_pairs_defaults_are_3_to_15_words(ding_file):
    got = load_pairs(ding_file)
    assert ("Eins zwei drei vier fünf sechs.", "One two three four five six.") in got
    assert ("Zwei Worte.", "Two words.") not in got
    assert load_pairs(ding_file, min_words=2, max_words=2) == [("Zwei Worte.", "Two words.")]


def test_load_pairs_refusals(tmp_path, ding_file):
    with pytest.raises(FileNotFoundError) as e:
        load_pairs(tmp_path / "none")
    assert str(e.value) == (
        f"no Ding dictionary at {tmp_path / 'none'}; install the Debian package trans-de-en "
        "(apt-get install trans-de-en) or pass the path of a file in its format"
    )
    with pytest.raises(ValueError) as e:
        load_pairs(ding_file, min_words=40, max_words=50)
    assert str(e.value) == (
        f"{ding_file} holds no sentence pairs in the Ding format "
        "(German :: English, senses split by ' | ')"
    )


def test_load_phrases_keeps_non_sentences_up_to_max_words(ding_file):
    got = load_phrases(ding_file)
    assert got == [
        ("Hund", "dog"),
        ("Er kommt nach Hause", "He comes home"),
        ("ganz schnell", "very fast"),
    ]
    assert load_phrases(ding_file, max_words=3) == [("Hund", "dog"), ("ganz schnell", "very fast")]
    assert ("ja nein ja nein ja", "yes no yes no yes") in load_phrases(ding_file, max_words=5)


def test_ding_splits_sizes_reverse_and_phrases(ding_file):
    pairs = load_pairs(ding_file)
    sp = ding_splits(ding_file, seed=0)
    assert len(sp.valid) == 1 and len(sp.test) == 1 and len(sp.train) == len(pairs) - 2
    assert sorted(sp.train + sp.valid + sp.test) == sorted(pairs)
    rev = ding_splits(ding_file, seed=0, reverse=True)
    assert sorted(rev.train + rev.valid + rev.test) == sorted((e, d) for d, e in pairs)
    big = ding_splits(ding_file, seed=0, valid_frac=0.5, test_frac=0.25)
    assert (len(big.valid), len(big.test)) == (len(pairs) // 2, len(pairs) // 4)
    ph = ding_splits(ding_file, seed=0, phrases=True)
    assert ph.valid == sp.valid and ph.test == sp.test
    extra = set(ph.train) - set(sp.train)
    dog_in_train = ("Der Hund bellt laut.", "The dog barks loudly.") in sp.train
    assert extra == ({("Hund", "dog")} if dog_in_train else set())
    for seed in range(6):  # "Hund"/"dog" joins the training split exactly when its words are there
        a, b = ding_splits(ding_file, seed=seed), ding_splits(ding_file, seed=seed, phrases=True)
        has = ("Der Hund bellt laut.", "The dog barks loudly.") in a.train
        assert (("Hund", "dog") in b.train) == has and len(b.train) == len(a.train) + has
        r = ding_splits(ding_file, seed=seed, phrases=True, reverse=True)
        assert (("dog", "Hund") in r.train) == has


def test_batch_order_follows_its_stated_rule_on_a_small_case():
    """The rule written out: shuffle the indices with Random(seed · 1_000_003 + epoch), cut them into chunks
    of batch_size · bucket, sort each chunk by (source, target) length, cut it into batches, shuffle those."""
    import random

    ex = [([0] * n, [0] * (7 - n)) for n in (3, 1, 4, 1, 5, 2, 6, 3, 2)]
    for bs, bucket, seed, epoch in ((2, 1, 0, 0), (2, 2, 4, 1), (3, 1, 7, 2), (1, 3, 1, 0)):
        rng = random.Random(seed * 1_000_003 + epoch)
        idx = list(range(len(ex)))
        rng.shuffle(idx)
        want = []
        for i in range(0, len(idx), bs * bucket):
            part = sorted(idx[i : i + bs * bucket], key=lambda j: (len(ex[j][0]), len(ex[j][1])))
            want += [part[j : j + bs] for j in range(0, len(part), bs)]
        rng.shuffle(want)
        assert batch_order(ex, bs, seed=seed, epoch=epoch, bucket=bucket) == want
    many = [([0] * (i % 7 + 1), [0]) for i in range(45)]  # more than one default chunk of 2 · 20
    assert batch_order(many, 2, seed=0, epoch=0) == batch_order(many, 2, seed=0, epoch=0, bucket=20)
    assert batch_order(many, 2, seed=0, epoch=0) != batch_order(many, 2, seed=0, epoch=0, bucket=21)
