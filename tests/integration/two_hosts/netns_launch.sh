#!/usr/bin/env bash
# Open MPI's remote launcher (plm_rsh_agent) for "hosts" that are network namespaces of this
# machine: runs a command on HOST as ssh would, by entering the namespace that HOST names
# or that holds HOST's address. mpirun calls it as `netns_launch.sh HOST COMMAND...` to
# start its daemon (orted) there; the daemon then reaches mpirun, and the ranks each other,
# over TCP on the namespaces' own addresses.
#
# Usage: mpirun --hostfile HOSTS --mca plm_rsh_agent netns_launch.sh ...
#   NETNS_LAUNCH_NAMESPACES  the namespaces to look in, space-separated (default: all); an
#                            address that more than one of them holds is an error
set -euo pipefail

if (($# < 2)); then
  echo "usage: netns_launch.sh HOST COMMAND..." >&2
  exit 2
fi
host=$1
shift
namespaces=${NETNS_LAUNCH_NAMESPACES:-$(ip netns list | awk '{print $1}')}
holders=()
if grep -qxF -- "$host" <<<"${namespaces// /$'\n'}"; then
  holders=("$host")
else
  for candidate in $namespaces; do
    if ip -n "$candidate" -o addr show | awk '{sub(/\/.*/, "", $4); print $4}' | grep -qxF -- "$host"; then
      holders+=("$candidate")
    fi
  done
fi
# 255: what ssh returns when it cannot reach the host.
if ((${#holders[@]} == 0)); then
  echo "netns_launch.sh: no network namespace is named $host or holds that address" >&2
  exit 255
elif ((${#holders[@]} > 1)); then
  echo "netns_launch.sh: namespaces ${holders[*]} all hold $host; name the namespaces to use in NETNS_LAUNCH_NAMESPACES" >&2
  exit 255
fi
namespace=${holders[0]}
# As sshd does: the words joined into one command line for the shell.
exec ip netns exec "$namespace" /bin/sh -c "$*"
