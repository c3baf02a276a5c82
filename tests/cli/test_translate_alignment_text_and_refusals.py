"""``attnlab translate``: the text alignment (one shade per source token, the strongest source token and its
weight to two decimals, a header row of single-character sources), the alignment picture (its size, ticks, axis
names, title, grey scale from 0 to 1, 100 dpi), the note when the output stopped at ``--max-len``, and the exact
one-line refusal of a bad beam, a bad length, an empty or too long sentence."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pytest
import torch

from attnlab.cli import main
from attnlab.cli.translate import SHADES, alignment_text, plot_alignment, shade

pytestmark = pytest.mark.usefixtures("one_thread")


def test_the_shades_run_from_blank_to_full_block():
    assert SHADES == " ·░▒▓█"


@pytest.mark.parametrize(
    "w, s",
    [
        (0.0, " "),
        (0.04, " "),
        (0.06, "·"),
        (0.1, "·"),
        (0.2, "░"),
        (0.3, "▒"),
        (0.4, "▓"),
        (0.44, "▓"),
        (0.46, "█"),
        (0.49, "█"),
        (0.5, "█"),
        (0.9, "█"),
        (1.0, "█"),
    ],
)
def test_a_weight_below_one_half_is_shaded_in_tenths_and_one_half_is_full(w, s):
    # round(w * 10) picks the shade below 0.5; from 0.5 on the cell is full ("█ ≥ 0.5").
    assert shade(w) == s


def test_the_alignment_rows_name_the_strongest_source_token():
    w = torch.tensor([[0.1, 0.7, 0.2], [0.0, 0.3, 0.7]])
    text = alignment_text(["a", "b", " "], ["x", "yy"], w)
    assert text.split("\n") == [
        "    ab␣",
        " x  ·█░  ← 'b' 0.70",
        "yy   ▒█  ← '␣' 0.70",
    ]


def test_no_header_row_when_a_source_token_is_longer_than_one_character():
    w = torch.tensor([[0.25, 0.75]])
    assert alignment_text(["das", "Haus"], ["house"], w) == "house  ░█  ← 'Haus' 0.75"


def test_a_tie_names_the_first_source_token():
    assert (
        alignment_text(["a", "b"], ["x"], torch.tensor([[0.5, 0.5]])).split("\n")[1]
        == "x  ██  ← 'a' 0.50"
    )


def test_the_alignment_picture(tmp_path, monkeypatch):
    figures = []
    monkeypatch.setattr(plt, "close", figures.append)
    src, out = ["a", " ", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m", "n"], ["x", "y"]
    w = torch.rand(2, 14)
    path = tmp_path / "align.png"
    plot_alignment(str(path), src, out, w, title="cross-attention")
    (fig,) = figures
    (ax,) = fig.axes
    assert tuple(fig.get_size_inches()) == pytest.approx((0.3 * 14 + 2, 3.0))
    assert [t.get_text() for t in ax.get_xticklabels()] == ["a", "␣", *src[2:]]
    assert [t.get_rotation() for t in ax.get_xticklabels()] == [90.0] * 14
    assert [t.get_text() for t in ax.get_yticklabels()] == out
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("source", "output")
    assert ax.get_title() == "cross-attention" and ax.title.get_fontsize() == 8
    (im,) = ax.get_images()
    assert im.get_cmap().name == "Greys" and im.get_clim() == (0, 1)
    assert im.get_array().shape == (2, 14) and ax.get_aspect() == "auto"
    assert plt.imread(path).shape[:2] == (300, round(100 * (0.3 * 14 + 2)))  # 100 dpi


def test_a_small_alignment_picture_keeps_its_least_size_and_has_no_title(tmp_path, monkeypatch):
    figures = []
    monkeypatch.setattr(plt, "close", figures.append)
    out = [f"t{i}" for i in range(10)]
    plot_alignment(str(tmp_path / "a.png"), ["a"], out, torch.full((10, 1), 1.0))
    (fig,) = figures
    assert tuple(fig.get_size_inches()) == pytest.approx((4.0, 0.3 * 10 + 1.5))
    assert fig.axes[0].get_title() == ""


def _refused(capsys, argv, message):
    assert main(argv) == 2
    assert capsys.readouterr().err == f"attnlab translate: error: {message}\n"


def test_bad_numbers_and_sentences_are_refused(capsys):
    base = ["translate", "--pretrained", "zh-en-numbers"]
    _refused(capsys, [*base, "三", "--beam", "0"], "--beam must be >= 1; got 0")
    _refused(capsys, [*base, "三", "--max-len", "0"], "--max-len must be >= 1; got 0")
    _refused(capsys, [*base, "三", "  "], "an empty sentence cannot be translated")
    # The model was trained on sources of at most 25 characters: twice that is the limit.
    _refused(
        capsys,
        [*base, "三" * 51],
        "the sentence has 51 tokens; this model was trained on at most 25 (limit 50)",
    )


def test_a_sentence_at_the_limit_is_translated(capsys):
    assert (
        main(
            [
                "translate",
                "--pretrained",
                "zh-en-numbers",
                "三" * 50,
                "--no-alignment",
                "--max-len",
                "3",
            ]
        )
        == 0
    )
    assert capsys.readouterr().out.startswith("三" * 50 + " → ")


def test_the_output_says_where_it_stopped_at_max_len(capsys):
    assert main(["translate", "--pretrained", "zh-en-numbers", " 三千零五 ", "--max-len", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "三千零五 → three thousand  (stopped at --max-len 2)"
    assert lines[1] == " " * 10 + "三千零五"  # the header: the widest output token and two spaces
    assert [line.split()[0] for line in lines[2:]] == ["three", "thousand"]  # no </s> row


def test_beam_search_gives_the_same_numbers_and_an_end_row(capsys):
    assert main(["translate", "--pretrained", "zh-en-numbers", "三千零五", "--beam", "3"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "三千零五 → three thousand and five"
    assert [line.split()[0] for line in lines[2:]] == ["three", "thousand", "and", "five", "</s>"]


@pytest.mark.filterwarnings("ignore:Glyph")
def test_the_picture_is_written_for_the_first_text_only(tmp_path, capsys):
    pic = tmp_path / "first.png"
    assert (
        main(
            [
                "translate",
                "--pretrained",
                "zh-en-numbers",
                "三千零五",
                "四十二",
                "--no-alignment",
                "--picture",
                str(pic),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out.splitlines()
    assert out == ["三千零五 → three thousand and five", f"wrote {pic}", "四十二 → forty-two"]
    assert plt.imread(pic).shape[0] == round(100 * (0.3 * 5 + 1.5))  # five output rows with </s>
