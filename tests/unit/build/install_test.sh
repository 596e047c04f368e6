#!/usr/bin/env bash
# `cmake --install` gives a prefix where every program runs and finds its data relative to
# the install, not to the source or build tree: install into a temporary prefix, run each
# program from an unrelated directory, and check that coil-make-model puts the shipped
# tokenizer beside the model it writes and that coil-tokenize and coil-run find it.
# Usage: install_test.sh BUILD_DIR CMAKE
set -u
build=$1 cmake=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
passed=0 failed=0
check() {  # check NAME CONDITION...
  local name=$1; shift
  if "$@"; then passed=$((passed + 1)); echo "ok: $name"; else failed=$((failed + 1)); echo "FAILED: $name"; fi
}
prefix="$work/prefix"
check "cmake --install succeeds" sh -c "'$cmake' --install '$build' --prefix '$prefix' >/dev/null"
cd "$work" || exit 1

for program in coil-serve coil-run coil-cli coil-tokenize coil-make-model coil-loadgen; do
  check "$program is installed" test -x "$prefix/bin/$program"
  check "$program --help runs" sh -c "'$prefix/bin/$program' --help >/dev/null 2>&1 || test \$? -eq 1"
  check "$program --help has its own usage line" \
    sh -c "! '$prefix/bin/$program' --help 2>&1 | grep -q 'SetProgramUsageMessage() never called'"
done
check "the shipped tokenizer is installed" test -f "$prefix/share/coil/gpt-neox-20b/tokenizer.json"

# A model with the tokenizer's whole vocabulary gets the shipped file as it is; the tiny
# shape (250 ids) gets it cut to its vocabulary: "Hello world" then spells out in bytes and
# the first merges (ids below 250: H e l l o, "Ġ" w o r l d, with "he" not applying to "He").
"$prefix/bin/coil-make-model" --shape tiny --dtype f32 --set vocab_size=50277 \
  --out "$work/full" >/dev/null 2>&1
check "coil-make-model writes the shipped tokenizer beside the model" \
  cmp -s "$work/full/tokenizer.json" "$prefix/share/coil/gpt-neox-20b/tokenizer.json"
"$prefix/bin/coil-make-model" --shape tiny --dtype f32 --out "$work/model" >/dev/null 2>&1
ids=$(echo '"Hello world"' | "$prefix/bin/coil-tokenize" --tokenizer "$work/model/tokenizer.json" 2>/dev/null)
check "the tiny model's tokenizer is cut to its 250 ids" \
  test "$ids" = "[41,70,77,77,80,209,88,80,83,77,69]"
# "Hello world" is [12092, 1533] in GPT-NeoX-20B (its own tokenizer's documented example).
ids=$(echo '"Hello world"' | "$prefix/bin/coil-tokenize" 2>/dev/null)
check "coil-tokenize finds the shipped tokenizer" test "$ids" = "[12092,1533]"
out=$(env -u OMPI_COMM_WORLD_SIZE "$prefix/bin/coil-run" --model "$work/model" --ids 1,2,3 \
        --max-tokens 3 --threads 1 2>&1)
check "coil-run generates from the install" grep -q '^ids: ' <<<"$out"

# Moved elsewhere, a prefix still works: nothing points back into the build.
mv "$prefix" "$work/moved"
ids=$(echo '"Hello world"' | "$work/moved/bin/coil-tokenize" 2>/dev/null)
check "a moved prefix still finds its tokenizer" test "$ids" = "[12092,1533]"
echo "$passed passed, $failed failed"
test "$failed" -eq 0
