#!/usr/bin/env bash
# Tests deploy/docker/coil-entrypoint.sh with real processes: the real script, the real
# mpirun where one is named, and signal_recorder standing in for coil-serve (or, in the
# argument test, for mpirun). It tests the script's logic: flags from the environment,
# where signals go, exit statuses. It does not test coil-serve's own drain.
#
# Usage: entrypoint_test.sh ENTRYPOINT SIGNAL_RECORDER
# Each case sets its environment in a subshell of its own, on purpose:
# shellcheck disable=SC2030,SC2031
set -uo pipefail

entrypoint=$1
recorder=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
passes=0

check() {  # check DESCRIPTION COMMAND...
  local begin=$SECONDS
  if "${@:2}"; then
    passes=$((passes + 1))
    echo "ok ($((SECONDS - begin)) s): $1"
  else
    echo "FAIL: $1" >&2
    failures=$((failures + 1))
  fi
}

# Runs the entrypoint in the background with a fresh recorder folder; sets $pid and
# exports RECORDER_DIR. SIGINT is reset to its default first: a background job of this
# non-interactive shell would otherwise start with SIGINT ignored, as no container's PID 1
# does. (Not under `timeout`: it would pass the signal to its whole process group,
# mpirun included.)
start_entrypoint() {
  export RECORDER_DIR="$work/$1"
  mkdir -p "$RECORDER_DIR"
  env --default-signal=INT bash "$entrypoint" >"$RECORDER_DIR/log" 2>&1 &
  pid=$!
}

# Waits for the entrypoint, at most 60 s (then kills it: a broken script must not hang
# the test), and returns its status.
finish() {
  for _ in $(seq 600); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    echo "the entrypoint did not end within 60 s; killing it" >&2
    kill -KILL "$pid"
  fi
  wait "$pid"
}

wait_for_ready() {  # wait_for_ready N: until N recorder processes wait for a signal
  for _ in $(seq 300); do
    local ready=("$RECORDER_DIR"/ready.*)
    [[ -e "${ready[0]}" && ${#ready[@]} -ge $1 ]] && return 0
    sleep 0.05
  done
  echo "recorders not ready; log:" >&2
  cat "$RECORDER_DIR/log" >&2
  return 1
}

count() {  # count KIND: how many recorder files of that kind exist
  local files=("$RECORDER_DIR/$1".*)
  if [[ -e "${files[0]}" ]]; then echo ${#files[@]}; else echo 0; fi
}

# ---- the script itself ----
check "bash -n" bash -n "$entrypoint"
if command -v shellcheck >/dev/null; then
  check "shellcheck" shellcheck "$entrypoint"
else
  echo "FAIL: shellcheck is not installed; run scripts/setup.sh" >&2
  failures=$((failures + 1))
fi

# ---- configuration errors: exit 64 with a message naming the variable ----
expect_usage_error() {  # expect_usage_error VARIABLE ENV...
  local out status=0
  out=$(env -u COIL_MODEL "${@:2}" bash "$entrypoint" 2>&1) || status=$?
  [[ $status -eq 64 && "$out" == *"$1"* ]]
}
check "COIL_MODEL unset" expect_usage_error COIL_MODEL COIL_MPIRUN=/bin/false
check "COIL_TP_SIZE=0" expect_usage_error COIL_TP_SIZE COIL_MODEL=/m COIL_TP_SIZE=0
check "COIL_TP_SIZE=010 (octal-looking)" expect_usage_error COIL_TP_SIZE COIL_MODEL=/m COIL_TP_SIZE=010
check "COIL_DRAIN_TIMEOUT=30s" expect_usage_error COIL_DRAIN_TIMEOUT COIL_MODEL=/m COIL_DRAIN_TIMEOUT=30s
check "COIL_DEVICE=tpu" expect_usage_error COIL_DEVICE COIL_MODEL=/m COIL_DEVICE=tpu

# ---- the mpirun command line, with the recorder as "mpirun" ----
(
  export COIL_MPIRUN=$recorder COIL_TP_SIZE=2 COIL_MODEL=/models/m COIL_TOKENIZER=/models/m/tokenizer.json
  export COIL_PORT=7000 COIL_METRICS_PORT=7001 COIL_STATE_ROWS=64 COIL_KV_PAGES=128 COIL_BLOCK_SIZE=16
  export COIL_MEMORY_BUDGET=8GiB COIL_MAX_NUM_SEQS=32 COIL_MAX_BATCHED_TOKENS=2048
  export COIL_MAX_MODEL_LEN=4096 COIL_MAX_QUEUE=256 COIL_THREADS=4 COIL_DRAIN_TIMEOUT=30
  export COIL_DEVICE=cuda RECORDER_EXIT_CODE=7
  start_entrypoint args
  wait_for_ready 1 || exit 1
  kill -TERM "$pid"
  status=0
  finish || status=$?
  root=()
  [[ $(id -u) -eq 0 ]] && root=(--allow-run-as-root)
  expected=(-np 2 --mca btl_vader_single_copy_mechanism none --mca odls_base_sigkill_timeout 1
    "${root[@]}" --bind-to none coil-serve --model /models/m --host 0.0.0.0 --port 7000
    --metrics-port 7001 --drain-timeout 30 --device cuda --tokenizer /models/m/tokenizer.json
    --state-rows 64 --kv-pages 128 --block-size 16 --memory-budget 8GiB --max-num-seqs 32
    --max-batched-tokens 2048 --max-model-len 4096 --max-queue 256 --threads 4)
  mapfile -t got <"$RECORDER_DIR"/argv.*
  ok=0
  [[ "${got[*]}" == "${expected[*]}" ]] || { echo "argv: ${got[*]}" >&2; ok=1; }
  # No rank had started under this "mpirun": the signal went to it, as SIGTERM.
  [[ $(cat "$RECORDER_DIR"/signal.*) == TERM ]] || ok=1
  [[ $status -eq 7 ]] || { echo "status $status, expected mpirun's 7" >&2; ok=1; }
  exit $ok
)
check "mpirun command line and exit status" test $? -eq 0

# ---- the leader of a multi-host group: hosts from a LeaderWorkerSet's variables ----
check "COIL_ROLE=boss" expect_usage_error COIL_ROLE COIL_MODEL=/m COIL_ROLE=boss
check "leader without hosts" expect_usage_error LWS_LEADER_ADDRESS COIL_MODEL=/m COIL_ROLE=leader
check "leader: TP size and hosts disagree" expect_usage_error "make them agree" COIL_MODEL=/m \
  COIL_ROLE=leader COIL_TP_SIZE=4 COIL_HOSTS=a,b COIL_MPI_LAUNCHER=true
check "leader: a host that is no host name" expect_usage_error "not a host name" COIL_MODEL=/m \
  COIL_ROLE=leader COIL_TP_SIZE=2 "COIL_HOSTS=a,b;reboot" COIL_MPI_LAUNCHER=true
check "worker without keys" expect_usage_error "COIL_SSH_DIR" COIL_ROLE=worker COIL_SSH_DIR=/nonexistent
(
  # LWS names the group's pods <group>, <group>-1, ... in the subdomain of the leader's
  # address (values as LeaderWorkerSet's documentation shows them).
  export COIL_MPIRUN=$recorder COIL_MODEL=/m COIL_ROLE=leader COIL_TP_SIZE=6 COIL_RANKS_PER_HOST=2
  export LWS_LEADER_ADDRESS=coil-0.coil.serving LWS_GROUP_SIZE=3 COIL_MPI_LAUNCHER=/bin/launch
  export TMPDIR=$work/leader-tmp
  mkdir -p "$TMPDIR"
  start_entrypoint leader
  wait_for_ready 1 || exit 1
  kill -TERM "$pid"
  finish || true
  mapfile -t got <"$RECORDER_DIR"/argv.*
  ok=0
  [[ " ${got[*]} " == *" -np 6 "* ]] || { echo "argv: ${got[*]}" >&2; ok=1; }
  [[ " ${got[*]} " == *" --hostfile $TMPDIR/coil-hostfile --mca plm_rsh_agent /bin/launch "* ]] ||
    { echo "argv: ${got[*]}" >&2; ok=1; }
  expected=$'coil-0 slots=2\ncoil-0-1.coil.serving slots=2\ncoil-0-2.coil.serving slots=2'
  [[ "$(cat "$TMPDIR/coil-hostfile")" == "$expected" ]] || { cat "$TMPDIR/coil-hostfile" >&2; ok=1; }
  exit $ok
)
check "leader: hostfile from LWS_LEADER_ADDRESS and LWS_GROUP_SIZE, the launcher" test $? -eq 0

# ---- real mpirun, two ranks: a signal reaches every rank once, they drain, exit 0 ----
drain_under_mpirun() (  # drain_under_mpirun SIGNAL; a subshell keeps its environment
  # A long kill timeout, so that a signal that reached the ranks through mpirun's kill
  # sequence instead of directly would arrive too late for the time limit below.
  export COIL_TP_SIZE=2 COIL_MODEL=/m COIL_SERVE=$recorder COIL_DRAIN_TIMEOUT=20
  export COIL_MPI_KILL_TIMEOUT=25 RECORDER_DRAIN_MS=1500
  start_entrypoint "real-$1"
  wait_for_ready 2 || return 1
  local begin=$SECONDS status=0
  kill "-$1" "$pid"
  finish || status=$?
  local took=$((SECONDS - begin)) ok=0
  [[ $status -eq 0 ]] || { echo "SIG$1: status $status" >&2; ok=1; }
  [[ $(count signal) -eq 2 && $(count drained) -eq 2 ]] || { echo "SIG$1: not every rank drained" >&2; ok=1; }
  [[ $(cat "$RECORDER_DIR"/signal.* | tr -d '\n') == "$1$1" ]] || ok=1
  # Well before mpirun's own kill sequence (2 x 25 s) could have ended it.
  ((took < 10)) || { echo "SIG$1: took $took s" >&2; ok=1; }
  ((ok == 0)) || cat "$RECORDER_DIR/log" >&2
  return $ok
)
if command -v mpirun >/dev/null; then
  check "SIGTERM drains both ranks under mpirun" drain_under_mpirun TERM
  check "SIGINT drains both ranks under mpirun" drain_under_mpirun INT

  # A rank that never finishes draining: after drain-timeout + 10 s mpirun gets SIGTERM
  # and its kill sequence (1 s apart here) ends the job with a failure status.
  stuck_rank() (
    export COIL_TP_SIZE=2 COIL_MODEL=/m COIL_SERVE=$recorder COIL_DRAIN_TIMEOUT=0
    export COIL_MPI_KILL_TIMEOUT=1 RECORDER_DRAIN_MS=60000
    start_entrypoint stuck
    wait_for_ready 2 || return 1
    local begin=$SECONDS status=0
    kill -TERM "$pid"
    finish || status=$?
    local took=$((SECONDS - begin)) ok=0
    [[ $status -ne 0 && $status -ne 137 ]] || { echo "stuck: status $status" >&2; ok=1; }
    [[ $(count drained) -eq 0 ]] || ok=1
    ((took >= 9 && took < 30)) || { echo "stuck: took $took s" >&2; ok=1; }
    grep -q "sending SIGTERM to mpirun" "$RECORDER_DIR/log" || ok=1
    ((ok == 0)) || cat "$RECORDER_DIR/log" >&2
    return $ok
  )
  check "a stuck rank is ended through mpirun" stuck_rank

  # Ranks that exit by themselves (no signal): the script ends with mpirun's status. After
  # a failed rank mpirun runs its kill sequence (two kill timeouts, 1 s each here).
  ranks_exit() (
    export COIL_TP_SIZE=2 COIL_MODEL=/m COIL_SERVE=$recorder RECORDER_WAIT_MS=300
    export COIL_MPI_KILL_TIMEOUT=1
    start_entrypoint exit
    local status=0
    finish || status=$?
    # The ranks exit 3 without a signal; mpirun reports the failure (not a kill by finish).
    [[ $status -ne 0 && $status -ne 137 ]]
  )
  check "a failing job's status is passed on" ranks_exit
else
  echo "FAIL: mpirun is not installed; run scripts/setup.sh" >&2
  failures=$((failures + 1))
fi

# A leader's mpirun after a lost rank: its ranks here have exited (status 3), but it
# lingers while the remote daemons run their kill sequences. The entrypoint ends it 2 s
# after the last rank and exits with status 3, within 5 s.
lost_job() (
  cat >"$work/lingering-mpirun" <<'EOF2'
#!/usr/bin/env bash
OMPI_COMM_WORLD_RANK=0 bash -c 'sleep 0.5; exit 3' &
wait $!
exec sleep 60
EOF2
  chmod +x "$work/lingering-mpirun"
  export COIL_MPIRUN=$work/lingering-mpirun COIL_TP_SIZE=1 COIL_MODEL=/m
  start_entrypoint lost
  local begin=$SECONDS status=0
  finish || status=$?
  if ((status != 3 || SECONDS - begin >= 5)) || ! grep -q "the job lost a rank" "$RECORDER_DIR/log"; then
    echo "status $status after $((SECONDS - begin)) s; log:" >&2
    cat "$RECORDER_DIR/log" >&2
    return 1
  fi
)
check "a lost job's lingering mpirun is ended" lost_job

echo "entrypoint_test: $passes passed, $failures failed"
((failures == 0))
