#!/usr/bin/env bash
# The core-only configuration (COIL_SERVING=OFF) stays valid: CMake configures it in a
# scratch folder, without CUDA (the normal build checks that), and it must neither fail nor
# define a serving target. Where third_party_local/ is filled (scripts/device_bundle.sh), the
# GPU machine's configuration is checked too: no Abseil, nlohmann_json, GoogleTest, ICU,
# Benchmark, oneDNN or MPI packages, which must then come from that folder.
# Usage: core_configure_test.sh SOURCE_DIR CMAKE
set -u
source_dir=$1 cmake=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failed=0

configure() {  # configure NAME ARGS...
  local name=$1; shift
  if ! "$cmake" -S "$source_dir" -B "$work/$name" -G Ninja -DCOIL_SERVING=OFF -DCOIL_CUDA=OFF \
       "$@" > "$work/$name.log" 2>&1; then
    echo "FAILED: $name: configure"; tail -n 20 "$work/$name.log"; failed=1; return 1
  fi
  # Serving targets must be absent; the core's must be there.
  local targets
  targets=$(ninja -C "$work/$name" -t targets all 2>/dev/null)
  for absent in coil_proto coil_comm coil_worker_loop coil_plan_codec coil-serve coil_engine; do
    if grep -Eq "(^|/)(lib)?$absent(\.a)?: " <<<"$targets"; then
      echo "FAILED: $name: the core build defines $absent"; failed=1
    fi
  done
  for present in coil_comm_core coil_runner coil-run coil-make-model model_bench comm_test; do
    if ! grep -Eq "(^|/)(lib)?$present(\.a)?: " <<<"$targets"; then
      echo "FAILED: $name: the core build lacks $present"; failed=1
    fi
  done
  echo "ok: $name"
}

configure packages
if [[ -f $source_dir/third_party_local/absl/include/absl/base/config.h ]]; then
  configure carried -DCMAKE_DISABLE_FIND_PACKAGE_absl=ON -DCMAKE_DISABLE_FIND_PACKAGE_nlohmann_json=ON \
    -DCMAKE_DISABLE_FIND_PACKAGE_GTest=ON -DCMAKE_DISABLE_FIND_PACKAGE_ICU=ON \
    -DCMAKE_DISABLE_FIND_PACKAGE_benchmark=ON -DCMAKE_DISABLE_FIND_PACKAGE_DNNL=ON \
    -DCMAKE_DISABLE_FIND_PACKAGE_MPI=ON
  if [[ $failed -eq 0 ]] && ! grep -q 'Abseil from .*third_party_local' "$work/carried.log"; then
    echo "FAILED: carried: Abseil did not come from third_party_local"; failed=1
  fi
else
  echo "skip: carried (third_party_local/ is empty; scripts/device_bundle.sh fills it)"
fi
exit "$failed"
