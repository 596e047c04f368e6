#!/usr/bin/env bash
# Sets up what is missing, builds coil with every core, and runs every test with ctest.
# Exits non-zero on any failure.
#
# Usage: scripts/test.sh [--asan] [--cpu-only] [ctest arguments...]
#   --asan      Debug build with AddressSanitizer + UndefinedBehaviorSanitizer (build-asan/)
#   --cpu-only  configure with -DCOIL_CUDA=OFF even where nvcc is present
set -euo pipefail
cd "$(dirname "$0")/.."

build_dir=${COIL_BUILD_DIR:-build}
# scripts/demo.sh configures build/ the same way: running both compiles each file once.
cmake_args=(-G Ninja -DCMAKE_BUILD_TYPE=Release)
ctest_args=()
for arg in "$@"; do
  case "$arg" in
    --asan) build_dir=${COIL_BUILD_DIR:-build-asan}
            cmake_args=(-G Ninja -DCMAKE_BUILD_TYPE=Debug -DCOIL_SANITIZE=ON) ;;
    --cpu-only) cmake_args+=(-DCOIL_CUDA=OFF) ;;
    *) ctest_args+=("$arg") ;;
  esac
done

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
echo "test.sh: build $((built - start)) s, tests $((done_at - built)) s"
