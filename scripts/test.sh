#!/usr/bin/env bash
# Sets up what is missing, builds coil with every core, and runs every test with ctest.
# Exits non-zero on any failure.
#
# Then, as root, builds the CPU container image from what it built and runs it
# (scripts/check_images.sh).
#
# Usage: scripts/test.sh [--asan] [--cpu-only] [--no-images] [ctest arguments...]
#   --asan       Debug build with AddressSanitizer + UndefinedBehaviorSanitizer (build-asan/),
#                without the CUDA backend and the image check; runs the tests of coil's own
#                memory handling (kernels, model, scheduler, readers, tokenizer, serving
#                path) unless ctest arguments choose others
#   --cpu-only   configure with -DCOIL_CUDA=OFF even where nvcc is present
#   --no-images  skip the image check
set -euo pipefail
cd "$(dirname "$0")/.."

build_dir=${COIL_BUILD_DIR:-build}
# scripts/demo.sh configures build/ the same way: running both compiles each file once.
cmake_args=(-G Ninja -DCMAKE_BUILD_TYPE=Release)
ctest_args=()
images=1
asan=0
for arg in "$@"; do
  case "$arg" in
    --asan) build_dir=${COIL_BUILD_DIR:-build-asan}
            # No CUDA: without a GPU its tests only check that calls fail cleanly, and
            # AddressSanitizer cannot see device memory.
            cmake_args=(-G Ninja -DCMAKE_BUILD_TYPE=Debug -DCOIL_SANITIZE=ON -DCOIL_CUDA=OFF)
            asan=1
            images=0 ;;
    --cpu-only) cmake_args+=(-DCOIL_CUDA=OFF) ;;
    --no-images) images=0 ;;
    *) ctest_args+=("$arg") ;;
  esac
done

# The sanitizer job leaves out what does not exercise coil's own memory handling (the
# build and deploy checks, the Node.js client, the load harness) or waits on timers that a
# sanitizer build cannot keep (the rank-failure kill sequences, the CPU ISA variants of
# tests it already runs). The sanitizer settings themselves are compiled into every
# program (common/sanitizer_defaults.cc).
if ((asan)) && ((${#ctest_args[@]} == 0)); then
  ctest_args=(-E '^(core_configure|install|deploy_.*|openai_client|two_hosts|loadgen_live|load_stats|compare_tp_tiny|op_bench_smoke|rank_failure|comm_rank_death|comm_rank_monitor.*|kernels_portable|.*_avx512.*)_?(test)?$')
fi

bash scripts/setup.sh

# Tests launch mpirun; as root Open MPI needs explicit consent.
if [[ $(id -u) -eq 0 ]]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi

start=$(date +%s)
cmake -S . -B "$build_dir" "${cmake_args[@]}"
cmake --build "$build_dir" -j "$(nproc)"
built=$(date +%s)
ctest --test-dir "$build_dir" --output-on-failure -j "$(nproc)" "${ctest_args[@]}"
done_at=$(date +%s)
images_took=""
if ((images)); then
  bash scripts/check_images.sh --build-dir "$build_dir"
  images_took=", image check $(($(date +%s) - done_at)) s"
fi
echo "test.sh: build $((built - start)) s, tests $((done_at - built)) s$images_took"
