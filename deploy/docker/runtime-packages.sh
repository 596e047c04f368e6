#!/usr/bin/env bash
# Prints the Debian/Ubuntu packages that hold the shared libraries the given programs load
# (from ldd and dpkg), one per line, so that an image's runtime stage installs exactly what
# its build stage linked against and nothing of the toolchain.
#
# Usage: runtime-packages.sh PROGRAM...
set -euo pipefail

for program in "$@"; do
  ldd "$program" | awk '$2 == "=>" && $3 ~ /^\// { print $3 }'
done | sort -u | while read -r library; do
  # dpkg's database may list a library under /lib or /usr/lib (merged /usr): try both.
  resolved=$(readlink -f "$library")
  for path in "$library" "$resolved" "${resolved#/usr}" "/usr${library}"; do
    if owner=$(dpkg-query -S "$path" 2>/dev/null); then
      echo "${owner%%:*}"
      break
    fi
  done
done | sort -u
