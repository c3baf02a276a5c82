"""Hugging Face models in the viewer: their attention outputs as viewer sections.

``from_transformers(outputs, tokens)`` reads what a ``transformers`` model returns with
``output_attentions=True`` — a tuple of per-layer ``(b, h, q, k)`` weights — and makes a
``View`` (see ``attnlab.viz.viewer``):

| model | outputs read | sections |
|---|---|---|
| encoder (BERT-style) | ``attentions`` | "attention" |
| decoder (GPT-2-style) | ``attentions`` | "attention" (causal: the future is masked) |
| encoder–decoder (T5-style) | ``encoder_attentions``, ``decoder_attentions``, ``cross_attentions`` | "encoder", "decoder", "cross" |

``load_and_run(model_dir, text)`` does the glue for a local model folder (``attnlab view --hf
DIR --text "..."``): tokenizer and model from the folder (``local_files_only``: nothing
downloads), one forward pass with the attention implementation asked for (``attnlab view``
asks for ``"attnlab"``, registered by ``attnlab.integrations.transformers``: the weights come
from attnlab's own attention in that same pass; the default ``"eager"`` is transformers' own,
since its fused kernels return no weights); for
BERT- and GPT-2-style models it also keeps each layer's queries and keys (forward hooks on
their projections) so that the page has a neuron view.
``transformers`` is an optional extra: ``pip install 'attnlab[hf]'``.
"""

from __future__ import annotations

import re
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from .viewer import View, normalise

#: Word-piece markers shown as the whitespace they stand for (GPT-2's byte-level Ġ/Ċ, SentencePiece's ▁).
_MARKERS = {"Ġ": " ", "Ċ": "\n", "▁": " ", "ĉ": "\t"}


def display_token(t: str) -> str:
    """A tokenizer's token with its whitespace markers turned back into whitespace (the viewer shows ␣ ⏎)."""
    return "".join(_MARKERS.get(c, c) for c in str(t))


def _stack(maps: Any, what: str, batch_index: int) -> np.ndarray:
    """A tuple of per-layer (b, h, q, k) tensors → (layers, h, q, k) float32 for one batch element."""
    if maps is not None and len(maps) == 0:
        raise ValueError(f"the model has no attention layers (its outputs' {what} is empty)")
    if maps is None or any(m is None for m in maps):
        raise ValueError(f"the outputs have no {what}: run the model with output_attentions=True "
                         "(and attn_implementation='attnlab' after importing attnlab.integrations.transformers, "
                         "or 'eager': transformers' fused attention returns no weights)")
    layers = [m.detach().float().cpu().numpy() for m in maps]
    if layers[0].ndim != 4:
        raise ValueError(f"{what}[0] has shape {layers[0].shape}; expected (batch, heads, q, k)")
    if not 0 <= batch_index < layers[0].shape[0]:
        raise ValueError(f"batch_index {batch_index} is outside the batch of {layers[0].shape[0]}")
    return np.stack([m[batch_index] for m in layers])


def from_transformers(outputs: Any, tokens, decoder_tokens=None, *, title: str = "",
                      batch_index: int = 0) -> View:
    """Viewer data from a Hugging Face model's outputs (``output_attentions=True``).

    ``tokens``: the input's tokens (strings; the encoder's for an encoder–decoder);
    ``decoder_tokens``: the decoder's input tokens (encoder–decoder models only)."""
    tokens = [display_token(t) for t in tokens]
    get = (lambda k: outputs.get(k)) if isinstance(outputs, dict) else (lambda k: getattr(outputs, k, None))
    if get("encoder_attentions") or get("decoder_attentions"):  # BERT's outputs carry an empty cross_attentions
        if decoder_tokens is None:
            raise ValueError("an encoder–decoder's outputs need decoder_tokens (the decoder's input tokens)")
        dec = [display_token(t) for t in decoder_tokens]
        sections = [{"name": "encoder", "layers": _stack(get("encoder_attentions"), "encoder_attentions", batch_index),
                     "tokens": tokens}]
        d = _stack(get("decoder_attentions"), "decoder_attentions", batch_index)
        sections.append({"name": "decoder", "layers": d, "tokens": dec,
                         "masked": np.triu(np.ones(d.shape[-2:], bool), 1)})
        sections.append({"name": "cross", "layers": _stack(get("cross_attentions"), "cross_attentions", batch_index),
                         "tokens": dec, "key_tokens": tokens})
    else:
        a = _stack(get("attentions"), "attentions", batch_index)
        s = {"name": "attention", "layers": a, "tokens": tokens}
        upper = np.triu(np.ones(a.shape[-2:], bool), 1)
        if a.shape[-1] == a.shape[-2] and a.shape[-1] > 1 and np.all(a[..., upper] == 0):
            s["masked"] = upper  # a causal model: the future positions are masked, not merely zero
        sections = [s]
    return normalise({"title": title or "attention", "sections": sections})


#: Modules whose outputs are the per-layer queries and keys, by model family (for the neuron view):
#: BERT-style separate ``query``/``key`` projections, GPT-2's fused ``c_attn`` (q, k, v side by side).
#: T5 is left out: its scores are unscaled and add a position bias, so q·k/√d would not be its score.
_QK_PATTERNS = (
    (re.compile(r"(?:^|\.)layer\.(\d+)\.attention\.self\.(query|key)$"), "separate"),
    (re.compile(r"(?:^|\.)h\.(\d+)\.attn\.c_attn$"), "fused"),
)


def _record_qk(model, n_heads: int):
    """Forward hooks that keep each layer's queries and keys, (h, n, d) for batch element 0."""
    store: dict[int, dict[str, np.ndarray]] = {}
    handles = []

    def heads(x):  # (n, h·d) → (h, n, d)
        n = x.shape[0]
        return x.reshape(n, n_heads, -1).transpose(1, 0, 2)

    for name, mod in model.named_modules():
        for pat, kind in _QK_PATTERNS:
            m = pat.search(name)
            if not m:
                continue
            layer, which = int(m.group(1)), (m.group(2) if kind == "separate" else None)

            def hook(_mod, _inp, out, layer=layer, kind=kind, which=which):
                y = out.detach().float().cpu().numpy()[0]
                if kind == "separate":
                    store.setdefault(layer, {})["queries" if which == "query" else "keys"] = heads(y)
                else:
                    e = y.shape[-1] // 3
                    store.setdefault(layer, {}).update(queries=heads(y[:, :e]), keys=heads(y[:, e:2 * e]))

            handles.append(mod.register_forward_hook(hook))
    return store, handles


#: Weight files that are Python pickles: loading one can run arbitrary code, so attnlab refuses them.
_PICKLES = ("*.bin", "*.pt", "*.pth", "*.ckpt", "*.pkl", "*.pickle")


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split()) or type(e).__name__
    return text if len(text) <= 300 else text[:297] + "..."


@contextmanager
def _reading(model_dir: Path, what: str):
    """Any error of transformers (or torch, safetensors, tokenizers) while doing ``what`` → one ValueError."""
    try:
        yield
    except Exception as e:
        raise ValueError(f"{model_dir}: {what}: {_one_line(e)}") from None


def _check_weight_files(model_dir: Path) -> None:
    if any(model_dir.glob("*.safetensors")):
        return
    pickles = sorted(p.name for pattern in _PICKLES for p in model_dir.glob(pattern))
    if pickles:
        raise ValueError(f"{model_dir} holds its weights as a Python pickle ({', '.join(pickles)}), which attnlab "
                         "never unpickles (it can run code): convert it to safetensors, e.g. "
                         "model.save_pretrained(dir, safe_serialization=True) where you trust the file")
    raise ValueError(f"{model_dir} has no weights: expected model.safetensors (or sharded *.safetensors)")


@contextmanager
def _quiet():
    """transformers without its progress bars and warnings (the command's output is its own one line)."""
    from transformers.utils import logging as hf_logging

    level, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)
        if bars:
            hf_logging.enable_progress_bar()


def _load(model_dir: Path, attn_implementation: str = "eager"):
    """(config, tokenizer, model) from a local folder; every failure is one ValueError naming the step."""
    from transformers import AutoConfig, AutoModel, AutoTokenizer

    if not (model_dir / "config.json").is_file():
        raise ValueError(f"{model_dir} is not a Hugging Face model folder (no config.json)")
    _check_weight_files(model_dir)
    with _reading(model_dir, "config.json is not a model configuration transformers can read"):
        config = AutoConfig.from_pretrained(model_dir, local_files_only=True)
    with _reading(model_dir, "could not load its tokenizer"):
        tok = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
        empty = len(tok) == 0 or getattr(tok, "vocab_size", None) == 0
    if empty:
        raise ValueError(f"{model_dir}: the tokenizer's vocabulary is empty")
    with _reading(model_dir, "could not build the model from config.json and its weights"):
        model, info = AutoModel.from_pretrained(model_dir, local_files_only=True, use_safetensors=True,
                                                attn_implementation=attn_implementation,
                                                ignore_mismatched_sizes=True,
                                                output_loading_info=True)
    if info.get("mismatched_keys"):
        key, saved, expected = sorted(info["mismatched_keys"], key=lambda m: m[0])[0]
        raise ValueError(f"{model_dir}: the weights do not fit config.json: {key} is {tuple(saved)} in the file, "
                         f"{tuple(expected)} in the model it describes ({len(info['mismatched_keys'])} tensors differ)")
    return config, tok, model.eval()


def _check_text(text: str, what: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValueError(f"{what} is not valid text: character {e.start} is a lone surrogate "
                         f"({text[e.start]!r}; a command line that is not UTF-8?)") from None


def _encode(model_dir: Path, config, tok, text: str, target: str | None) -> dict[str, Any]:
    """The forward pass's arguments; the text must give 1 to max-positions tokens the model knows."""
    import torch

    _check_text(text, "--text")
    with _reading(model_dir, "the tokenizer failed on the text"):
        enc = tok(text, return_tensors="pt")
    kwargs: dict[str, Any] = {"input_ids": enc["input_ids"], "output_attentions": True}
    if "attention_mask" in enc:
        kwargs["attention_mask"] = enc["attention_mask"]
    if config.is_encoder_decoder:
        _check_text(target if target is not None else text, "--target")
        start = config.decoder_start_token_id if config.decoder_start_token_id is not None else config.pad_token_id
        with _reading(model_dir, "the tokenizer failed on the decoder's text"):
            d = tok(target if target is not None else text, return_tensors="pt", add_special_tokens=False)["input_ids"]
            kwargs["decoder_input_ids"] = torch.cat([torch.full((1, 1), int(start or 0), dtype=d.dtype), d], dim=1)
    limit = getattr(config, "max_position_embeddings", None)
    vocab = getattr(config, "vocab_size", None)
    for key in ("input_ids", "decoder_input_ids"):
        ids = kwargs.get(key)
        if ids is None:
            continue
        n = ids.shape[1]
        if n == 0:
            raise ValueError(f"the text gives no tokens with {model_dir}'s tokenizer: give a text with at least one")
        if isinstance(limit, int) and n > limit:
            raise ValueError(f"the text gives {n} tokens; {model_dir}'s model reads at most {limit} "
                             "(max_position_embeddings): shorten the text")
        if isinstance(vocab, int) and int(ids.max()) >= vocab:
            raise ValueError(f"the tokenizer gives token id {int(ids.max())}, but {model_dir}'s model has "
                             f"{vocab} embeddings (vocab_size): the tokenizer and the model do not match")
    return kwargs


def _need_transformers(doing: str) -> None:
    """An ``ImportError`` naming the extra when transformers is not installed."""
    try:
        import transformers  # noqa: F401
    except ImportError:
        raise ImportError(f"{doing} Hugging Face models needs transformers: pip install 'attnlab[hf]'") from None


def load_and_run(model_dir: str | Path, text: str, target: str | None = None, *, device="cpu",
                 attn_implementation: str = "eager") -> View:
    """Tokenise ``text`` with the folder's tokenizer, run the folder's model once, return its attention.

    ``attn_implementation``: the model's attention, as transformers names it: ``"eager"`` (its own),
    or ``"attnlab"`` once ``attnlab.integrations.transformers`` is imported (the weights from attnlab).

    The model runs on ``device`` (a ``torch.device`` or its name); the weights come back as float32
    NumPy arrays. An autocast context around the call applies to the forward.

    For an encoder–decoder, the decoder reads ``target`` (default: ``text``) after its start token.
    Weights are read from safetensors only (a pickled ``.bin`` is refused, never unpickled); a folder,
    text or weights that transformers cannot use is one ``ValueError`` that names the step."""
    _need_transformers("viewing")
    import torch

    model_dir = Path(model_dir)
    with _quiet():
        config, tok, model = _load(model_dir, attn_implementation)
        model = model.to(device)
        kwargs = _encode(model_dir, config, tok, text, target)
    dec_tokens = None
    if "decoder_input_ids" in kwargs:
        dec_tokens = tok.convert_ids_to_tokens(kwargs["decoder_input_ids"][0].tolist())
    n_heads = getattr(config, "num_attention_heads", None) or getattr(config, "n_head", None)
    store, handles = ({}, [])
    if isinstance(n_heads, int) and n_heads > 0 and not config.is_encoder_decoder:
        store, handles = _record_qk(model, n_heads)
    try:
        with _reading(model_dir, "running the model on the text failed"), torch.no_grad():
            out = model(**{k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()})
    finally:
        for h in handles:
            h.remove()
    name = getattr(config, "_name_or_path", "") or model_dir.name
    tokens = tok.convert_ids_to_tokens(kwargs["input_ids"][0].tolist())
    try:
        view = from_transformers(out, tokens, dec_tokens, title=f"{Path(str(name)).name or model_dir.name} ({config.model_type})")
    except ValueError as e:
        raise ValueError(f"{model_dir}: {e}") from None
    return _with_queries_and_keys(view, store)


def run_once(model_dir: str | Path, text: str, *, attn_implementation: str = "eager"):
    """(config, tokens, outputs): the folder's model run once on ``text`` on the CPU, with
    ``output_attentions=True`` and the attention implementation asked for (encoder-only and
    decoder-only models; the tokens as the viewer shows them). Errors as ``load_and_run``'s."""
    _need_transformers("reading")
    import torch

    model_dir = Path(model_dir)
    with _quiet():
        config, tok, model = _load(model_dir, attn_implementation)
        if config.is_encoder_decoder:
            raise ValueError(f"{model_dir} is an encoder-decoder ({config.model_type}); this reads encoder-only "
                             "and decoder-only models")
        kwargs = _encode(model_dir, config, tok, text, None)
    with _reading(model_dir, "running the model on the text failed"), torch.no_grad():
        out = model(**kwargs)
    return config, [display_token(t) for t in tok.convert_ids_to_tokens(kwargs["input_ids"][0].tolist())], out


def _with_queries_and_keys(view: View, store: dict) -> View:
    """The view with the neuron view's queries and keys, when the hooks saw every layer's."""
    n_layers = view["layers"].shape[0]
    if store and sorted(store) == list(range(n_layers)) and all(len(v) == 2 for v in store.values()):
        s = dict(view["sections"][0])
        s["queries"] = np.stack([store[i]["queries"] for i in range(n_layers)])
        s["keys"] = np.stack([store[i]["keys"] for i in range(n_layers)])
        view = normalise({"title": view["title"], "sections": [s]})
    return view


__all__ = ["from_transformers", "load_and_run", "run_once", "display_token"]
