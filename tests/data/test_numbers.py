"""The numbers corpus, the Ding loader (on a fixture, and on the real file when installed), vocabularies, batches."""

import re
from pathlib import Path

import pytest
import torch

from attnlab.data import Vocab, build_corpus, collate, load_dataset
from attnlab.data.batching import batch_order
from attnlab.data.ding import DEFAULT_PATH, ding_splits, load_pairs, load_phrases
from attnlab.data.numbers import number_pairs, sample_numbers, spell
from attnlab.data.vocab import tokenize


def test_spelling_examples():
    assert spell(21, "de") == "einundzwanzig"  # units before tens: the alignment is not diagonal
    assert spell(402, "de") == "vierhundertzwei"
    assert spell(402, "en") == "four hundred and two"
    assert spell(21, "zh") == "二十一"
    assert spell(402, "digits") == "402"


def test_splits_never_share_a_number_and_lengths_spread():
    nums = sample_numbers(3000, seed=5)
    assert len(set(nums)) == 3000
    assert max(nums) >= 10**12 and min(nums) < 100
    sp = number_pairs("en", "digits", 3000, seed=5)
    sets = [{int(t) for _, t in part} for part in (sp.train, sp.valid, sp.test)]
    assert not (sets[0] & sets[1]) and not (sets[0] & sets[2]) and not (sets[1] & sets[2])
    assert sum(map(len, sets)) == 3000
    lengths = [len(tokenize(s, "word")) for s, _ in sp.train]
    assert min(lengths) <= 2 and max(lengths) >= 30
    assert number_pairs("en", "digits", 3000, seed=5) == sp  # fixed seed, same corpus


def test_dataset_names_and_errors():
    ds = load_dataset("numbers-de-en", n=200)
    assert (ds.src_level, ds.tgt_level) == ("char", "word")
    for bad in ("numbers-xx-en", "numbers-en-en", "wmt14"):
        with pytest.raises(ValueError, match="dataset"):
            load_dataset(bad)


def test_vocab_roundtrip_and_unknown_tokens():
    v = Vocab.build(["vierhundertzwei", "einundzwanzig"], "char")
    ids = v.encode("zwei")
    assert v.decode(ids) == "zwei"
    assert Vocab.from_json(v.to_json()).itos == v.itos
    with pytest.raises(ValueError, match="'X'"):
        v.encode("zwXi", strict=True)
    w = Vocab.build(["It's four."], "word")
    assert w.tokens(w.encode("It's four.")) == ["It", "'", "s", "four", "."]
    assert w.decode(w.encode("It's four.")) == "It's four."
    with pytest.raises(ValueError, match="vocabulary"):
        Vocab.from_json('{"level": "char"}')


def test_batches_masks_and_determinism():
    c = build_corpus(load_dataset("numbers-en-de", n=300))
    b = collate(c.train[:5])
    lengths = torch.tensor([len(s) for s, _ in c.train[:5]])
    assert torch.equal(b.src_mask.sum(1), lengths)
    assert torch.all(b.src[~b.src_mask] == 0)
    assert torch.all(b.tgt_in[:, 0] == 1)  # BOS
    for i, (_, t) in enumerate(c.train[:5]):
        assert b.tgt_in[i, 1 : len(t) + 1].tolist() == t and b.tgt_out[i, : len(t) + 1].tolist() == [*t, 2]
    o1 = batch_order(c.train, 16, seed=3, epoch=2)
    assert o1 == batch_order(c.train, 16, seed=3, epoch=2) and o1 != batch_order(c.train, 16, seed=3, epoch=1)
    assert sorted(i for bt in o1 for i in bt) == list(range(len(c.train)))
    ones = batch_order(c.train[:7], 1, seed=0, epoch=0)  # the smallest batch is one example
    assert sorted(ones) == [[i] for i in range(7)]
    with pytest.raises(ValueError, match="batch_size must be >= 1; got 0"):
        batch_order(c.train, 0, seed=0, epoch=0)


FIXTURE = """# Version :: test
Haus {n} | Das Haus ist sehr alt. | Häuser {pl} :: house | The house is very old. | houses
Er kommt morgen zurück. [ugs.] :: He will be back tomorrow. [coll.]
Wir gehen (heute) nach Hause. | Zu kurz. :: We are going home (today). | Too short.
Das ist eins; Das ist zwei. :: That is one; That is two.
Ungleich | Ein Satz hier. :: uneven
morgen {adv} :: tomorrow
"""


def test_ding_loader_on_a_fixture(tmp_path):
    f = tmp_path / "de-en"
    f.write_text(FIXTURE, encoding="utf-8")
    pairs = load_pairs(f)
    assert pairs == [
        ("Das Haus ist sehr alt.", "The house is very old."),
        ("Er kommt morgen zurück.", "He will be back tomorrow."),
        ("Wir gehen nach Hause.", "We are going home."),
    ]
    with pytest.raises(FileNotFoundError, match="trans-de-en"):
        load_pairs(tmp_path / "missing")
    (tmp_path / "empty").write_text("# nothing\n", encoding="utf-8")
    with pytest.raises(ValueError, match="no sentence pairs"):
        load_pairs(tmp_path / "empty")
    # the two directions are the same pairs, swapped: German → English and English → German
    de_en, en_de = load_dataset("ding-de-en", path=str(f)), load_dataset("ding-en-de", path=str(f))
    assert de_en.splits.train + de_en.splits.valid + de_en.splits.test
    for split in ("train", "valid", "test"):
        got, want = getattr(en_de.splits, split), getattr(de_en.splits, split)
        assert got == [(t, s) for s, t in want]
    assert de_en.src_level == en_de.tgt_level == "word"


def test_ding_phrases_on_a_fixture_join_training_only(tmp_path):
    f = tmp_path / "de-en"
    f.write_text(FIXTURE, encoding="utf-8")
    assert load_phrases(f) == [("Haus", "house"), ("Häuser", "houses"), ("Das ist eins", "That is one"),
                               ("morgen", "tomorrow")]
    # max_words bounds both sides, inclusive: "Das ist eins" / "That is one" has 3 words a side
    assert ("Das ist eins", "That is one") in load_phrases(f, max_words=3)
    assert load_phrases(f, max_words=2) == [("Haus", "house"), ("Häuser", "houses"), ("morgen", "tomorrow")]
    plain, joined = ding_splits(f, valid_frac=0.34, test_frac=0.34), ding_splits(f, valid_frac=0.34, test_frac=0.34,
                                                                                  phrases=True)
    assert (joined.valid, joined.test) == (plain.valid, plain.test)  # the held-out sentences do not move
    words = {w for s, _ in plain.train for w in re.findall(r"\w+", s)}
    added = sorted(set(joined.train) - set(plain.train))
    assert set(plain.train) <= set(joined.train)
    assert plain.train == [("Er kommt morgen zurück.", "He will be back tomorrow.")]
    assert added == [("morgen", "tomorrow")]  # Haus, Häuser and "Das ist eins" have words training never saw
    assert added == sorted(p for p in load_phrases(f) if set(re.findall(r"\w+", p[0])) <= words
                           and set(re.findall(r"\w+", p[1])) <= {w for _, t in plain.train for w in re.findall(r"\w+", t)})


@pytest.mark.skipif(not Path(DEFAULT_PATH).is_file(), reason="the Ding dictionary is absent: apt-get install trans-de-en")
def test_real_ding_corpus():
    pairs = load_pairs()
    assert 15000 <= len(pairs) <= 30000
    for de, en in pairs[::997]:
        assert 3 <= len(de.split()) <= 15 and 3 <= len(en.split()) <= 15
        assert not re.search(r"[{}\[\]<>]", de + en)
    ds = load_dataset("ding-de-en")
    assert ds.src_level == "word" and len(ds.splits.test) > 500


def test_sample_numbers_can_draw_every_number_of_the_digit_range_and_no_more():
    """Three-digit numbers: 100..999, 900 of them. All 900 can be drawn; asking for 901 is refused at once
    (a too-large capacity would search forever for a number that does not exist, so the call is timed)."""
    import signal

    def too_slow(*_):
        raise TimeoutError("sample_numbers searched for a number that it cannot draw")

    old = signal.signal(signal.SIGALRM, too_slow)
    signal.setitimer(signal.ITIMER_REAL, 4.0)
    try:
        assert sorted(sample_numbers(900, seed=3, min_digits=3, max_digits=3)) == list(range(100, 1000))
        assert sorted(sample_numbers(10, seed=3, max_digits=1)) == list(range(10))  # one digit: 0..9
        with pytest.raises(ValueError, match="cannot draw 901 distinct numbers with at most 3 digits"):
            sample_numbers(901, seed=3, min_digits=3, max_digits=3)
        with pytest.raises(ValueError, match="cannot draw 91 distinct numbers with at most 2 digits"):
            sample_numbers(91, min_digits=2, max_digits=2)  # 10..99
        with pytest.raises(ValueError, match="cannot draw 11 distinct numbers with at most 1 digits"):
            sample_numbers(11, max_digits=1)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def test_vocab_tokens_read_lists_arrays_tensors_and_any_array_like():
    import numpy as np

    w = Vocab(["a", "b", "c"], "word")  # ids: 0 pad, 1 bos, 2 eos, 3 unk, 4 a, 5 b, 6 c
    ids = [1, 4, 0, 6, 99, 5, 2, 4]  # bos skipped, pad skipped, 99 unknown, stop at eos
    want = ["a", "c", "<unk>", "b"]

    class ArrayLike:  # an array type that converts with tolist() but is not iterable itself
        def tolist(self):
            return list(ids)

    for given in (ids, np.array(ids), torch.tensor(ids), ArrayLike()):
        assert w.tokens(given) == want, type(given)
    assert w.decode(ArrayLike()) == "a c <unk> b"


def test_ding_phrases_follow_the_direction_when_reversed(tmp_path):
    """en → de: the sentences and the added dictionary phrases are both (English, German)."""
    f = tmp_path / "de-en"
    f.write_text(FIXTURE, encoding="utf-8")
    kw = dict(valid_frac=0.34, test_frac=0.34, reverse=True)
    plain, joined = ding_splits(f, **kw), ding_splits(f, **kw, phrases=True)
    assert plain.train == [("He will be back tomorrow.", "Er kommt morgen zurück.")]
    assert (joined.valid, joined.test) == (plain.valid, plain.test)
    assert sorted(joined.train) == [("He will be back tomorrow.", "Er kommt morgen zurück."), ("tomorrow", "morgen")]
