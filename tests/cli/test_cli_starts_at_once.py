"""``attnlab --help``, ``--version`` and a mistyped verb answer at once: they import no verb and not
torch (seconds of start-up); ``import attnlab`` imports torch only when a name is first used, and
never the compiler (``torch._dynamo``). Bounds on the modules loaded, not timed tests."""

from __future__ import annotations

import subprocess
import sys

import pytest

# Run in a fresh interpreter: the test session has imported torch long ago.
_PROBE = """
import sys
from attnlab.cli import main
try:
    code = main({argv!r})
except SystemExit as e:
    code = e.code
print(sorted(m for m in sys.modules if m.split('.')[0] == 'torch' or m.startswith('attnlab.cli.')))
print(code)
"""


def _modules_and_exit(argv: list[str]) -> tuple[list[str], object, str]:
    out = subprocess.run([sys.executable, "-c", _PROBE.format(argv=argv)], capture_output=True, text=True,
                         check=True)
    *_, modules, code = out.stdout.strip().splitlines()
    return eval(modules), code, out.stderr  # noqa: S307 (our own probe's repr)


@pytest.mark.parametrize("argv", [["--help"], ["--version"], ["nosuchverb"], []],
                         ids=["help", "version", "mistyped-verb", "no-verb"])
def test_the_top_level_answers_without_torch_or_any_verb(argv):
    modules, code, err = _modules_and_exit(argv)
    assert modules == ["attnlab.cli._errors", "attnlab.cli._verbs"]  # the verbs' table, no verb
    assert code == ("2" if argv == ["nosuchverb"] else "0")  # bare attnlab lists the verbs, as --help does
    if argv == ["nosuchverb"]:
        assert err.startswith("attnlab: error: argument VERB: invalid choice: 'nosuchverb'")
        assert "'plot-run'" in err and "'interpret'" in err  # every verb is still named


def test_a_verb_imports_its_own_module_only():
    modules, code, _ = _modules_and_exit(["plot-run", "--help"])
    assert code == "0"
    assert [m for m in modules if m.startswith("attnlab.cli.") and "._" not in m] == ["attnlab.cli.plot_run"]


def test_the_top_level_help_lists_every_verb_with_the_help_its_module_gives():
    from attnlab.cli import VERBS, build_parser

    full = build_parser()  # every verb module imported
    sub = next(a for a in full._actions if a.dest == "verb")
    assert {a.dest: a.help for a in sub._choices_actions} == VERBS


def test_import_attnlab_loads_neither_torch_nor_the_compiler_until_a_name_is_used():
    code = ("import sys, attnlab; a = 'torch' in sys.modules; attnlab.attention; "
            "print(a, 'torch' in sys.modules, 'torch._dynamo' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "True", "False"]


def test_attnlab_trace_stays_the_function_when_its_module_is_imported_first():
    code = "import attnlab.functional, attnlab; print(callable(attnlab.trace) and attnlab.trace.__name__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "trace"


def test_subpackages_are_attributes_of_attnlab_on_first_use():
    code = ("import attnlab; print(attnlab.nn.MemoryCache.__name__, attnlab.models.__name__, "
            "hasattr(attnlab, 'no_such_name'), 'create' in dir(attnlab))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["MemoryCache", "attnlab.models", "False", "True"]
