"""Vocabularies: tokenisation levels, special ids, encode/decode, the JSON file and every refusal text."""

import json

import pytest
import torch

from attnlab.data.vocab import (
    BOS,
    EOS,
    LEVELS,
    PAD,
    SPECIALS,
    UNK,
    UNK_CHAR,
    Vocab,
    detokenize,
    read_vocab,
    tokenize,
)


def test_constants_are_the_documented_specials():
    assert (PAD, BOS, EOS, UNK) == (0, 1, 2, 3)
    assert SPECIALS == ["<pad>", "<bos>", "<eos>", "<unk>"]
    assert LEVELS == ("char", "word", "tokens")
    assert UNK_CHAR == "\ufffd"


def test_tokenize_each_level():
    assert tokenize("it's 4.", "word") == ["it", "'", "s", "4", "."]
    assert tokenize("a b", "char") == ["a", " ", "b"]
    given = ["x", "y"]
    out = tokenize(given, "tokens")
    assert out == ["x", "y"] and out is not given


def test_tokenize_refusals_name_the_type_and_level():
    with pytest.raises(
        TypeError, match=r"^a tokens-level vocabulary encodes a list of tokens; got str$"
    ):
        tokenize("ab", "tokens")
    with pytest.raises(
        TypeError, match=r"^a tokens-level vocabulary encodes a list of tokens; got list$"
    ):
        tokenize(["a", 1], "tokens")
    with pytest.raises(TypeError, match=r"^a word-level vocabulary encodes a str; got list$"):
        tokenize(["a"], "word")
    with pytest.raises(TypeError, match=r"^a char-level vocabulary encodes a str; got int$"):
        tokenize(3, "char")
    with pytest.raises(ValueError) as e:
        tokenize("a", "byte")
    assert (
        str(e.value) == "tokenisation level must be one of ('char', 'word', 'tokens'); got 'byte'"
    )


def test_detokenize_glues_punctuation_and_brackets():
    assert detokenize(["a", "b"], "tokens") == "a b"
    assert detokenize(["a", " ", "b"], "char") == "a b"
    assert detokenize(["it", "'", "s", "4", "."], "word") == "it's 4."
    assert (
        detokenize(["(", "a", ")", "b", ",", "c", "-", "d", "[", "e", "]", "!"], "word")
        == "(a) b, c-d [e]!"
    )
    assert detokenize(["x", "?", "y", ";", "z", ":", "w", "’", "s"], "word") == "x? y; z: w’s"
    assert detokenize([], "word") == ""


def test_vocab_ids_specials_and_order():
    v = Vocab(["b", "a", "<eos>", "b"], "word")
    assert v.itos == [*SPECIALS, "b", "a", "b"]  # given order kept, specials not repeated
    assert (v.pad_id, v.bos_id, v.eos_id, v.unk_id) == (0, 1, 2, 3)
    assert v.stoi["a"] == 5 and v.stoi["b"] == 6 and v.level == "word"
    assert repr(v) == f"Vocab(level='word', size={len(v)})"


def test_vocab_build_keeps_counts_at_min_count():
    v = Vocab.build(["c a b a", "b a"], "word", min_count=2)
    assert v.itos == [*SPECIALS, "a", "b"]  # a: 3, b: 2 (exactly min_count, kept), c: 1 (dropped)
    assert Vocab.build(["b a"], "word").itos == [*SPECIALS, "a", "b"]  # default min_count 1, sorted


def test_char_vocab_has_one_special_and_no_pad_bos_eos():
    v = Vocab.chars("bab\ufffd")
    assert v.itos == [UNK_CHAR, "a", "b"] and v.specials == [UNK_CHAR]
    assert (v.pad_id, v.bos_id, v.eos_id, v.unk_id) == (None, None, None, 0)
    assert v.level == "char"
    assert v.encode("abz") == [1, 2, 0]
    assert v.tokens([2, 0, 1]) == ["b", UNK_CHAR, "a"]  # nothing skipped, nothing stops
    with pytest.raises(
        ValueError, match=r"^cannot build a character vocabulary from an empty text$"
    ):
        Vocab.chars("")


def test_vocab_refuses_a_bad_level_and_a_missing_unknown():
    with pytest.raises(ValueError) as e:
        Vocab([], "bytes")
    assert (
        str(e.value) == "tokenisation level must be one of ('char', 'word', 'tokens'); got 'bytes'"
    )
    with pytest.raises(ValueError) as e:
        Vocab([], "word", specials=["<pad>"])
    assert str(e.value) == (
        "a vocabulary needs an unknown token (<unk> or U+FFFD) among its specials; got ['<pad>']"
    )
    v = Vocab(["x"], "word", specials=["<eos>", "<unk>"])
    assert (v.pad_id, v.bos_id, v.eos_id, v.unk_id) == (None, None, 0, 1)


def test_encode_unknown_and_strict_message():
    v = Vocab(["a", "b"], "word")
    assert v.encode("a zz b zz") == [4, 3, 5, 3]
    with pytest.raises(ValueError) as e:
        v.encode("a zz b zz q", strict=True)
    assert str(e.value) == "'zz', 'q' not in the word-level vocabulary (6 tokens) of this model"
    assert v.encode("a b", strict=True) == [4, 5]
    t = v.encode_tensor("b a")
    assert t.dtype == torch.long and t.tolist() == [5, 4]
    with pytest.raises(ValueError, match="not in the word-level"):
        v.encode_tensor("zz", strict=True)


def test_tokens_skip_pad_and_bos_stop_at_eos_and_read_strays_as_unknown():
    v = Vocab(["a", "b"], "word")
    assert v.tokens([BOS, 4, PAD, 5, EOS, 4]) == ["a", "b"]
    assert v.tokens([4, 99, -1, UNK]) == ["a", "<unk>", "<unk>", "<unk>"]
    assert v.tokens(torch.tensor([4, 5, 2, 5])) == ["a", "b"]
    assert v.decode([BOS, 4, 5, EOS]) == "a b"


def test_json_file_is_readable_utf8_and_round_trips():
    v = Vocab(["é", "中"], "char")
    text = v.to_json()
    assert "é" in text and "中" in text  # not \\u escapes
    assert json.loads(text) == {"level": "char", "tokens": [*SPECIALS, "é", "中"]}
    w = Vocab.from_json(text)
    assert w.itos == v.itos and w.level == "char"
    c = Vocab.chars("ba")
    d = json.loads(c.to_json())
    assert d == {"level": "char", "tokens": [UNK_CHAR, "a", "b"], "specials": 1}
    back = read_vocab(c.to_json())
    assert back.itos == [UNK_CHAR, "a", "b"] and back.specials == [UNK_CHAR] and back.unk_id == 0


def test_older_files_still_load():
    v = Vocab.from_json(json.dumps([*SPECIALS, "dog"]))
    assert v.level == "tokens" and v.itos == [*SPECIALS, "dog"]
    c = Vocab.from_json(json.dumps({"kind": "chars", "itos": [UNK_CHAR, "x", "y"]}))
    assert c.itos == [UNK_CHAR, "x", "y"] and c.specials == [UNK_CHAR] and c.level == "char"


@pytest.mark.parametrize(
    "text, message",
    [
        ('{"kind": "chars", "itos": ["x"]}', "a character vocabulary file starts with U+FFFD"),
        ('{"kind": "chars", "itos": []}', "a character vocabulary file starts with U+FFFD"),
        ('{"kind": "chars", "itos": "\ufffd"}', "a character vocabulary file starts with U+FFFD"),
        (
            "{",
            "not a vocabulary file: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)",
        ),
        ('{"level": "word"}', "not a vocabulary file: 'tokens'"),
        (
            '{"level": "word", "tokens": [1]}',
            "not a vocabulary file: 'tokens' must be a list of strings",
        ),
        (
            '{"level": "word", "tokens": "ab"}',
            "not a vocabulary file: 'tokens' must be a list of strings",
        ),
        (
            '{"level": "char", "tokens": ["a"], "specials": 0}',
            "not a vocabulary file: 'specials' must be a count of leading tokens; got 0",
        ),
        (
            '{"level": "char", "tokens": ["a"], "specials": 2}',
            "not a vocabulary file: 'specials' must be a count of leading tokens; got 2",
        ),
        (
            '{"level": "char", "tokens": ["a"], "specials": "1"}',
            "not a vocabulary file: 'specials' must be a count of leading tokens; got '1'",
        ),
        (
            '{"level": "word", "tokens": ["<pad>", "<bos>", "<eos>", "x"]}',
            "vocabulary file does not start with the special tokens <pad>, <bos>, <eos>, <unk>",
        ),
    ],
)
def test_from_json_refusals(text, message):
    with pytest.raises(ValueError) as e:
        Vocab.from_json(text)
    assert str(e.value) == message


def test_specials_count_at_the_edge_is_accepted():
    v = Vocab.from_json('{"level": "char", "tokens": ["<unk>"], "specials": 1}')
    assert v.itos == ["<unk>"] and v.unk_id == 0
