# shellcheck shell=bash disable=SC2034,SC2154  # sourced: $make_model in, $prompt_ids out
# Sourced by the tool tests: a scratch folder with a tiny random model, and the tally of
# named checks. Expects $make_model; sets $work and $prompt_ids.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
passed=0 failed=0
check() {  # check NAME CONDITION...
  local name=$1; shift
  if "$@"; then passed=$((passed + 1)); echo "ok: $name"; else failed=$((failed + 1)); echo "FAILED: $name"; fi
}
ids_of() { grep '^ids: ' | head -n1; }

"$make_model" --shape tiny --dtype f32 --out "$work/tiny" >/dev/null 2>&1 || { echo "coil-make-model failed"; exit 1; }
prompt_ids=5,17,200,3,3,99,42,7,128,64,1,249,31
