#!/usr/bin/env bash
# Fills third_party_local/ (ignored by git) with what a GPU machine lacks to build coil's
# core (COIL_SERVING=OFF): Abseil's headers and static libraries, nlohmann_json's headers
# and GoogleTest's sources, copied from this machine's Debian packages. The folder travels
# with the working tree; cmake/CoilThirdParty.cmake and the top-level CMakeLists.txt use it
# where find_package finds nothing. Run it here, then tests/device/run.sh there.
#
# The static archives are compiled for x86-64 Linux by GCC 12 against glibc 2.36: they link
# on any x86-64 glibc machine with that glibc or newer and a GCC of that age or newer.
#
# Usage: scripts/device_bundle.sh [DEST]     (default: third_party_local)
set -euo pipefail
cd "$(dirname "$0")/.."
dest=${1:-third_party_local}

absl_include=/usr/include/absl
absl_lib=/usr/lib/x86_64-linux-gnu
nlohmann_include=/usr/include/nlohmann
gtest_src=/usr/src/googletest
for path in "$absl_include/base/config.h" "$nlohmann_include/json.hpp" "$gtest_src/CMakeLists.txt"; do
  if [[ ! -e $path ]]; then
    echo "device_bundle.sh: $path is missing; install libabsl-dev nlohmann-json3-dev googletest (scripts/setup.sh)" >&2
    exit 1
  fi
done
if ! compgen -G "$absl_lib/libabsl_*.a" >/dev/null; then
  echo "device_bundle.sh: no $absl_lib/libabsl_*.a; install libabsl-dev" >&2
  exit 1
fi

rm -rf "$dest/absl" "$dest/nlohmann" "$dest/googletest"
mkdir -p "$dest/absl/include" "$dest/absl/lib" "$dest/nlohmann/include"
# Headers only (Abseil's include tree also holds a few .inc files the headers include).
cp -r "$absl_include" "$dest/absl/include/"
cp "$absl_lib"/libabsl_*.a "$dest/absl/lib/"
cp -r "$nlohmann_include" "$dest/nlohmann/include/"
# GoogleTest and GoogleMock: the sources and CMake files, not their docs, tests or samples.
mkdir -p "$dest/googletest"
cp "$gtest_src/CMakeLists.txt" "$dest/googletest/"
for part in googletest googlemock; do
  mkdir -p "$dest/googletest/$part"
  cp "$gtest_src/$part/CMakeLists.txt" "$dest/googletest/$part/"
  cp -r "$gtest_src/$part/cmake" "$gtest_src/$part/include" "$gtest_src/$part/src" \
    "$dest/googletest/$part/"
done
{
  echo "Copied by scripts/device_bundle.sh on $(date -u +%Y-%m-%dT%H:%MZ) from:"
  dpkg-query -W -f '  ${Package} ${Version}\n' libabsl-dev nlohmann-json3-dev googletest 2>/dev/null || true
} > "$dest/SOURCE.txt"

echo "device_bundle.sh: $dest holds $(du -sh "$dest" | cut -f1) ($(du -sb "$dest" | cut -f1) bytes):"
du -sh "$dest"/*/
