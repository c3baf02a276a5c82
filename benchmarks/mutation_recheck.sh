#!/usr/bin/env bash
# Re-run surviving mutants against their package's whole test folder, outside mutmut's selection.
#
#   cd <mutmut's worktree>; benchmarks/mutation_recheck.sh < survivors.txt > recheck.txt
#
# mutmut records which tests reach a function in its own process only, so a function that runs in
# processes a test starts (the gloo ranks of tests/distributed, `python -m attnlab` in a CLI test)
# is never run against the tests that reach it there. This runs each named mutant (one name a line)
# with MUTANT_UNDER_TEST set and mutants/src first on the path, which the started processes inherit,
# against the tests of its package, and prints "NAME: killed" or "NAME: survived".
set -uo pipefail
declare -A TESTS=(
  [distributed]="tests/distributed" [train]="tests/train" [data]="tests/data" [models]="tests/models"
  [viz]="tests/viz" [interpret]="tests/interpret tests/cli/test_cli_interpret.py tests/cli/test_cli_interpret_crop.py tests/cli/test_cli_interpret_heads.py"
  [experiments]="tests/experiments" [explain]="tests/explain" [cli]="tests/cli" [testing]="tests/testing tests/cli/test_cli_check.py"
)
py=${PYTHON:?set PYTHON to the venv python}
# the pytest arguments of [tool.mutmut] (what mutmut leaves out), one a line
PYTEST_ARGS=$("$py" "$(dirname "$0")/mutation_run_names.py" --print-pytest-args)
one() {
  name=$1; pkg=$(cut -d. -f2 <<<"$name")
  mapfile -t args <<<"$PYTEST_ARGS"
  out=$(cd mutants && MUTANT_UNDER_TEST=$name PYTHONPATH=src OMP_NUM_THREADS=1 timeout 900 "$py" -m pytest \
        "${args[@]}" ${TESTS[$pkg]} 2>&1)
  case $? in
    0) echo "$name: survived" ;;
    124) echo "$name: timeout" ;;
    *) echo "$name: killed by $(grep -m1 -oE '^(FAILED|ERROR) [^ ]*' <<<"$out" | cut -d' ' -f2)" ;;
  esac
}
export -f one; export py PYTEST_ARGS; export TESTS_DECL="$(declare -p TESTS)"
xargs -P "${JOBS:-2}" -I{} bash -c 'eval "$TESTS_DECL"; one "$@"' _ {}
