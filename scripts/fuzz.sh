#!/usr/bin/env bash
# Builds coil's libFuzzer targets (tests/fuzz/) with clang, AddressSanitizer and
# UndefinedBehaviorSanitizer in build-fuzz/, and runs each for a given time on a working
# copy of its seed corpus. One target per reader of untrusted files:
#   fuzz_safetensors        safetensors files (header JSON, dtypes, offsets)
#   fuzz_safetensors_index  model.safetensors.index.json (the sharded checkpoint's weight_map)
#   fuzz_torch_zip          torch.save's pytorch_model.bin: the zip archive and the pickle in it
#   fuzz_torch_pickle       torch.save's data.pkl alone (the unpickler; writer round trip)
#   fuzz_config             config.json (both Mamba2 dialects and Nemotron-H)
#   fuzz_tokenizer_json     tokenizer.json: the loader and what it builds (normalizers,
#                           pre-tokenizer, BPE, decoder, added tokens), encoding and decoding
#   fuzz_tokenizer_regex    the Split/Replace regular expressions (pattern line, then text)
# Installs clang and libclang-rt-14-dev (libFuzzer's runtime) when missing: the normal
# build does not need them. Exits non-zero when a target finds a crash, a hang (an input
# over 10 s) or a sanitizer report; the input is left in build-fuzz/artifacts/<target>/. To
# make it a regression test, fix the bug and copy the input into
# tests/fuzz/corpus/<target without fuzz_>/: ctest replays those folders on every run
# (FuzzCorpusTest in checkpoint_test and tokenizer_test).
#
# Usage: scripts/fuzz.sh [SECONDS_PER_TARGET (default 60)] [TARGET...]
#        scripts/fuzz.sh --help
set -euo pipefail
cd "$(dirname "$0")/.."

all_targets=(fuzz_safetensors fuzz_safetensors_index fuzz_torch_zip fuzz_torch_pickle fuzz_config
  fuzz_tokenizer_json fuzz_tokenizer_regex)
usage() {
  echo "usage: scripts/fuzz.sh [SECONDS_PER_TARGET (default 60)] [TARGET...]"
  echo "  runs each target (default: all) for SECONDS_PER_TARGET seconds; targets:"
  printf '    %s\n' "${all_targets[@]}"
}
if [[ ${1:-} == -h || ${1:-} == --help ]]; then
  usage
  exit 0
fi
seconds=${1:-60}
if ! [[ $seconds =~ ^[0-9]+$ ]] || ((seconds == 0)); then
  echo "fuzz: SECONDS_PER_TARGET must be a positive whole number, got '$seconds'" >&2
  usage >&2
  exit 2
fi
shift || true
targets=("$@")
if ((${#targets[@]} == 0)); then
  targets=("${all_targets[@]}")
fi
for target in "${targets[@]}"; do
  if [[ " ${all_targets[*]} " != *" $target "* ]]; then
    echo "fuzz: no target '$target'" >&2
    usage >&2
    exit 2
  fi
done

missing=()
for package in clang libclang-rt-14-dev; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$package")
  fi
done
if ((${#missing[@]} > 0)); then
  echo "fuzz: installing ${missing[*]}"
  sudo=""
  if [[ $(id -u) -ne 0 ]]; then sudo="sudo"; fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

build=build-fuzz
sanitizers="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined"
# Table lookups left out of the coverage feedback (see the file).
sanitizers+=" -fsanitize-coverage-ignorelist=$PWD/tests/fuzz/coverage_ignorelist.txt"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_C_FLAGS="$sanitizers" -DCMAKE_CXX_FLAGS="$sanitizers" \
  -DCOIL_FUZZ=ON -DCOIL_SERVING=OFF -DCOIL_CUDA=OFF -DCOIL_BUILD_BENCHMARKS=OFF >/dev/null
ninja -C "$build" -j2 "${targets[@]}"

status=0
for target in "${targets[@]}"; do
  seeds=tests/fuzz/corpus/${target#fuzz_}
  corpus=$build/corpus/$target
  artifacts=$build/artifacts/$target/
  mkdir -p "$corpus" "$artifacts"
  cp -n "$seeds"/* "$corpus"/ 2>/dev/null || true
  echo "fuzz: $target for ${seconds}s (seeds: $seeds)"
  if ! "$build/tests/fuzz/$target" -max_total_time="$seconds" -max_len=65536 -timeout=10 \
      -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$artifacts" "$corpus" \
      2>"$build/$target.log"; then
    echo "fuzz: $target FAILED; see $build/$target.log and $artifacts"
    status=1
  fi
  grep -E "stat::number_of_executed_units|cov:" "$build/$target.log" | tail -n 2 || true
done
exit $status
