"""Options made from config dataclasses (defaults, switches, help, the config built and checked, a run's
saved config for ``--resume``), ``--threads``, out-of-memory turned into one line, the device options,
and the viewer's refusals when a model is given without its input."""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, field

import pytest
import torch

from attnlab.cli import Parser, UsageError
from attnlab.cli._fields import config_from, field_default, field_option, saved_config
from attnlab.cli._memory import out_of_memory
from attnlab.cli._model_pages import PAGES, captioner_page, gpt_page, translator_page
from attnlab.cli._runtime import add_inference_device, add_runtime, inference_runtime, runtime_from
from attnlab.cli._threads import HELP, add_threads, apply_threads, threads_for_the_load


@dataclass
class Cfg:
    steps: int = 300
    lr: float = 0.003
    d_model: int = 64
    widths: tuple[int, ...] = (16, 32)
    shuffle: bool = True
    quick: bool = False
    limit: int | None = None
    name: str = "run"
    extras: list = field(default_factory=lambda: [1, 2])


@dataclass
class NoDefault:
    steps: int


def test_field_default_reads_the_dataclass():
    assert (field_default(Cfg, "steps"), field_default(Cfg, "lr"), field_default(Cfg, "limit")) == (
        300,
        0.003,
        None,
    )
    assert field_default(Cfg, "extras") == [1, 2]  # from its factory
    with pytest.raises(KeyError) as e:
        field_default(Cfg, "nope")
    assert e.value.args[0] == "Cfg has no field 'nope'"
    with pytest.raises(KeyError) as e:
        field_default(NoDefault, "steps")
    assert e.value.args[0] == "NoDefault.steps has no default"


def options() -> tuple[argparse.ArgumentParser, dict[str, argparse.Action]]:
    p = Parser(prog="attnlab demo")
    field_option(p, Cfg, "steps", help="optimizer steps")
    field_option(p, Cfg, "lr")
    field_option(p, Cfg, "d_model", "--dim", help="model width")
    field_option(p, Cfg, "shuffle", "--no-shuffle", help="keep the order")
    field_option(p, Cfg, "quick", help="small")
    field_option(p, Cfg, "limit", help="examples (default: all)")
    field_option(p, Cfg, "name", choices=("run", "test"), help="which")
    return p, {a.dest: a for a in p._actions}


def test_an_option_takes_dest_default_type_and_spelling_from_its_field():
    p, actions = options()
    assert vars(p.parse_args([])) == {
        "steps": 300, "lr": 0.003, "d_model": 64, "shuffle": True, "quick": False, "limit": None, "name": "run",
    }  # fmt: skip
    assert actions["steps"].option_strings == ["--steps"] and actions["d_model"].option_strings == [
        "--dim"
    ]
    assert (actions["steps"].type, actions["lr"].type, actions["d_model"].type) == (int, float, int)
    assert actions["limit"].type is None  # no default to take a type from
    assert actions["name"].type is None and actions["name"].choices == ("run", "test")
    args = p.parse_args(
        ["--steps", "5", "--lr", "1", "--dim", "8", "--no-shuffle", "--quick", "--name", "test"]
    )
    assert (args.steps, args.lr, type(args.lr), args.d_model, args.shuffle, args.quick, args.name) == (
        5, 1.0, float, 8, False, True, "test",
    )  # fmt: skip


def test_a_field_option_says_its_default_once():
    _, actions = options()
    assert actions["steps"].help == "optimizer steps (default 300)"
    assert actions["lr"].help == "(default 0.003)"
    assert actions["d_model"].help == "model width (default 64)"
    assert actions["limit"].help == "examples (default: all)"  # says it already
    assert actions["shuffle"].help == "keep the order"  # a switch: no default shown
    assert isinstance(actions["shuffle"], argparse._StoreFalseAction)
    assert isinstance(actions["quick"], argparse._StoreTrueAction)


def test_a_default_given_in_place_of_the_fields():
    p = Parser(prog="attnlab demo")
    field_option(p, Cfg, "limit", default=8)
    field_option(
        p, Cfg, "steps", default=None, help="steps"
    )  # None: the help shows the field's default
    field_option(p, Cfg, "quick", default=True, help="full size")
    actions = {a.dest: a for a in p._actions}
    assert (actions["limit"].type, actions["limit"].help) == (int, "(default 8)")
    assert (actions["steps"].type, actions["steps"].default, actions["steps"].help) == (
        int,
        None,
        "steps (default 300)",
    )
    assert isinstance(actions["quick"], argparse._StoreFalseAction) and actions[
        "quick"
    ].option_strings == ["--quick"]


def test_config_from_builds_the_dataclass_from_the_options():
    args = argparse.Namespace(steps=5, lr=None, d_model=8, shuffle=False, verb="train", name="test")
    cfg = config_from(args, Cfg)
    assert cfg == Cfg(
        steps=5, lr=0.003, d_model=8, shuffle=False, name="test"
    )  # None: the dataclass's default
    assert config_from(args, Cfg, steps=9, limit=3) == Cfg(
        steps=9, d_model=8, shuffle=False, name="test", limit=3
    )


def test_config_from_names_the_flag_of_a_bad_value():
    with pytest.raises(ValueError) as e:
        config_from(argparse.Namespace(d_model=0), Cfg, flags={"d_model": "--dim"})
    assert str(e.value) == "--dim must be >= 1; got 0"
    with pytest.raises(ValueError) as e:  # a field without a flag of another spelling: its name
        config_from(argparse.Namespace(steps=0), Cfg, flags={"d_model": "--dim"})
    assert str(e.value) == "steps must be >= 1; got 0"
    with pytest.raises(ValueError) as e:  # a flag's field is matched as a whole word, not a prefix
        config_from(argparse.Namespace(d_model=0), Cfg, flags={"d": "--d"})
    assert str(e.value) == "d_model must be >= 1; got 0"
    with pytest.raises(ValueError) as e:
        config_from(argparse.Namespace(d_model=0), Cfg)
    assert str(e.value) == "d_model must be >= 1; got 0"


def write_run(tmp_path, train) -> str:
    from attnlab.train.checkpoint import save_checkpoint

    out = tmp_path / "run"
    save_checkpoint(out, {"w": torch.zeros(1)}, {"train": train})
    return str(out)


def test_saved_config_reads_the_runs_settings(tmp_path):
    out = write_run(tmp_path, {"steps": 40, "widths": [8, 4], "unknown": 1, "lr": 0.5})
    assert saved_config(out, Cfg) == Cfg(steps=40, widths=(8, 4), lr=0.5)  # JSON lists → tuples
    assert saved_config(out, Cfg, steps=80) == Cfg(
        steps=80, widths=(8, 4), lr=0.5
    )  # the options given on top


def test_saved_config_refusals(tmp_path):
    with pytest.raises(ValueError) as e:
        saved_config(str(tmp_path / "none"), Cfg)
    assert str(e.value) == f"--resume: no checkpoint to resume at {tmp_path / 'none'}"
    out = write_run(tmp_path, [1, 2])
    with pytest.raises(ValueError) as e:
        saved_config(out, Cfg)
    assert (
        str(e.value)
        == f"--resume: {out}/config.json: 'train' must be an object of settings; got list"
    )
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    (tmp_path / "run" / "config.json").write_text(json.dumps({**config, "train": {"steps": 0}}))
    with pytest.raises(ValueError) as e:
        saved_config(out, Cfg)
    assert str(e.value) == f"--resume: {out}/config.json: train.steps must be >= 1; got 0"


def test_threads_option():
    p = Parser(prog="attnlab demo")
    add_threads(p)
    action = [a for a in p._actions if a.dest == "threads"][0]
    assert (action.option_strings, action.type, action.default, action.help) == (
        ["--threads"],
        int,
        None,
        HELP,
    )
    assert HELP == (
        "torch CPU threads (default: torch's choice, less the cores that other work keeps busy; 1 is often "
        "fastest for these small models)"
    )
    q = Parser(prog="attnlab demo")
    add_threads(q, default=1, help="torch threads (default 1)")
    assert q.parse_args([]).threads == 1 and q.parse_args(["--threads", "3"]).threads == 3


@pytest.mark.parametrize("torch_threads, cores, load, threads", [
    (2, 2, 0.0, 2), (2, 2, 0.4, 2), (2, 2, 0.6, 1), (2, 2, 8.6, 1),  # a 2-core machine, idle to busy
    (8, 16, 3.0, 8), (8, 16, 10.0, 6), (8, 16, 15.6, 1), (4, 4, 1.5, 3), (4, 4, 1.6, 2),
])
def test_without_threads_torch_keeps_only_the_idle_cores(torch_threads, cores, load, threads):
    assert threads_for_the_load(torch_threads, cores, load) == threads


def test_apply_threads_sets_torch_or_leaves_it(monkeypatch):
    before = torch.get_num_threads()
    try:
        monkeypatch.setattr("os.getloadavg", lambda: (0.0, 0.0, 0.0))  # an idle machine: torch's choice
        apply_threads(argparse.Namespace(threads=None))
        assert torch.get_num_threads() == before
        torch.set_num_threads(2)
        monkeypatch.setattr("os.cpu_count", lambda: 2)
        monkeypatch.setattr("os.getloadavg", lambda: (8.6, 3.9, 2.1))  # a busy one: one thread
        apply_threads(argparse.Namespace(threads=None))
        assert torch.get_num_threads() == 1
        monkeypatch.delattr("os.getloadavg")  # no load average (Windows): torch's choice stands
        apply_threads(argparse.Namespace(threads=None))
        assert torch.get_num_threads() == 1
        apply_threads(argparse.Namespace(threads=1))
        assert torch.get_num_threads() == 1
        apply_threads(argparse.Namespace(threads=2))
        assert torch.get_num_threads() == 2
        for bad, message in [
            (0, "--threads must be >= 1; got 0"),
            (1025, "--threads must be <= 1024; got 1025"),
        ]:
            with pytest.raises(ValueError) as e:
                apply_threads(argparse.Namespace(threads=bad))
            assert str(e.value) == message
            assert torch.get_num_threads() == 2  # unchanged
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize(
    "text",
    [
        "[enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: can't allocate memory: you tried to allocate 8 GB",
        "CUDA out of memory. Tried to allocate 2 GiB",
        "MPS backend: not enough memory",
    ],
)
def test_out_of_memory_is_a_memory_error_of_one_line(text):
    with pytest.raises(MemoryError) as e, out_of_memory():
        raise RuntimeError(text)
    first = text[:160]
    assert (
        str(e.value)
        == f"not enough memory for this run ({first}); try smaller sizes (--batch-size, --dim, ...)"
    )
    assert e.value.__cause__ is None and e.value.__suppress_context__


def test_out_of_memory_keeps_the_first_160_characters_on_one_line_and_its_hint():
    text = "out of memory:\n  " + "x" * 300
    with pytest.raises(MemoryError) as e, out_of_memory("try --limit"):
        raise RuntimeError(text)
    flat = "out of memory: " + "x" * 145
    assert len(flat) == 160
    assert str(e.value) == f"not enough memory for this run ({flat}); try --limit"


def test_a_gpu_out_of_memory_error_is_one_too():
    with pytest.raises(MemoryError) as e, out_of_memory():
        raise torch.OutOfMemoryError("Tried to allocate 20.00 GiB")
    assert str(e.value).startswith("not enough memory for this run (Tried to allocate 20.00 GiB); ")


def test_other_errors_pass_through_out_of_memory():
    with pytest.raises(RuntimeError, match="^shape mismatch$"), out_of_memory():
        raise RuntimeError("shape mismatch")
    with pytest.raises(ValueError), out_of_memory():
        raise ValueError("out of memory")  # not a RuntimeError
    with out_of_memory():
        pass


def test_device_options_of_training_and_inference():
    p = Parser(prog="attnlab demo")
    add_runtime(p)
    assert vars(p.parse_args([])) == {"device": "auto", "precision": "fp32", "tensorboard": False}
    assert [g.title for g in p._action_groups][-1] == "device and processes"
    q = Parser(prog="attnlab demo")
    add_inference_device(q)
    assert vars(q.parse_args(["--device", "cpu", "--precision", "bf16"])) == {
        "device": "cpu",
        "precision": "bf16",
        "threads": None,  # every verb that runs a model takes --threads beside its device
    }
    assert [g.title for g in q._action_groups][-1] == "device"
    helps = {a.dest: a.help for a in q._actions}
    assert (
        helps["device"]
        == "where to run the model: auto (CUDA when present, else CPU; default), cpu, cuda, mps"
    )
    assert helps["precision"] == "fp32 (default) or bf16 (autocast around the model's forward)"


def test_inference_runtime_is_one_process_on_the_device():
    rt = inference_runtime(argparse.Namespace(device="cpu", precision="fp32"))
    assert rt.device == torch.device("cpu")


def test_tensorboard_missing_fails_before_training(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "tensorboard", None)
    with pytest.raises(ModuleNotFoundError) as e:
        runtime_from(argparse.Namespace(tensorboard=True, device="cpu", precision="fp32"))
    assert e.value.name == "tensorboard"


def test_each_model_kind_has_its_page():
    assert PAGES == {
        "seq2seq": translator_page,
        "transformer": translator_page,
        "gpt": gpt_page,
        "captioner": captioner_page,
    }


def test_a_model_without_its_input_is_refused(tmp_path):
    class Loaded:
        path = str(tmp_path)

    for text in (None, "", "   "):
        with pytest.raises(UsageError) as e:
            translator_page(Loaded(), text, None)
        assert str(e.value) == "a translator needs --text: the sentence to translate"
    for text in (None, ""):
        with pytest.raises(UsageError) as e:
            gpt_page(Loaded(), text, None)
        assert str(e.value) == "a GPT needs --text: the characters to read"
    with pytest.raises(UsageError) as e:
        captioner_page(Loaded(), None, None)  # no shipped scene in this folder
    missing = tmp_path / "test-scenes" / "000.png"
    assert (
        str(e.value)
        == f"a captioner needs --text IMAGE.png (the image to caption); no image at {missing}"
    )
    with pytest.raises(UsageError) as e:
        captioner_page(Loaded(), str(tmp_path / "cat.png"), None)
    assert str(e.value).endswith(f"no image at {tmp_path / 'cat.png'}")
