"""The viewer's JSON of a trained attnlab model on one input: what ``view --pretrained NAME --text T``
(or ``view --checkpoint DIR --text T``) shows: one builder per model kind, in ``PAGES``, each
running the model once and writing its weights with the builders ``translate`` and ``caption``
use for ``--attention-out``.
"""

from __future__ import annotations

from pathlib import Path

from ._errors import UsageError


def translator_page(loaded, text: str | None, rt) -> dict:
    """The translation of ``text`` and its attention (RNN: α_t; Transformer: every layer and head)."""
    from ..data.vocab import tokenize

    if not text or not text.strip():
        raise UsageError("a translator needs --text: the sentence to translate")
    from ..pretrained import as_trained, source_ids

    sv = loaded.vocabs["src_vocab"]
    ids = source_ids(text, sv, loaded.config)  # read as translate reads it (两千 as 二千)
    return translation_page(loaded, ids, tokenize(as_trained(text.strip(), loaded.config), sv.level), rt)


def translation_page(loaded, ids: list[int], src_tokens: list[str], rt) -> dict:
    """The greedy translation of the source ``ids`` (shown as ``src_tokens``) and its attention."""
    from ..data import source_batch
    from ..train.decode import greedy, length_guard
    from .translate import attention_document

    sv, tv = loaded.vocabs["src_vocab"], loaded.vocabs["tgt_vocab"]
    src, mask = rt.to(*source_batch([ids]))
    model = loaded.model.to(rt.device)
    with rt.autocast():
        hyp = greedy(model, src, mask, max_len=length_guard([len(ids)]))[0]
        out_tokens = tv.tokens(hyp.tokens) + (["</s>"] if hyp.ended else [])
        return attention_document(model, src, mask, src_tokens, out_tokens, hyp,
                                  title=f"{sv.decode(ids)} → {tv.decode(hyp.tokens)}")


def gpt_page(loaded, text: str | None, rt) -> dict:
    """Every layer's and head's causal self-attention over the characters of ``text`` (the last block), its
    masked positions and each head's queries and keys."""
    from ..trace import trace
    from ..viz.viewer import from_trace

    if not text:
        raise UsageError("a GPT needs --text: the characters to read")
    model, vocab = loaded.model.to(rt.device).eval(), loaded.vocabs["vocab"]
    ids = vocab.encode_tensor(text)[-model.config.block_size:]
    with rt.autocast(), trace() as t:  # each layer's weights, causal mask and per-head q and k (the neuron view)
        model(ids.to(rt.device)[None])
    return from_trace(t, [vocab.itos[i] for i in ids.tolist()], title=text, name="causal self-attention")


def captioner_page(loaded, text: str | None, rt) -> dict:
    """The caption of an image (``text``: its path; default the first held-out scene shipped with the model)."""
    from ..data.emoji import read_image
    from ..train.caption import caption_image
    from .caption import attention_document

    path = Path(text) if text else Path(loaded.path) / "test-scenes" / "000.png"
    if not path.is_file():
        raise UsageError(f"a captioner needs --text IMAGE.png (the image to caption); no image at {path}")
    model, vocab = loaded.model.to(rt.device), loaded.vocabs["vocab"]
    with rt.autocast():
        cap = caption_image(model, vocab, read_image(path, model.config.image_size), loaded.config.get("lang", "en"))
    return attention_document(cap, model.config.grid)


PAGES = {"seq2seq": translator_page, "transformer": translator_page, "gpt": gpt_page, "captioner": captioner_page}


def model_page(checkpoint: str, text: str | None, rt) -> dict:
    """The viewer's JSON of any attnlab checkpoint on ``text``."""
    from ..train.load import load_model

    loaded = load_model(checkpoint, kind=tuple(PAGES))
    return PAGES[loaded.kind](loaded, text, rt)
