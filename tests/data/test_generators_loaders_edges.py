"""Loaders and generators at their edges: IDX headers, the 5k CSV, stratified splits, canvases,
interaction histories and the numbers corpus; every default and every refusal's text."""

import gzip
import struct

import numpy as np
import pytest

from attnlab.data import canvas, mnist
from attnlab.data import numbers as N
from attnlab.data.interactions import InteractionConfig, generate, successor


def _idx(dtype_code, shape, payload):
    return bytes([0, 0, dtype_code, len(shape)]) + struct.pack(f">{len(shape)}I", *shape) + payload


def test_load_idx_reads_big_endian_types_as_native(tmp_path):
    vals = np.array([[1, -2], [300, -400]], dtype=">i2")
    (tmp_path / "i2").write_bytes(_idx(0x0B, (2, 2), vals.tobytes()))
    got = mnist.load_idx(tmp_path / "i2")
    assert (
        got.tolist() == [[1, -2], [300, -400]]
        and got.dtype == np.dtype("int16")
        and got.dtype.isnative
    )
    f = np.array([1.5, -2.25, 3.0], dtype=">f4")
    (tmp_path / "f4").write_bytes(_idx(0x0D, (3,), f.tobytes()))
    assert mnist.load_idx(tmp_path / "f4").tolist() == [1.5, -2.25, 3.0]
    (tmp_path / "u8").write_bytes(_idx(0x08, (1, 3), bytes([7, 8, 255])))
    got = mnist.load_idx(tmp_path / "u8")
    assert got.dtype == np.uint8 and got.tolist() == [[7, 8, 255]]
    (tmp_path / "i1").write_bytes(_idx(0x09, (2,), bytes([255, 1])))
    assert mnist.load_idx(tmp_path / "i1").tolist() == [-1, 1]
    (tmp_path / "i4").write_bytes(_idx(0x0C, (1,), np.array([-70000], ">i4").tobytes()))
    assert mnist.load_idx(tmp_path / "i4").tolist() == [-70000]
    (tmp_path / "f8").write_bytes(_idx(0x0E, (1,), np.array([0.1], ">f8").tobytes()))
    assert mnist.load_idx(tmp_path / "f8").tolist() == [0.1]


@pytest.mark.parametrize(
    "head", [b"\x01\x00\x08\x01", b"\x00\x01\x08\x01", b"\x00\x00\x07\x01", b"\x00\x00\x0f\x01"]
)
def test_load_idx_refuses_a_bad_magic_number_with_its_bytes(tmp_path, head):
    p = tmp_path / "bad"
    p.write_bytes(head + bytes(4))
    with pytest.raises(ValueError) as e:
        mnist.load_idx(p)
    assert (
        str(e.value) == f"{p} is not an IDX file (bad magic number {(head + bytes(4))[:4].hex()})"
    )
    p.write_bytes(b"\x00\x00\x08")  # shorter than the magic number
    with pytest.raises(ValueError, match=r"bad magic number 000008\)$"):
        mnist.load_idx(p)


def test_load_idx_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError) as e:
        mnist.load_idx(tmp_path / "none")
    assert str(e.value) == f"no IDX file at {tmp_path / 'none'}"


def test_fashion_reads_plain_files_and_checks_the_counts(tmp_path):
    (tmp_path / "train-images-idx3-ubyte").write_bytes(_idx(0x08, (2, 28, 28), bytes(2 * 784)))
    (tmp_path / "train-labels-idx1-ubyte").write_bytes(_idx(0x08, (2,), bytes([3, 9])))
    x, y = mnist.load_fashion_mnist(tmp_path)  # part defaults to "train"
    assert x.shape == (2, 28, 28) and y.tolist() == [3, 9] and y.dtype == np.int64
    (tmp_path / "train-labels-idx1-ubyte").write_bytes(_idx(0x08, (3,), bytes([3, 9, 1])))
    with pytest.raises(ValueError) as e:
        mnist.load_fashion_mnist(tmp_path, "train")
    assert str(e.value) == f"{tmp_path}: (2, 28, 28) images do not fit (3,) labels"
    with pytest.raises(ValueError) as e:
        mnist.load_fashion_mnist(tmp_path, "valid")
    assert str(e.value) == "part must be 'train' or 'test'; got 'valid'"
    with pytest.raises(FileNotFoundError) as e:
        mnist.load_fashion_mnist(tmp_path, "test")
    assert str(e.value) == (
        f"no t10k-images-idx3-ubyte[.gz] under {tmp_path}; on Debian install the package "
        "dataset-fashion-mnist, or pass the folder that holds the Fashion-MNIST IDX files"
    )
    assert mnist.FASHION_CLASSES[0] == "T-shirt/top" and mnist.FASHION_CLASSES[9] == "Ankle boot"
    assert (
        len(mnist.FASHION_CLASSES) == 10
        and str(mnist.FASHION_ROOT) == "/usr/share/datasets/fashion-mnist"
    )


def test_load_mnist_5k_from_a_given_csv_clips_pixels(tmp_path):
    rows = [[0] * 783 + [300, 7], [-5] + [255] * 783 + [2]]
    text = "\n".join(",".join(map(str, r)) for r in rows) + "\n"
    (tmp_path / "a.csv").write_text(text)
    with gzip.open(tmp_path / "a.csv.gz", "wt") as fh:
        fh.write(text)
    for name in ("a.csv", "a.csv.gz"):
        x, y = mnist.load_mnist_5k(tmp_path / name)
        assert (
            x.shape == (2, 28, 28)
            and x.dtype == np.uint8
            and y.tolist() == [7, 2]
            and y.dtype == np.int64
        )
        assert x[0, 27, 27] == 255 and x[0].sum() == 255 and x[1, 0, 0] == 0 and x[1, 0, 1] == 255
    (tmp_path / "b.csv").write_text("1,2,3\n4,5,6\n")
    with pytest.raises(ValueError) as e:
        mnist.load_mnist_5k(tmp_path / "b.csv")
    assert (
        str(e.value)
        == f"{tmp_path / 'b.csv'}: expected 785 columns (784 pixels, then the label); got shape (2, 3)"
    )


def test_split_is_stratified_with_the_remainder_on_the_first_classes():
    labels = np.array([0] * 4 + [1] * 4 + [2] * 4)
    images = np.arange(12)
    (tr, trl), (te, tel) = mnist.split(images, labels, 5, seed=1)
    assert np.bincount(tel, minlength=3).tolist() == [
        2,
        2,
        1,
    ]  # 5 = 3·1 + 2: classes 0 and 1 get one more
    assert (
        te.tolist() == sorted(te.tolist())
        and (labels[te] == tel).all()
        and (labels[tr] == trl).all()
    )
    assert sorted(tr.tolist() + te.tolist()) == list(range(12))
    (_, _), (te1, _) = mnist.split(images, labels, 1)
    assert len(te1) == 1 and labels[te1[0]] == 0
    (_, _), (te11, tel11) = mnist.split(images, labels, 11)
    assert np.bincount(tel11).tolist() == [4, 4, 3]
    for bad in (0, 12):
        with pytest.raises(ValueError) as e:
            mnist.split(images, labels, bad)
        assert str(e.value) == f"n_test must be between 1 and 11; got {bad}"


def test_cluttered_defaults_and_the_smallest_canvas():
    items = np.zeros((2, 28, 28), np.uint8)
    items[1, 5, 6] = 9
    out, lab, boxes = canvas.cluttered(items, np.array([4, 8]), n=3)
    assert out.shape == (3, 48, 48) and out.dtype == np.uint8 and boxes.dtype == np.int64
    same = canvas.cluttered(items, np.array([4, 8]), n=3, size=48, clutter=8, fragment=9, seed=0)
    assert all(np.array_equal(a, b) for a, b in zip((out, lab, boxes), same))
    out, lab, boxes = canvas.cluttered(items, np.array([4, 8]), n=6, size=28, clutter=0, seed=0)
    for o, lb, b in zip(out, lab, boxes):  # a 28-pixel canvas holds the item at (0, 0)
        if lb == 8:
            assert b.tolist() == [5, 6, 6, 7] and o[5, 6] == 9 and o.sum() == 9
        else:  # an empty item: its box is its whole square
            assert b.tolist() == [0, 0, 28, 28] and o.sum() == 0
    with pytest.raises(ValueError) as e:
        canvas.cluttered(items, np.array([4, 8]), n=1, size=27)
    assert str(e.value) == "size must be >= 28 (an item is 28 × 28); got 27"


def test_mass_in_box_of_a_zero_map_is_zero_and_coarse_maps_widen_the_box():
    np.testing.assert_array_equal(
        canvas.mass_in_box(np.zeros((1, 2, 2)), np.array([[0, 0, 4, 4]]), 4), [0.0]
    )
    m = np.arange(16, dtype=float).reshape(1, 4, 4)
    # box rows 1..3, cols 3..5 of 8 → cells rows 0..1, cols 1..2 of 4
    np.testing.assert_allclose(
        canvas.mass_in_box(m, np.array([[1, 3, 3, 5]]), 8), [(1 + 2 + 5 + 6) / 120]
    )
    np.testing.assert_allclose(canvas.box_share(np.array([[0, 0, 8, 4]]), 8, 2), [0.5])


def test_interaction_config_defaults_and_messages():
    c = InteractionConfig()
    assert (
        c.num_users,
        c.num_items,
        c.num_clusters,
        c.min_len,
        c.max_len,
        c.lag,
        c.follow,
        c.max_interests,
    ) == (2000, 500, 10, 20, 50, 3, 0.8, 3)
    assert c.cluster_size == 50
    with pytest.raises(ValueError) as e:
        InteractionConfig(num_items=55)
    assert str(e.value) == "num_items must be a multiple of num_clusters; got 55 and 10"
    for kw in ({"lag": 0}, {"lag": 20}, {"min_len": 51}):
        with pytest.raises(ValueError) as e:
            InteractionConfig(**kw)
        k = {**dict(lag=3, min_len=20, max_len=50), **kw}
        assert (
            str(e.value)
            == f"need 1 ≤ lag < min_len ≤ max_len; got lag={k['lag']}, min_len={k['min_len']}, "
            f"max_len={k['max_len']}"
        )
    for f in (-0.1, 1.1):
        with pytest.raises(ValueError) as e:
            InteractionConfig(follow=f)
        assert str(e.value) == f"follow must be a probability in [0, 1]; got {f}"
    InteractionConfig(lag=1, min_len=2, max_len=2, follow=0.0)  # the edges are accepted
    InteractionConfig(follow=1.0)


def test_follow_one_and_zero_and_the_lengths_at_both_ends():
    cfg = InteractionConfig(
        num_users=30,
        num_items=12,
        num_clusters=3,
        min_len=4,
        max_len=5,
        lag=1,
        follow=1.0,
        max_interests=1,
    )
    d = generate(cfg, seed=0)
    assert {len(h) for h in d.histories} == {4, 5}
    for h, s, i in zip(d.histories, d.sources, d.interests):
        assert s.tolist() == [-1] + list(range(len(h) - 1)) and len(i) == 1
        assert all(h[t] == successor(cfg, int(h[t - 1])) for t in range(1, len(h)))
        assert (d.cluster(h) == i[0]).all()
    d0 = generate(
        InteractionConfig(
            num_users=10, num_items=12, num_clusters=3, min_len=4, max_len=4, follow=0.0
        ),
        1,
    )
    assert all((s == -1).all() for s in d0.sources)
    assert {
        len(i)
        for i in generate(
            InteractionConfig(num_users=60, num_items=12, num_clusters=3, min_len=4, max_len=4), 2
        ).interests
    } == {1, 2, 3}
    assert d.cluster(np.array([0, 1, 4, 5, 12])).tolist() == [-1, 0, 0, 1, 2]


def test_numbers_names_defaults_and_messages():
    assert N.LANGS == ("en", "de", "fr", "es", "it", "zh", "digits")
    assert N.DEFAULT_LEVEL == {
        "en": "word",
        "fr": "word",
        "es": "word",
        "it": "word",
        "de": "char",
        "zh": "char",
        "digits": "char",
    }
    assert N.parse_name("numbers-en-zh") == ("en", "zh")
    for bad in (
        "numbers-en",
        "numbers-en-de-fr",
        "words-en-de",
        "numbers-xx-de",
        "numbers-en-xx",
        "numbers-de-de",
    ):
        with pytest.raises(ValueError) as e:
            N.parse_name(bad)
        assert str(e.value) == (
            f"unknown numbers dataset {bad!r}; use numbers-SRC-TGT with two different languages "
            "from en, de, fr, es, it, zh, digits"
        )
    for src, tgt in (("xx", "en"), ("en", "xx")):
        with pytest.raises(ValueError) as e:
            N.number_pairs(src, tgt, 5)
        assert str(e.value) == "unknown language 'xx'; known: en, de, fr, es, it, zh, digits"
    for lo, hi in ((0, 3), (4, 3)):
        with pytest.raises(ValueError) as e:
            N.sample_numbers(1, min_digits=lo, max_digits=hi)
        assert str(e.value) == f"need 1 <= min_digits <= max_digits; got {lo}, {hi}"


def test_sample_numbers_digit_counts_and_split_sizes():
    nums = N.sample_numbers(400, seed=2, min_digits=2, max_digits=4)
    assert {len(str(x)) for x in nums} == {2, 3, 4} and len(set(nums)) == 400
    assert {len(str(x)) for x in N.sample_numbers(200, seed=0)} == set(
        range(1, 14)
    )  # default max_digits 13
    sp = N.number_pairs("digits", "en", 40, seed=1)
    assert (len(sp.train), len(sp.valid), len(sp.test)) == (36, 2, 2)  # 5 % each
    sp = N.number_pairs("digits", "en", 10, seed=1, valid_frac=0.3, test_frac=0.01)
    assert (len(sp.train), len(sp.valid), len(sp.test)) == (6, 3, 1)  # at least one test pair
    nums = N.sample_numbers(10, seed=1)
    assert [int(s) for s, _ in sp.valid + sp.test + sp.train] == nums
    assert all(t == N.spell(int(s), "en") for s, t in sp.train)
    assert N.spell(7, "digits") == "7"
