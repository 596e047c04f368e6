#!/usr/bin/env bash
# coil-run end to end on the tiny shape: the same greedy and sampled ids at TP1, TP2 and
# TP4 (mpirun), logits dumped as .npy of the right size, scoring, and clear failures for a
# checkpoint with a missing tensor (every rank exits, within seconds) and a bad token id.
# Usage: coil_run_test.sh COIL_RUN COIL_MAKE_MODEL MPIEXEC
set -u
coil_run=$1 make_model=$2 mpiexec=$3
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# shellcheck source=tests/unit/tools/tool_test_lib.sh
source "$(dirname "$0")/tool_test_lib.sh"
run() { "$@" --model "$work/tiny" --ids "$prompt_ids" --max-tokens 24 --threads 1 2>/dev/null; }

tp1=$(run "$coil_run" | ids_of)
tp2=$(run "$mpiexec" -np 2 --oversubscribe "$coil_run" | ids_of)
tp4=$(run "$mpiexec" -np 4 --oversubscribe "$coil_run" | ids_of)
check "greedy ids present" test -n "$tp1"
check "greedy TP2 = TP1" test "$tp1" = "$tp2"
check "greedy TP4 = TP1" test "$tp1" = "$tp4"

sampled=(--temperature 0.8 --top-p 0.9 --seed 7)
s1=$(run "$coil_run" "${sampled[@]}" | ids_of)
s2=$(run "$mpiexec" -np 2 --oversubscribe "$coil_run" "${sampled[@]}" | ids_of)
s1b=$(run "$coil_run" --temperature 0.8 --top-p 0.9 --seed 8 | ids_of)
check "sampled TP2 = TP1" test "$s1" = "$s2"
check "another seed gives other ids" test "$s1" != "$s1b"

run "$coil_run" --max-tokens 1 --dump-logits "$work/logits.npy" >/dev/null
# 13 prompt tokens x 256 padded vocab x 4 bytes after a 128-byte header.
check "npy size" test "$(stat -c %s "$work/logits.npy" 2>/dev/null)" = $((128 + 13 * 256 * 4))
check "npy magic" test "$(head -c 6 "$work/logits.npy" | tail -c 5)" = "NUMPY"

echo "$prompt_ids,9,9,9,9,9,9,9,9,9,9" > "$work/score.ids"
score=$("$coil_run" --model "$work/tiny" --score "$work/score.ids" --threads 1 2>/dev/null)
check "score reports perplexity" grep -q "perplexity" <<<"$score"

cp -r "$work/tiny" "$work/broken"
sed -i 's/"n_layer": *2/"n_layer": 3/' "$work/broken/config.json"
start=$(date +%s)
out=$("$mpiexec" -np 2 --oversubscribe "$coil_run" --model "$work/broken" --ids 1,2 2>&1)
status=$?
elapsed=$(( $(date +%s) - start ))
check "missing tensor: non-zero exit" test "$status" -ne 0
check "missing tensor: named" grep -q "layers.2" <<<"$out"
check "missing tensor: fails within 20 s" test "$elapsed" -lt 20

out=$("$coil_run" --model "$work/tiny" --ids 1,99999 2>&1)
status=$?
check "bad id: non-zero exit" test "$status" -ne 0
check "bad id: says why" grep -q "outside the vocabulary" <<<"$out"

echo "$passed passed, $failed failed"
test "$failed" -eq 0
