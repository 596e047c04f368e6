#!/usr/bin/env bash
# coil-serve at TP2 across two hosts: two network namespaces of this machine joined by a
# veth pair, one rank in each, Open MPI over TCP between them (a hostfile, and
# netns_launch.sh as mpirun's remote launcher in place of ssh), started by the container
# entrypoint in its leader role as a multi-host deployment starts it.
#
# Checks, against TP2 with both ranks on one host (shared memory), the same model and the
# same requests: every request gives the same tokens (greedy and sampled with a seed; the
# expected tokens are the one-host run's, which the TP tests check against TP1), each rank
# runs in its own namespace, health answers SERVING, and SIGTERM to the entrypoint drains
# the group and ends it with status 0. Then rank 1, in the other host, and (in a second
# group) rank 0 are killed with SIGKILL: the leader's entrypoint (its container) must end
# within 5 s with a non-zero status, rank 0 having logged rank 1's death (noticed through
# its closed monitor connection). It prints what one engine step took on each
# transport (coil_step_duration_seconds from /metrics: sum / count), which it does not
# judge: docs/PERFORMANCE.md has the measured figures and their command.
#
# Needs root (ip netns); without it, or where the sandbox forbids network namespaces, it
# exits 77 (ctest: skipped) saying so. Deletes its namespaces whatever happens.
#
# Usage: two_hosts_test.sh --serve PATH --cli PATH --make-model PATH [--shape tiny]
#          [--dtype f32] [--requests 4] [--max-tokens 16] [--prompt-tokens 8] [--threads 1]
#          [--comm-bench PATH]
# --comm-bench also runs that comm_bench (tests/bench) on both placements, for the
# all-reduce and plan-broadcast times over shared memory and over TCP between the hosts.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
entrypoint=$here/../../../deploy/docker/coil-entrypoint.sh
launcher=$here/netns_launch.sh
serve="" cli="" make_model="" comm_bench=""
shape=tiny dtype=f32 requests=4 max_tokens=16 prompt_tokens=8 threads=1
while (($#)); do
  case "$1" in
    --serve) serve=$2; shift 2 ;;
    --cli) cli=$2; shift 2 ;;
    --make-model) make_model=$2; shift 2 ;;
    --shape) shape=$2; shift 2 ;;
    --dtype) dtype=$2; shift 2 ;;
    --requests) requests=$2; shift 2 ;;
    --max-tokens) max_tokens=$2; shift 2 ;;
    --prompt-tokens) prompt_tokens=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --comm-bench) comm_bench=$2; shift 2 ;;
    *) echo "two_hosts_test: unknown argument $1" >&2; exit 2 ;;
  esac
done
for program in "$serve" "$cli" "$make_model"; do
  [[ -x "$program" ]] || { echo "two_hosts_test: give --serve, --cli and --make-model (programs)" >&2; exit 2; }
done
log() { echo "two_hosts_test: $*"; }
fail() { echo "two_hosts_test: FAIL: $*" >&2; exit 1; }

# ---- the hosts: two namespaces, a veth pair, 198.18.0.0/24 (the range set aside for
# network benchmarks, RFC 2544) on the link only, no route anywhere else ----
host_a=coil-$$-a host_b=coil-$$-b
addr_a=198.18.0.1 addr_b=198.18.0.2
work=$(mktemp -d)
cleanup() {
  local ns pid
  for ns in "$host_a" "$host_b"; do
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null || true; done
    ip netns del "$ns" 2>/dev/null || true
  done
  rm -rf "$work"
}
trap cleanup EXIT
# Namespaces left by a run that was killed before its cleanup (its pid is gone).
for ns in $(ip netns list 2>/dev/null | awk '$1 ~ /^coil-[0-9]+-[ab]$/ {print $1}'); do
  owner=${ns#coil-}
  kill -0 "${owner%-*}" 2>/dev/null || ip netns del "$ns" 2>/dev/null || true
done
if ! error=$(ip netns add "$host_a" 2>&1); then
  log "SKIP: cannot create a network namespace here (ip netns add: $error); the test needs root with CAP_SYS_ADMIN and CAP_NET_ADMIN"
  exit 77
fi
ip netns add "$host_b"
ip link add "cl$$a" type veth peer name "cl$$b"
ip link set "cl$$a" netns "$host_a"
ip link set "cl$$b" netns "$host_b"
ip -n "$host_a" addr add "$addr_a/24" dev "cl$$a"
ip -n "$host_b" addr add "$addr_b/24" dev "cl$$b"
for ns in "$host_a" "$host_b"; do
  ip -n "$ns" link set lo up
done
ip -n "$host_a" link set "cl$$a" up
ip -n "$host_b" link set "cl$$b" up
log "hosts: $host_a ($addr_a) and $host_b ($addr_b)"

if [[ $(id -u) -eq 0 ]]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
in_a() { ip netns exec "$host_a" "$@"; }

"$make_model" --shape "$shape" --dtype "$dtype" --out "$work/model" >"$work/make_model.log" 2>&1 ||
  { cat "$work/make_model.log" >&2; fail "coil-make-model failed"; }

# The prompts: token ids from a fixed generator, below the tiny shape's 250-token vocabulary.
prompt() {  # prompt N: request N's ids
  local i ids=""
  for ((i = 0; i < prompt_tokens; i++)); do ids+="${ids:+,}$(((($1 + 1) * 37 + i * 11) % 240 + 5))"; done
  echo "$ids"
}

server_pid=""
start() {  # start NAME ENV...: the entrypoint in host A with the given settings
  local name=$1
  shift
  rm -f "$work/$name.port"
  # Not through in_a: $server_pid must be the entrypoint itself, not a subshell.
  ip netns exec "$host_a" env COIL_MODEL="$work/model" COIL_HOST=127.0.0.1 COIL_METRICS_HOST=127.0.0.1 \
    COIL_PORT=0 COIL_METRICS_PORT=0 \
    COIL_THREADS="$threads" COIL_DRAIN_TIMEOUT=10 COIL_SERVE="$serve" TMPDIR="$work" "$@" \
    bash "$entrypoint" --port-file "$work/$name.port" >"$work/$name.log" 2>&1 &
  server_pid=$!
  for _ in $(seq 600); do
    [[ -s "$work/$name.port" && $(wc -l <"$work/$name.port") -ge 2 ]] && break
    kill -0 "$server_pid" 2>/dev/null || { cat "$work/$name.log" >&2; fail "$name: the server exited while starting"; }
    sleep 0.1
  done
  [[ -s "$work/$name.port" ]] || { cat "$work/$name.log" >&2; fail "$name: no port file after 60 s"; }
  port=$(sed -n 1p "$work/$name.port")
  metrics_port=$(sed -n 2p "$work/$name.port")
  in_a "$cli" --target "127.0.0.1:$port" info >"$work/$name.info" 2>&1 ||
    { cat "$work/$name.info" "$work/$name.log" >&2; fail "$name: health is not SERVING"; }
}

generate_all() {  # generate_all NAME: every request, one line of ids each
  local r
  for ((r = 0; r < requests; r++)); do
    # Even requests greedy, odd ones sampled (temperature 1, the request's seed).
    local sampling=(--temperature 0)
    ((r % 2)) && sampling=(--temperature 1 --seed "$((r + 1))")
    in_a "$cli" --target "127.0.0.1:$port" generate --ids "$(prompt "$r")" --max-tokens "$max_tokens" \
      --ignore-eos "${sampling[@]}" --print-ids 2>>"$work/$1.cli" ||
      { cat "$work/$1.cli" >&2; fail "$1: request $r failed"; }
  done >"$work/$1.tokens"
}

step_time() {  # step_time: mean engine step in ms and the step count, from /metrics
  local text sum count
  text=$(in_a bash -c "exec 3<>/dev/tcp/127.0.0.1/$metrics_port; printf 'GET /metrics HTTP/1.0\r\n\r\n' >&3; cat <&3")
  sum=$(awk '$1 == "coil_step_duration_seconds_sum" {print $2}' <<<"$text")
  count=$(awk '$1 == "coil_step_duration_seconds_count" {print $2}' <<<"$text")
  awk -v s="$sum" -v c="$count" 'BEGIN { if (c > 0) printf "%.3f ms over %d steps", 1000 * s / c, c; else print "no steps" }'
}

stop() {  # stop NAME: SIGTERM to the entrypoint, as the kubelet sends it; status 0 expected
  local status=0
  kill -TERM "$server_pid"
  for _ in $(seq 600); do kill -0 "$server_pid" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$server_pid" 2>/dev/null && { cat "$work/$1.log" >&2; fail "$1: still running 60 s after SIGTERM"; }
  wait "$server_pid" || status=$?
  ((status == 0)) || { cat "$work/$1.log" >&2; fail "$1: exited with status $status after SIGTERM"; }
}

# ---- one host: both ranks in host A, shared memory between them ----
start one_host COIL_TP_SIZE=2
generate_all one_host
one_host_step=$(step_time)
stop one_host
log "TP2 on one host (shared memory): $requests requests served; step $one_host_step"

# ---- two hosts: the leader in A runs rank 0 and reaches B through the launcher; TCP only
# (btl tcp,self: no shared-memory transport allowed), on the fixed port ranges
# deploy/README.md gives for firewalls ----
tcp_args="--bind-to none --mca btl tcp,self --mca oob_tcp_static_ipv4_ports 30000-30010"
tcp_args+=" --mca btl_tcp_port_min_v4 30100 --mca btl_tcp_port_range_v4 100"
start two_hosts COIL_TP_SIZE=2 COIL_ROLE=leader COIL_HOSTS="$addr_a,$addr_b" \
  COIL_MPI_LAUNCHER="$launcher" COIL_MPIRUN_ARGS="$tcp_args" \
  NETNS_LAUNCH_NAMESPACES="$host_a $host_b"
declare -A where=()
for pid in $(ip netns pids "$host_a") $(ip netns pids "$host_b"); do
  if [[ "$(readlink -f "/proc/$pid/exe" 2>/dev/null)" == "$(readlink -f "$serve")" ]]; then
    rank=$(tr '\0' '\n' <"/proc/$pid/environ" | sed -n 's/^OMPI_COMM_WORLD_RANK=//p')
    where[$rank]=$(ip netns identify "$pid")
  fi
done
[[ "${where[0]:-}" == "$host_a" && "${where[1]:-}" == "$host_b" ]] ||
  fail "expected rank 0 in $host_a and rank 1 in $host_b; found rank 0 in '${where[0]:-}', rank 1 in '${where[1]:-}'"
log "rank 0 runs in $host_a, rank 1 in $host_b"
# Every TCP connection between the hosts (B's loopback ones are within host B) uses a port
# of those ranges on one side.
connections=$(ip netns exec "$host_b" ss -Htn state established | awk -v a="$addr_a" '$4 ~ "^" a ":" {print $3 " " $4}')
in_range() { (($1 >= 30000 && $1 <= 30010)) || (($1 >= 30100 && $1 < 30200)); }
while read -r local_end remote_end; do
  [[ -n "$local_end" ]] || continue
  in_range "${local_end##*:}" || in_range "${remote_end##*:}" ||
    fail "a connection between the hosts outside the fixed port ranges: $local_end - $remote_end"
done <<<"$connections"
[[ -n "$connections" ]] || fail "no TCP connection between $host_b and $host_a"
log "host B's connections, all on the fixed port ranges: $(tr '\n' ';' <<<"$connections")"
generate_all two_hosts
two_hosts_step=$(step_time)
stop two_hosts
log "TP2 on two hosts (TCP): $requests requests served; step $two_hosts_step"

if ! diff "$work/one_host.tokens" "$work/two_hosts.tokens" >"$work/diff"; then
  cat "$work/diff" >&2
  fail "the two-host tokens differ from the one-host tokens (above: < one host, > two hosts)"
fi
[[ $(grep -c . "$work/two_hosts.tokens") -eq $requests ]] || fail "expected $requests lines of tokens"
log "every request gave the same $max_tokens tokens on both; both drained on SIGTERM with status 0"

# ---- two hosts, a rank killed: the group ends within 5 s, non-zero ----
kill_rank() {  # kill_rank NAME RANK NAMESPACE: start the group, SIGKILL RANK there, judge
  local name=$1 rank=$2 ns=$3 victim="" pid killed_at ended_ms status=0
  start "$name" COIL_TP_SIZE=2 COIL_ROLE=leader COIL_HOSTS="$addr_a,$addr_b" \
    COIL_MPI_LAUNCHER="$launcher" COIL_MPIRUN_ARGS="$tcp_args" \
    NETNS_LAUNCH_NAMESPACES="$host_a $host_b"
  for pid in $(ip netns pids "$ns"); do
    if [[ "$(readlink -f "/proc/$pid/exe" 2>/dev/null)" == "$(readlink -f "$serve")" ]]; then
      victim=$pid
    fi
  done
  [[ -n "$victim" ]] || fail "$name: no coil-serve rank in $ns"
  killed_at=$(date +%s%N)
  kill -KILL "$victim"
  for _ in $(seq 1500); do kill -0 "$server_pid" 2>/dev/null || break; sleep 0.02; done
  ended_ms=$((($(date +%s%N) - killed_at) / 1000000))
  kill -0 "$server_pid" 2>/dev/null && { cat "$work/$name.log" >&2; fail "$name: still running 30 s after rank $rank was killed"; }
  wait "$server_pid" || status=$?
  ((status != 0)) || { cat "$work/$name.log" >&2; fail "$name: exited with status 0 after rank $rank was killed"; }
  ((ended_ms < 5000)) || { cat "$work/$name.log" >&2; fail "$name: ended ${ended_ms} ms after rank $rank was killed, not within 5 s"; }
  if ((rank == 1)); then
    grep -q "rank 1 died" "$work/$name.log" || { cat "$work/$name.log" >&2; fail "$name: rank 0 did not log rank 1's death"; }
  fi
  log "TP2 on two hosts, rank $rank killed: the leader's entrypoint exited with status $status ${ended_ms} ms later"
}
kill_rank two_hosts_kill1 1 "$host_b"
kill_rank two_hosts_kill0 0 "$host_a"

if [[ -n "$comm_bench" ]]; then
  filter='AllReduce/native/|PlanLatency/backoff/0/'
  log "comm_bench, one host (shared memory):"
  in_a mpirun -np 2 --bind-to none "$comm_bench" --benchmark_filter="$filter" --benchmark_color=false
  printf '%s slots=1\n' "$addr_a" "$addr_b" >"$work/hostfile"
  log "comm_bench, two hosts (TCP):"
  # shellcheck disable=SC2086  # tcp_args: one flag per word
  in_a env NETNS_LAUNCH_NAMESPACES="$host_a $host_b" mpirun -np 2 --hostfile "$work/hostfile" \
    --mca plm_rsh_agent "$launcher" $tcp_args "$comm_bench" --benchmark_filter="$filter" \
    --benchmark_color=false
fi
log "step time: shared memory $one_host_step; TCP between hosts $two_hosts_step"
echo "two_hosts_test: 1 passed, 0 failed"
