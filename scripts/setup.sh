#!/usr/bin/env bash
# Installs the Debian 12 packages coil's build needs, and nothing else. Idempotent: a
# package already installed is left alone, and apt-get runs only when one is missing.
# Reports whether a CUDA toolkit (nvcc, cuBLASLt, NCCL) was found, i.e. whether the CUDA
# backend will be built.
#
# Usage: scripts/setup.sh [--check]   (--check: report what is missing, install nothing)
set -euo pipefail

PACKAGES=(
  # toolchain
  cmake ninja-build g++ pkgconf
  # tests and benchmarks
  googletest libgtest-dev libgmock-dev libbenchmark-dev
  # gRPC, Protobuf (protoc, grpc_cpp_plugin) and Abseil
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libabsl-dev
  # MPI: the library and mpirun
  libopenmpi-dev openmpi-bin
  # JSON (configs, safetensors headers, tokenizer.json); oneDNN, which the matmul benchmark
  # compares coil's own bf16 kernels against
  nlohmann-json3-dev libdnnl-dev
  # tokenizer: NFC normalization and Unicode character categories
  libicu-dev
  # the Prometheus /metrics endpoint (HTTP) and the Kubernetes manifest check
  libcpp-httplib-dev yamllint shellcheck
  # the image check (scripts/check_images.sh: a local Debian base image, buildah) and the
  # tests that run ranks in network namespaces (ip netns; ssh-keygen for a group's keys)
  buildah debootstrap iproute2 openssh-client
  # the GGUF writer (tools/coil_to_gguf.py) and its test: the standard library only
  python3
)

check_only=0
[[ "${1:-}" == "--check" ]] && check_only=1

missing=()
for package in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$package")
  fi
done

if ((${#missing[@]} == 0)); then
  echo "setup: all ${#PACKAGES[@]} packages are installed"
elif ((check_only)); then
  echo "setup: missing packages: ${missing[*]}"
  exit 1
else
  echo "setup: installing ${missing[*]}"
  sudo=""
  if [[ $(id -u) -ne 0 ]]; then sudo="sudo"; fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# CUDA: the backend is built when nvcc, cuBLASLt and NCCL are all present (COIL_CUDA=AUTO).
nvcc_path=$(command -v nvcc || true)
[[ -z "$nvcc_path" && -x /usr/local/cuda/bin/nvcc ]] && nvcc_path=/usr/local/cuda/bin/nvcc
if [[ -n "$nvcc_path" ]]; then
  cuda_root=$(dirname "$(dirname "$(readlink -f "$nvcc_path")")")
  have_cublaslt=$(ls "$cuda_root"/lib64/libcublasLt.so* "$cuda_root"/lib/libcublasLt.so* 2>/dev/null | head -n1 || true)
  have_nccl=$( (ls "$cuda_root"/include/nccl.h /usr/include/nccl.h 2>/dev/null; true) | head -n1)
  if [[ -n "$have_cublaslt" && -n "$have_nccl" ]]; then
    echo "setup: CUDA toolkit at $cuda_root ($("$nvcc_path" --version | tail -n1)): the CUDA backend WILL be built"
  else
    echo "setup: nvcc found at $nvcc_path but cuBLASLt or NCCL is missing: the CUDA backend will NOT be built"
  fi
else
  echo "setup: no CUDA toolkit (nvcc) found: the CUDA backend will NOT be built (CPU only)"
fi
