#!/usr/bin/env bash
# coil-run as one process, as every build has it (also without MPI or the tokenizer): the
# same greedy ids twice from a tiny random model, the prompt given as ids, a --score file of
# ids, and clear failures for an unknown --device and for --device cuda where the build or
# the machine has no GPU.
# Usage: coil_run_single_test.sh COIL_RUN COIL_MAKE_MODEL
set -u
coil_run=$1 make_model=$2
# shellcheck source=tests/unit/tools/tool_test_lib.sh
source "$(dirname "$0")/tool_test_lib.sh"
run() { env -u OMPI_COMM_WORLD_SIZE "$coil_run" --model "$work/tiny" --ids "$prompt_ids" --max-tokens 12 --threads 1 "$@" 2>&1; }

first=$(run | ids_of)
second=$(run --device cpu | ids_of)
check "greedy ids present" test -n "$first"
check "12 ids" test "$(tr ',' '\n' <<<"${first#ids: }" | wc -l)" -eq 12
check "same ids twice" test "$first" = "$second"

echo "$prompt_ids,9,9,9,9" > "$work/score.ids"
score=$(env -u OMPI_COMM_WORLD_SIZE "$coil_run" --model "$work/tiny" --score "$work/score.ids" --threads 1 2>&1)
check "score of ids reports perplexity" grep -q "perplexity" <<<"$score"

out=$(run --device gpu)
status=$?
check "unknown device: non-zero exit" test "$status" -ne 0
check "unknown device: says the choices" grep -q 'use cpu or cuda' <<<"$out"

# With a GPU this generates; without one (or without CUDA in the build) it must say so.
out=$(run --device cuda)
status=$?
if [[ $status -eq 0 ]]; then
  check "cuda: ids present" grep -q '^ids: ' <<<"$out"
else
  check "cuda unavailable: says why and the fix" grep -Eq 'no CUDA (backend|device).*--device cpu' <<<"$out"
fi

echo "$passed passed, $failed failed"
test "$failed" -eq 0
