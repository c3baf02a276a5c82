"""The viewer inside a notebook cell and the title of a Hugging Face model's view.

- ``View._repr_html_`` puts the whole page into an iframe's ``srcdoc`` attribute: every quote of the
  page is escaped, so the attribute ends where the page ends and unescapes to the page itself.
- ``pattern`` names the mask when it refuses one of the wrong rank.
- ``load_and_run`` titles the view ``<folder name> (<model type>)`` and says which step failed when the
  tokenizer cannot be loaded.
"""

from __future__ import annotations

import html
import re

import numpy as np
import pytest
import torch

from attnlab.viz.heatmap import pattern
from attnlab.viz.viewer import normalise


def test_the_notebook_iframe_holds_the_whole_page_with_its_quotes_escaped():
    view = normalise({"title": 'say "hi"', "layers": np.full((1, 1, 2, 2), 0.5), "tokens": ["a", "b"]})
    cell = view._repr_html_()
    m = re.fullmatch(r'<iframe srcdoc="([^"]*)" style="width:100%;height:720px;border:1px solid #ddd"></iframe>', cell)
    assert m is not None, cell[:200]
    page = view.html()
    assert '"' in page  # the page has attributes and JSON: quotes that must not end srcdoc
    assert html.unescape(m.group(1)) == page
    assert "&quot;" in m.group(1)


def test_pattern_names_the_mask_it_refuses():
    with pytest.raises(ValueError) as e:
        pattern(np.ones(4, dtype=bool))
    assert str(e.value) == "mask must have 2 dimensions; got shape (4,)"


transformers = pytest.importorskip("transformers", reason="needs the hf extra (pip install 'attnlab[hf]')")

from attnlab.viz.hf import load_and_run  # noqa: E402

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "on", "mat"]


def _bert(folder):
    from transformers import BertConfig, BertModel, BertTokenizer

    folder.mkdir(parents=True)
    (folder / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=len(VOCAB), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                     intermediate_size=32)
    BertModel(cfg).eval().save_pretrained(folder)
    BertTokenizer(str(folder / "vocab.txt")).save_pretrained(folder)
    return folder


def test_the_view_is_titled_by_the_folder_and_the_model_type(tmp_path):
    view = load_and_run(_bert(tmp_path / "tiny-bert"), "the cat sat")
    assert view["title"] == "tiny-bert (bert)"


def test_a_tokenizer_that_cannot_be_loaded_is_named_as_such(tmp_path):
    folder = _bert(tmp_path / "m")
    (folder / "tokenizer_config.json").write_text("{ not json")
    with pytest.raises(ValueError) as e:
        load_and_run(folder, "the cat sat")
    assert str(e.value).startswith(f"{folder}: could not load its tokenizer: "), str(e.value)
