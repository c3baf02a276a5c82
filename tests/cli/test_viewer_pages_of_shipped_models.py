"""The viewer's document of a shipped model on one input (``view --pretrained NAME --text T``): a GPT's
page holds every layer's and head's causal weights over the characters read (the last ``block_size`` of a
longer text), a translator's page is titled with the source and its translation."""

from __future__ import annotations

import numpy as np
import pytest

from attnlab.cli._model_pages import model_page
from attnlab.cli._source import pretrained_folder
from attnlab.train.runtime import Runtime


@pytest.fixture(scope="module")
def cpu():
    return Runtime.local("cpu", "fp32")


def test_a_gpt_page_holds_causal_weights_of_every_layer_and_head(cpu):
    page = model_page(pretrained_folder("char-gpt"), "To be", cpu)
    assert page["title"] == "To be" and len(page["sections"]) == 1
    section = page["sections"][0]
    assert section["name"] == "causal self-attention"
    assert section["tokens"] == ["T", "o", " ", "b", "e"]
    w = np.array(section["layers"], dtype=np.float64)
    assert w.shape == (4, 4, 5, 5)  # the shipped model: 4 layers of 4 heads (its model card)
    np.testing.assert_allclose(w.sum(-1), 1.0, atol=1e-5)  # each query's weights are a distribution
    assert np.all(w[..., np.triu_indices(5, 1)[0], np.triu_indices(5, 1)[1]] == 0)  # no look ahead
    assert np.all(w >= 0)


def test_a_gpt_reads_the_last_block_of_a_longer_text(cpu):
    text = "".join("abcdefghij"[i % 10] for i in range(200))
    section = model_page(pretrained_folder("char-gpt"), text, cpu)["sections"][0]
    assert section["tokens"] == list(text[-128:])  # block_size 128
    assert np.array(section["layers"]).shape == (4, 4, 128, 128)


def test_a_translator_page_is_titled_with_the_source_and_its_translation(cpu):
    page = model_page(pretrained_folder("zh-en-numbers"), " 三千零五 ", cpu)
    assert page["title"] == "三千零五 → three thousand and five"
