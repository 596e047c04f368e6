#!/usr/bin/env bash
# Starts coil-serve under mpirun, one rank per tensor-parallel shard, with its flags taken
# from COIL_* environment variables (a Kubernetes ConfigMap sets them), and passes
# SIGTERM/SIGINT on to mpirun so that a pod being stopped drains instead of dying:
#
#   signal -> this script -> mpirun -> every rank (rank 0 stops admitting, finishes or
#   cancels in-flight requests within --drain-timeout, sends the shutdown plan) -> exit
#
# When mpirun itself is signalled or a rank dies, it kills the ranks with SIGTERM and then
# SIGKILL odls_base_sigkill_timeout seconds apart (Open MPI's default: 1 s); this script
# raises that timeout above the drain timeout (COIL_MPI_KILL_TIMEOUT, default drain + 5).
# Kubernetes' terminationGracePeriodSeconds must exceed drain + 10 + 2 x that timeout (the
# worst case: a stuck rank; see below).
#
# Environment (unset = coil-serve's default unless a default is given here):
#   COIL_TP_SIZE (1)         ranks, i.e. mpirun -np
#   COIL_MODEL (required)    --model            COIL_TOKENIZER        --tokenizer
#   COIL_HOST (0.0.0.0)      --host             COIL_PORT (50051)     --port
#   COIL_METRICS_PORT (9400) --metrics-port     COIL_DEVICE (cpu)     --device cpu|cuda
#   COIL_STATE_ROWS          --state-rows       COIL_KV_PAGES         --kv-pages
#   COIL_BLOCK_SIZE          --block-size       COIL_MEMORY_BUDGET    --memory-budget
#   COIL_MAX_NUM_SEQS        --max-num-seqs     COIL_MAX_BATCHED_TOKENS --max-batched-tokens
#   COIL_MAX_MODEL_LEN       --max-model-len    COIL_MAX_QUEUE        --max-queue
#   COIL_THREADS             --threads          COIL_DRAIN_TIMEOUT (30) --drain-timeout (seconds)
#   COIL_MPI_KILL_TIMEOUT    odls_base_sigkill_timeout in seconds (default drain timeout + 5)
#   COIL_MPIRUN_ARGS         extra mpirun arguments, split on spaces (default: --bind-to none)
#   COIL_MPIRUN (mpirun), COIL_SERVE (coil-serve)  the programs to run
# Arguments given to this script are appended to coil-serve's flags.
set -euo pipefail

die() {
  echo "coil-entrypoint: $*" >&2
  exit 64
}

# Decimal only: bash arithmetic would read "010" as octal.
is_uint() { [[ "$1" =~ ^(0|[1-9][0-9]*)$ ]]; }

tp_size=${COIL_TP_SIZE:-1}
[[ "$tp_size" =~ ^[1-9][0-9]*$ ]] || die "COIL_TP_SIZE=$tp_size is not a positive integer; set it to the tensor-parallel size (1, 2, ...)"
drain_timeout=${COIL_DRAIN_TIMEOUT:-30}
is_uint "$drain_timeout" || die "COIL_DRAIN_TIMEOUT=$drain_timeout is not a whole number of seconds; set e.g. COIL_DRAIN_TIMEOUT=30"
[[ -n "${COIL_MODEL:-}" ]] || die "COIL_MODEL is not set; set it to the model directory (e.g. /models/mamba2-130m)"
device=${COIL_DEVICE:-cpu}
[[ "$device" == cpu || "$device" == cuda ]] || die "COIL_DEVICE=$device is not cpu or cuda"

kill_timeout=${COIL_MPI_KILL_TIMEOUT:-$((drain_timeout + 5))}
is_uint "$kill_timeout" || die "COIL_MPI_KILL_TIMEOUT=$kill_timeout is not a whole number of seconds; set e.g. COIL_MPI_KILL_TIMEOUT=35"

serve_args=(
  --model "$COIL_MODEL"
  --host "${COIL_HOST:-0.0.0.0}"
  --port "${COIL_PORT:-50051}"
  --metrics-port "${COIL_METRICS_PORT:-9400}"
  --drain-timeout "$drain_timeout"
  --device "$device"
)
add_flag() {  # add_flag FLAG VARIABLE: pass --FLAG "$VARIABLE" when the variable is set
  local value=${!2:-}
  if [[ -n "$value" ]]; then serve_args+=("$1" "$value"); fi
}
add_flag --tokenizer COIL_TOKENIZER
add_flag --state-rows COIL_STATE_ROWS
add_flag --kv-pages COIL_KV_PAGES
add_flag --block-size COIL_BLOCK_SIZE
add_flag --memory-budget COIL_MEMORY_BUDGET
add_flag --max-num-seqs COIL_MAX_NUM_SEQS
add_flag --max-batched-tokens COIL_MAX_BATCHED_TOKENS
add_flag --max-model-len COIL_MAX_MODEL_LEN
add_flag --max-queue COIL_MAX_QUEUE
add_flag --threads COIL_THREADS

mpirun_args=(
  -np "$tp_size"
  # Shared-memory transport without the ptrace-based single copy (CMA), which a container
  # without CAP_SYS_PTRACE refuses.
  --mca btl_vader_single_copy_mechanism none
  --mca odls_base_sigkill_timeout "$kill_timeout"
)
# A pod may run as root (Open MPI refuses that without consent); the images do not.
if [[ $(id -u) -eq 0 ]]; then mpirun_args+=(--allow-run-as-root); fi
read -r -a extra_mpirun_args <<<"${COIL_MPIRUN_ARGS:---bind-to none}"
mpirun_args+=("${extra_mpirun_args[@]}")

echo "coil-entrypoint: ${COIL_MPIRUN:-mpirun} ${mpirun_args[*]} ${COIL_SERVE:-coil-serve} ${serve_args[*]} $*" >&2

# mpirun runs as a child, not exec'd, so that this shell decides where a signal goes.
#
# Where: to the ranks themselves (mpirun's children), not to mpirun. Open MPI 4.1's mpirun,
# when signalled, sends its ranks SIGCONT, sleeps odls_base_sigkill_timeout, sends SIGTERM,
# sleeps it again and sends SIGKILL, whatever the ranks do meanwhile: the ranks would learn
# of the shutdown one timeout late and the pod would always take two timeouts to stop.
# Signalled directly, every rank drains and exits 0, and mpirun then exits 0 by itself.
# If mpirun still runs drain-timeout + 10 s later (a rank stuck), or a second signal
# comes, or no rank has started yet, mpirun gets SIGTERM, and its kill sequence ends the job.
#
# The traps are set before mpirun starts, so a signal that comes early is held and passed
# on once it runs.
child=""
pending=""
signals=0
fallback_after=$((drain_timeout + 10))

children_of() {  # the pids whose parent is $1, from /proc (no procps in the image)
  local stat line fields close=') '
  for stat in /proc/[0-9]*/stat; do
    line=$(<"$stat") 2>/dev/null || continue
    # After "pid (comm) " (comm may hold spaces and parentheses): state ppid ...
    read -r -a fields <<<"${line##*"$close"}"
    if [[ "${fields[1]:-}" == "$1" ]]; then
      stat=${stat#/proc/}
      echo "${stat%/stat}"
    fi
  done
}

# shellcheck disable=SC2317  # called by the traps below
forward() {
  if [[ -z "$child" ]]; then
    pending=$1
    return
  fi
  signals=$((signals + 1))
  local ranks
  ranks=$(children_of "$child" | tr '\n' ' ')
  if ((signals == 1)) && [[ -n "$ranks" ]]; then
    echo "coil-entrypoint: SIG$1: passing it to the ranks (pids ${ranks% }) to drain within ${drain_timeout} s" >&2
    # shellcheck disable=SC2086  # one pid per word
    kill "-$1" $ranks 2>/dev/null || true
    # The fallback: signal mpirun if it outlives the drain (tail --pid ends with mpirun).
    (timeout "$fallback_after" tail --pid="$child" -f /dev/null ||
      { echo "coil-entrypoint: still running ${fallback_after} s after SIG$1: sending SIGTERM to mpirun" >&2
        kill -TERM "$child" 2>/dev/null; }) &
  else
    # SIGTERM whatever came: mpirun, started in the background, may have SIGINT ignored.
    echo "coil-entrypoint: SIG$1: sending SIGTERM to mpirun (pid $child)" >&2
    kill -TERM "$child" 2>/dev/null || true
  fi
}
trap 'forward TERM' TERM
trap 'forward INT' INT

"${COIL_MPIRUN:-mpirun}" "${mpirun_args[@]}" "${COIL_SERVE:-coil-serve}" "${serve_args[@]}" "$@" &
child=$!
if [[ -n "$pending" ]]; then forward "$pending"; fi

# `wait` returns early (status > 128) when a trapped signal arrives; wait again until the
# child itself has ended, and exit with its status.
while :; do
  before=$signals
  status=0
  wait "$child" || status=$?
  ((signals != before)) || break
done
echo "coil-entrypoint: mpirun exited with status $status" >&2
exit "$status"
