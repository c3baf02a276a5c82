"""The shipped translators on what a newcomer types first: the sentences the README shows, a sentence
of the test set, the everyday Chinese forms (两千, 两万), and a one-line note where the input is
unlike anything the model was trained on (case and full stop, a number of more digits)."""

from __future__ import annotations

import pytest

from attnlab import pretrained
from attnlab.cli import main

CASE_NOTE = ("note: the model was trained on sentences that start with a capital letter and end with . ! or ?; "
             "try {!r}")


def _translate(capsys, *texts: str) -> tuple[list[str], list[str]]:
    """(stdout lines, stderr lines) of ``attnlab translate`` with the shipped model of the texts' language."""
    name = "zh-en-numbers" if all(ord(t[0]) > 0x3000 for t in texts) else "de-en"
    assert main(["translate", "--pretrained", name, *texts, "--no-alignment"]) == 0
    out, err = capsys.readouterr()
    return out.splitlines(), err.splitlines()


def test_de_en_translates_the_readmes_sentence_and_one_of_its_test_sentences(capsys):
    assert pretrained.translate("de-en", "Das Wasser ist kalt.").text == "The water is cold."
    # "Das Kind wurde verletzt." / "The kid got hurt." is a pair of its test split: held out from training
    assert _translate(capsys, "Das Kind wurde verletzt.") == (["Das Kind wurde verletzt. → The child was hurt."], [])


def test_de_en_notes_a_sentence_without_its_capital_letter_or_full_stop(capsys):
    out, err = _translate(capsys, "das Wasser ist kalt", "Das Wasser ist kalt", "Das Wasser ist kalt.")
    assert [line.split(" → ")[0] for line in out] == ["das Wasser ist kalt", "Das Wasser ist kalt",
                                                      "Das Wasser ist kalt."]
    assert err == [CASE_NOTE.format("Das Wasser ist kalt."), CASE_NOTE.format("Das Wasser ist kalt.")]
    assert pretrained.translate("de-en", "wie heißt du").notes == [CASE_NOTE.format("Wie heißt du.")]
    assert pretrained.translate("de-en", "Wie heißt du?").notes == []


def test_de_en_names_the_capitalised_word_it_knows(capsys):
    with pytest.raises(ValueError) as e:
        pretrained.translate("de-en", "das wetter ist sehr schön")
    assert str(e.value) == ("'wetter' not in the word-level vocabulary (20077 tokens) of this model; "
                            "it knows 'Wetter'")
    with pytest.raises(ValueError) as e:
        pretrained.translate("de-en", "Das Quuxwetter ist schön.")
    assert str(e.value) == "'Quuxwetter' not in the word-level vocabulary (20077 tokens) of this model"


@pytest.mark.parametrize("text, english", [
    ("两千", "two thousand"), ("两万", "twenty thousand"), ("两亿", "two hundred million"),
    ("一万两千", "twelve thousand"), ("两千零五", "two thousand and five"),  # 两: the everyday form of 二
    ("四", "four"), ("八", "eight"), ("零", "zero"), ("十", "ten"), ("十五", "fifteen"), ("二十", "twenty"),
    ("五亿零五千零四十", "five hundred million, five thousand and forty"),  # a whole zero group
    ("一万亿零一千", "one trillion, one thousand"),
])
def test_zh_en_numbers_reads_the_forms_a_chinese_reader_writes(text, english):
    t = pretrained.translate("zh-en-numbers", text)
    assert (t.text, t.notes) == (english, [])


def test_zh_en_numbers_notes_a_number_longer_than_its_training_numbers(capsys):
    out, err = _translate(capsys, "一百万亿", "九万九千九百九十九亿九千九百九十九万九千九百九十九")
    assert out[1] == ("九万九千九百九十九亿九千九百九十九万九千九百九十九 → nine trillion, nine hundred and ninety-nine "
                      "billion, nine hundred and ninety-nine million, nine hundred and ninety-nine thousand, nine "
                      "hundred and ninety-nine")  # 13 digits: the longest it trained on, no note
    assert err == ["note: a number of 15 digits; this model was trained on numbers of at most 13 digits, so the "
                   "translation is likely wrong"]
    assert pretrained.translate("zh-en-numbers", "三" * 30).notes == [
        "note: 30 tokens, longer than any sentence this model was trained on (at most 25); the translation is "
        "likely wrong"]


def test_explain_and_view_read_two_thousand_as_translate_does(capsys, tmp_path):
    # 两千 is read as 二千 by every verb that runs the translator, not only by translate
    assert main(["explain", "--pretrained", "zh-en-numbers", "--text", "两千"]) == 0
    out = capsys.readouterr().out
    assert "this step writes “two”" in out and "key tokens: 1:两 2:千" in out
    page = tmp_path / "two.html"
    assert main(["view", "--pretrained", "zh-en-numbers", "--text", "两万", "-o", str(page)]) == 0  # it refused 两
    assert page.stat().st_size > 0 and capsys.readouterr().err == ""
