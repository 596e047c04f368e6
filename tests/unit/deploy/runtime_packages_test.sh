#!/usr/bin/env bash
# Runs deploy/docker/runtime-packages.sh (which the image builds use to pick the runtime
# stage's packages) on a real C++ program and checks the answer against what any C++
# program on Debian must load: the C and C++ runtime packages, and no -dev package.
#
# Usage: runtime_packages_test.sh RUNTIME_PACKAGES_SH PROGRAM
set -euo pipefail
packages=$(bash "$1" "$2")
echo "$packages"
grep -qx libc6 <<<"$packages" || { echo "FAIL: libc6 missing" >&2; exit 1; }
grep -qx 'libstdc++6' <<<"$packages" || { echo "FAIL: libstdc++6 missing" >&2; exit 1; }
if grep -q -- '-dev$' <<<"$packages"; then
  echo "FAIL: a development package was listed" >&2
  exit 1
fi
echo "runtime_packages_test: 1 passed, 0 failed"
