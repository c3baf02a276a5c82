#!/usr/bin/env bash
# A sampled mutation score for one package, against that package's own tests (a lower bound: tests of
# other packages that would also kill a mutant are not run).
#
#   benchmarks/mutation_package.sh PACKAGE SAMPLE SEED TEST_PATH...
#   e.g. benchmarks/mutation_package.sh distributed 60 2026 tests/distributed
#
# It makes a detached worktree of HEAD in ${MUT_ROOT:-/tmp}/mut-PACKAGE, narrows [tool.mutmut] there
# to src/attnlab/PACKAGE/* and the given tests, lets mutmut generate the mutants and collect which
# tests reach which function, draws SAMPLE mutant names with benchmarks/mutation_sample.py, runs
# them, and prints the summary (benchmarks/mutation_summary.py: score with a 95 % interval).
set -euo pipefail
pkg=$1 size=$2 seed=$3; shift 3
repo=$(git rev-parse --show-toplevel)
py=${PYTHON:-$repo/.venv/bin/python}
mutmut=${MUTMUT:-$repo/.venv/bin/mutmut}
dir=${MUT_ROOT:-/tmp}/mut-$pkg
git -C "$repo" worktree remove --force "$dir" 2>/dev/null || rm -rf "$dir"
git -C "$repo" worktree add --detach "$dir" HEAD >/dev/null
cd "$dir"
"$py" - "$pkg" "$@" <<'PY'
import re, sys
pkg, tests = sys.argv[1], sys.argv[2:]
s = open("pyproject.toml").read()
s = re.sub(r"only_mutate = \[.*?\]", f'only_mutate = ["src/attnlab/{pkg}/*"]', s, count=1, flags=re.S)
s = re.sub(r"pytest_add_cli_args_test_selection = \[.*?\]",
           "pytest_add_cli_args_test_selection = " + repr(tests).replace("'", '"'), s, count=1, flags=re.S)
open("pyproject.toml", "w").write(s)
PY
export OMP_NUM_THREADS=1
start=$(date +%s)
"$mutmut" run --max-children "${MUTATION_JOBS:-1}" "attnlab.$pkg.zzz_no_such_mutant*" >/dev/null 2>&1 || true
"$mutmut" results --all true > all.txt
"$py" "$repo/benchmarks/mutation_sample.py" "attnlab.$pkg." "$size" --seed "$seed" > sample.txt
"$mutmut" run --max-children "${MUTATION_JOBS:-1}" $(cat sample.txt) > run.log 2>&1 || true
end=$(date +%s)
"$mutmut" results --all true | grep -F -f sample.txt > results.txt || true
echo "package attnlab.$pkg: $(grep -c . all.txt) mutants, sample of $(grep -c . sample.txt) (seed $seed), tests: $*, $(( (end - start) / 60 )) min"
"$py" "$repo/benchmarks/mutation_summary.py" --sample-of "attnlab.$pkg=$(grep -c . all.txt)" < results.txt
