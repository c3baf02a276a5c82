#!/usr/bin/env bash
# Sampled mutation scores for some packages, each mutant against the tests (of those given) that
# reach its function.
#
#   benchmarks/mutation_package.sh PACKAGE[,PACKAGE...] SAMPLE SEED TEST_PATH...
#   e.g. benchmarks/mutation_package.sh distributed,train 40 2027 tests
#
# It makes a detached worktree of HEAD in ${MUT_ROOT:-/tmp}/mut-<first package>, narrows [tool.mutmut]
# there to src/attnlab/PACKAGE/* and the given tests, lets mutmut generate the mutants, draws SAMPLE
# mutant names per package with benchmarks/mutation_sample.py, runs them (mutmut first records which
# tests reach which function), and prints the summary (benchmarks/mutation_summary.py: the score per
# package with a 95 % interval).
set -euo pipefail
pkgs=$1 size=$2 seed=$3; shift 3
repo=$(git rev-parse --show-toplevel)
py=${PYTHON:-$repo/.venv/bin/python}
mutmut=${MUTMUT:-$repo/.venv/bin/mutmut}
dir=${MUT_ROOT:-/tmp}/mut-${pkgs%%,*}
git -C "$repo" worktree remove --force "$dir" 2>/dev/null || rm -rf "$dir"
git -C "$repo" worktree add --detach "$dir" HEAD >/dev/null
cd "$dir"
"$py" - "$pkgs" "$@" <<'PY'
import re, sys
pkgs, tests = sys.argv[1].split(","), sys.argv[2:]
s = open("pyproject.toml").read()
only = ", ".join(f'"src/attnlab/{p}/*"' for p in pkgs)
s = re.sub(r"only_mutate = \[.*?\]", f"only_mutate = [{only}]", s, count=1, flags=re.S)
s = re.sub(r"pytest_add_cli_args_test_selection = \[.*?\]",
           "pytest_add_cli_args_test_selection = " + repr(tests).replace("'", '"'), s, count=1, flags=re.S)
open("pyproject.toml", "w").write(s)
PY
export OMP_NUM_THREADS=1
start=$(date +%s)
# mutmut stops after generating (no mutant has this name); the mutants are listed from the mutated source
"$mutmut" run --max-children 1 "attnlab.zzz_no_such_mutant" >/dev/null 2>&1 || true
"$py" - "${pkgs//,/ }" > all.txt <<'PY'
import pathlib, re, sys
for pkg in sys.argv[1].split():
    for path in sorted(pathlib.Path("mutants/src/attnlab", pkg).rglob("*.py")):
        module = ".".join(path.relative_to("mutants/src").with_suffix("").parts).removesuffix(".__init__")
        for name in re.findall(r"^\s*def (x[_ǁ]\S+?__mutmut_\d+)\(", path.read_text(), flags=re.M):
            print(f"    {module}.{name}: not checked")
PY
: > sample.txt
sample_of=()
for pkg in ${pkgs//,/ }; do
    "$py" "$repo/benchmarks/mutation_sample.py" "attnlab.$pkg." "$size" --seed "$seed" < all.txt >> sample.txt
    sample_of+=("attnlab.$pkg=$(grep -c "attnlab\.$pkg\." all.txt)")
done
test -s sample.txt || { echo "no mutants listed for $pkgs" >&2; exit 1; }
"$mutmut" run --max-children "${MUTATION_JOBS:-2}" $(cat sample.txt) > run.log 2>&1 || true
end=$(date +%s)
sed "s/$/:/" sample.txt > sample-names.txt
"$mutmut" results --all true | grep -F -f sample-names.txt > results.txt || true
echo "$(grep -c . all.txt) mutants in $pkgs; a sample of $size per package (seed $seed); tests: $*; $(( (end - start) / 60 )) min"
"$py" "$repo/benchmarks/mutation_summary.py" --sample-of "${sample_of[@]}" < results.txt
