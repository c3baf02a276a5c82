"""Chinese numerals as a Chinese reader writes them: the numbers corpus's writer against a table
written by hand from the rules (groups of four digits, one 零 per run of zeros between two
non-zero digits, none at the end, 十 alone at the start), and the forms people type (两千, 两万)."""

import pytest

from attnlab.data.numbers import (
    chinese,
    chinese_value,
    normalise_chinese,
    number_pairs,
    sample_numbers,
    spell,
)

TABLE = {
    0: "零", 1: "一", 2: "二", 9: "九",
    10: "十", 11: "十一", 19: "十九", 20: "二十", 21: "二十一",
    100: "一百", 101: "一百零一", 110: "一百一十", 111: "一百一十一", 120: "一百二十",
    1000: "一千", 1001: "一千零一", 1010: "一千零一十", 1100: "一千一百", 2005: "二千零五", 3005: "三千零五",
    10000: "一万", 10001: "一万零一", 10010: "一万零一十", 10100: "一万零一百", 11000: "一万一千",
    100000: "十万", 120000: "十二万", 420000: "四十二万", 1000010: "一百万零一十",
    100000000: "一亿", 100000001: "一亿零一", 100010000: "一亿零一万", 105000000: "一亿零五百万",
    110000000: "一亿一千万", 1001000000: "十亿零一百万", 1010000000: "十亿一千万", 1500000000: "十五亿",
    500005040: "五亿零五千零四十",  # 5|0000|5040: a whole zero group, one 零
    500050040: "五亿零五万零四十",  # 5|0005|0040
    10**12: "一万亿", 1000000001000: "一万亿零一千", 1005000000000: "一万零五十亿",
    9999999999999: "九万九千九百九十九亿九千九百九十九万九千九百九十九",
}


@pytest.mark.parametrize("n, text", TABLE.items())
def test_the_writer_matches_the_hand_written_table_and_reads_back(n, text):
    assert chinese(n) == text
    assert spell(n, "zh") == text
    assert chinese_value(text) == n


def test_written_forms_follow_the_rules_on_many_numbers():
    for n in sample_numbers(3000, seed=4):
        text = chinese(n)
        assert chinese_value(text) == n, n
        if n:
            assert not text.endswith("零") and "零零" not in text, (n, text)
        assert not text.startswith("一十"), (n, text)


def test_the_forms_people_type_are_read_as_the_written_ones():
    assert normalise_chinese("两千零五") == "二千零五"
    assert normalise_chinese("一万两千") == "一万二千"
    assert normalise_chinese("三〇五") == "三零五"
    assert {t: chinese_value(t) for t in ("两千", "两万", "两亿", "两百", "一万两千", "十", "二十")} == {
        "两千": 2000, "两万": 20000, "两亿": 200000000, "两百": 200, "一万两千": 12000, "十": 10, "二十": 20}
    assert chinese_value("3千") is None


@pytest.mark.parametrize("bad", [-1, 2.0, True, "3"])
def test_the_writer_refuses_what_is_not_a_count(bad):
    with pytest.raises(ValueError) as e:
        chinese(bad)
    assert str(e.value) == f"chinese() writes integers >= 0; got {bad!r}"


def test_the_corpus_trains_on_every_small_number_and_on_zero_groups():
    sp = number_pairs("digits", "zh", 20000, seed=0)  # the shipped model's corpus
    train = {int(d) for d, _ in sp.train}
    held = {int(d) for d, _ in sp.valid + sp.test}
    assert set(range(100)) <= train and not held & set(range(100))
    assert not train & held and len(sp.valid) == len(sp.test) == 1000
    # a whole zero group inside (5|0000|5040): drawn uniformly, 13-digit numbers almost never have one
    zero_group = [z for d, z in sp.train if len(d) >= 9 and d[-8:-4] == "0000" and int(d[-4:])]
    assert len(zero_group) >= 100 and all("亿零" in z for z in zero_group)
