#!/usr/bin/env bash
# Prints the Debian/Ubuntu packages that hold the shared libraries the given programs load
# (from ldd and dpkg), one per line, so that an image's runtime stage installs exactly what
# its build stage linked against and nothing of the toolchain.
#
# Usage: runtime-packages.sh PROGRAM...   (files that are not ELF, e.g. scripts, load nothing)
set -euo pipefail

libraries=$(for program in "$@"; do
  [[ "$(head -c 4 "$program")" == $'\x7fELF' ]] || continue
  ldd "$program" | awk '$2 == "=>" && $3 ~ /^\// { print $3 }'
done | sort -u)

# dpkg's database may list a library under /lib or /usr/lib (merged /usr): ask for every
# spelling of every library in one dpkg-query call (each call reads the whole database),
# then take, per library, the first spelling dpkg knows.
declare -A owner_of=()
candidates=()
while read -r library; do
  [[ -n "$library" ]] || continue
  resolved=$(readlink -f "$library")
  candidates+=("$library" "$resolved" "${resolved#/usr}" "/usr${library}")
done <<<"$libraries"
((${#candidates[@]} > 0)) || exit 0
# "package:arch: path" (or "package: path"); paths dpkg does not know only go to stderr.
while IFS= read -r line; do
  path=${line##*: }
  owner=${line%%: *}
  owner_of[$path]=${owner%%:*}
done < <(dpkg-query -S "${candidates[@]}" 2>/dev/null || true)

while read -r library; do
  [[ -n "$library" ]] || continue
  resolved=$(readlink -f "$library")
  for path in "$library" "$resolved" "${resolved#/usr}" "/usr${library}"; do
    if [[ -n "${owner_of[$path]:-}" ]]; then
      echo "${owner_of[$path]}"
      break
    fi
  done
done <<<"$libraries" | sort -u
