#!/usr/bin/env bash
# Starts coil-serve under mpirun, one rank per tensor-parallel shard, with its flags taken
# from COIL_* environment variables (a Kubernetes ConfigMap sets them), and passes
# SIGTERM/SIGINT on to the ranks so that a pod being stopped drains instead of dying:
#
#   signal -> this script -> the ranks (rank 0 stops admitting, finishes or cancels
#   in-flight requests within --drain-timeout, sends the shutdown plan) -> mpirun exits 0
#
# mpirun's own kill sequence (SIGCONT, a sleep of odls_base_sigkill_timeout, SIGTERM, the
# same sleep, SIGKILL) runs only once the job is over or stuck: after a rank ended
# abnormally (the job is lost), after the fallback below (drain + 10 s have passed), or on
# a second signal (stop now). mpirun exits only after it, so the timeout is short
# (COIL_MPI_KILL_TIMEOUT, default 1 s): a rank that dies is noticed by coil within 2 s,
# every rank exits with status 3, and mpirun, hence this script and the container, exits
# non-zero within 5 s of the death (docs/deployment.md has the times measured), so that the
# restart policy applies. Kubernetes' terminationGracePeriodSeconds must exceed drain + 10
# + 2 x that timeout (the worst case: a stuck rank; see below).
#
# Roles (COIL_ROLE): `server` (the default) runs every rank in this container. A TP group
# that spans hosts (pods) has one `leader`, which runs mpirun with a hostfile naming itself
# and the others and serves gRPC from rank 0, and `worker`s, which start no rank by
# themselves: each runs an SSH daemon through which the leader's mpirun starts Open MPI's
# daemon and the worker's ranks there (Open MPI's own remote launch, over SSH). The
# leader's hosts come from COIL_HOSTS, or from the variables a Kubernetes LeaderWorkerSet
# gives every pod of a group (LWS_LEADER_ADDRESS, LWS_GROUP_SIZE; see deploy/README.md).
#
# Environment (unset = coil-serve's default unless a default is given here):
#   COIL_TP_SIZE (1)         ranks, i.e. mpirun -np
#   COIL_MODEL (required)    --model            COIL_TOKENIZER        --tokenizer
#   COIL_HOST (0.0.0.0)      --host             COIL_PORT (50051)     --port
#   COIL_METRICS_PORT (9400) --metrics-port     COIL_DEVICE (cpu)     --device cpu|cuda
#   COIL_METRICS_HOST        --metrics-host (coil-serve's default is loopback; the images
#                            and manifests set 0.0.0.0 so that Prometheus can scrape)
#   COIL_RANK_TIMEOUT        --rank-timeout     COIL_MAX_CONNECTIONS  --max-connections
#   COIL_STATE_ROWS          --state-rows       COIL_KV_PAGES         --kv-pages
#   COIL_BLOCK_SIZE          --block-size       COIL_MEMORY_BUDGET    --memory-budget
#   COIL_MAX_NUM_SEQS        --max-num-seqs     COIL_MAX_BATCHED_TOKENS --max-batched-tokens
#   COIL_MAX_MODEL_LEN       --max-model-len    COIL_MAX_QUEUE        --max-queue
#   COIL_THREADS             --threads          COIL_DRAIN_TIMEOUT (30) --drain-timeout (seconds)
#   COIL_MPI_KILL_TIMEOUT (1) odls_base_sigkill_timeout in seconds
#   COIL_MPIRUN_ARGS         extra mpirun arguments, split on spaces (default: --bind-to none)
#   COIL_MPIRUN (mpirun), COIL_SERVE (coil-serve)  the programs to run
# Across hosts:
#   COIL_ROLE (server)       server, leader or worker
#   COIL_HOSTS               leader: the hosts, comma-separated, this one first (default:
#                            from LWS_LEADER_ADDRESS and LWS_GROUP_SIZE)
#   COIL_RANKS_PER_HOST (1)  leader: ranks on each host; COIL_TP_SIZE must equal
#                            hosts x ranks per host
#   COIL_MPI_LAUNCHER        leader: Open MPI's plm_rsh_agent, the command that runs a
#                            command on a host (default: ssh with the group's key)
#   COIL_SSH_DIR (/etc/coil/ssh)  leader and workers: the group's key pair (id_ed25519,
#                            id_ed25519.pub): the leader logs in with it, the workers accept
#                            it and present it as their host key
#   COIL_SSH_PORT (2222)     the workers' SSH port
#   COIL_WORKER_WAIT (600)   leader: seconds to wait for every worker's SSH port
# Arguments given to this script are appended to coil-serve's flags.
set -euo pipefail

die() {
  echo "coil-entrypoint: $*" >&2
  exit 64
}

# Decimal only: bash arithmetic would read "010" as octal.
is_uint() { [[ "$1" =~ ^(0|[1-9][0-9]*)$ ]]; }

children_of() {  # the pids whose parent is $1, from /proc (no procps in the image)
  local stat line fields close=') '
  for stat in /proc/[0-9]*/stat; do
    { line=$(<"$stat"); } 2>/dev/null || continue  # a process that has just ended
    # After "pid (comm) " (comm may hold spaces and parentheses): state ppid ...
    read -r -a fields <<<"${line##*"$close"}"
    if [[ "${fields[1]:-}" == "$1" ]]; then
      stat=${stat#/proc/}
      echo "${stat%/stat}"
    fi
  done
}

role=${COIL_ROLE:-server}
[[ "$role" == server || "$role" == leader || "$role" == worker ]] ||
  die "COIL_ROLE=$role is not server, leader or worker"
ssh_dir=${COIL_SSH_DIR:-/etc/coil/ssh}
ssh_port=${COIL_SSH_PORT:-2222}
is_uint "$ssh_port" || die "COIL_SSH_PORT=$ssh_port is not a port number"
# Private copies of the group's keys with the modes ssh and sshd insist on (a mounted
# Secret's files are group-readable under an fsGroup), in a directory only this user reads.
ssh_home=${TMPDIR:-/tmp}/coil-ssh

copy_ssh_keys() {
  local file
  for file in id_ed25519 id_ed25519.pub; do
    [[ -r "$ssh_dir/$file" ]] ||
      die "$ssh_dir/$file is missing or unreadable; mount the group's key pair there (COIL_SSH_DIR; see deploy/README.md)"
  done
  rm -rf "$ssh_home"
  mkdir -m 700 "$ssh_home"
  install -m 600 "$ssh_dir/id_ed25519" "$ssh_home/id_ed25519"
  install -m 644 "$ssh_dir/id_ed25519.pub" "$ssh_home/id_ed25519.pub"
}

# worker: an SSH daemon that accepts the group's key (and presents it as its host key, so
# the leader can tell a member of its group from anything else at that address) and lets
# the leader's mpirun start Open MPI's daemon here. It runs as this user on an
# unprivileged port until SIGTERM or SIGINT. Its sessions end when mpirun's connection
# does: a leader that stops takes the worker's ranks with it.
if [[ "$role" == worker ]]; then
  copy_ssh_keys
  cp "$ssh_home/id_ed25519.pub" "$ssh_home/authorized_keys"
  printf '%s\n' "Port $ssh_port" "HostKey $ssh_home/id_ed25519" \
    "AuthorizedKeysFile $ssh_home/authorized_keys" "PidFile $ssh_home/sshd.pid" \
    "AllowUsers $(id -un)" "PubkeyAuthentication yes" "PasswordAuthentication no" \
    "KbdInteractiveAuthentication no" "PermitRootLogin no" "UsePAM no" "StrictModes no" \
    "AllowTcpForwarding no" "X11Forwarding no" "PermitUserEnvironment no" "PrintMotd no" \
    "LogLevel ERROR" >"$ssh_home/sshd_config"
  sshd=$(command -v sshd || echo /usr/sbin/sshd)
  echo "coil-entrypoint: worker: $sshd on port $ssh_port for the leader's mpirun" >&2
  "$sshd" -D -e -f "$ssh_home/sshd_config" &
  sshd_pid=$!
  # On SIGTERM the whole group is being stopped (a LeaderWorkerSet stops its pods
  # together): the ranks here must outlive the leader's drain, so wait until the leader's
  # session has ended (sshd has no child left: mpirun closed it after the last rank
  # exited), at most the drain timeout + 10 s, then stop sshd.
  is_uint "${COIL_DRAIN_TIMEOUT:-30}" || die "COIL_DRAIN_TIMEOUT=$COIL_DRAIN_TIMEOUT is not a whole number of seconds"
  worker_grace=$((${COIL_DRAIN_TIMEOUT:-30} + 10))
  # shellcheck disable=SC2317  # called by the traps below
  stop_worker() {
    echo "coil-entrypoint: worker: SIG$1: waiting up to ${worker_grace} s for the leader's session to end" >&2
    local deadline=$((SECONDS + worker_grace))
    while [[ -n "$(children_of "$sshd_pid")" ]] && ((SECONDS < deadline)); do sleep 0.5; done
    kill -TERM "$sshd_pid" 2>/dev/null
    wait "$sshd_pid"
    exit 0
  }
  trap 'stop_worker TERM' TERM
  trap 'stop_worker INT' INT
  status=0
  wait "$sshd_pid" || status=$?
  echo "coil-entrypoint: worker: sshd exited with status $status" >&2
  exit "$status"
fi

tp_size=${COIL_TP_SIZE:-1}
[[ "$tp_size" =~ ^[1-9][0-9]*$ ]] || die "COIL_TP_SIZE=$tp_size is not a positive integer; set it to the tensor-parallel size (1, 2, ...)"
drain_timeout=${COIL_DRAIN_TIMEOUT:-30}
is_uint "$drain_timeout" || die "COIL_DRAIN_TIMEOUT=$drain_timeout is not a whole number of seconds; set e.g. COIL_DRAIN_TIMEOUT=30"
[[ -n "${COIL_MODEL:-}" ]] || die "COIL_MODEL is not set; set it to the model directory (e.g. /models/mamba2-130m)"
device=${COIL_DEVICE:-cpu}
[[ "$device" == cpu || "$device" == cuda ]] || die "COIL_DEVICE=$device is not cpu or cuda"

kill_timeout=${COIL_MPI_KILL_TIMEOUT:-1}
is_uint "$kill_timeout" || die "COIL_MPI_KILL_TIMEOUT=$kill_timeout is not a whole number of seconds; set e.g. COIL_MPI_KILL_TIMEOUT=1"

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
add_flag --metrics-host COIL_METRICS_HOST
add_flag --rank-timeout COIL_RANK_TIMEOUT
add_flag --max-connections COIL_MAX_CONNECTIONS

# leader: the hostfile, the launcher and, with the default launcher, the wait for the
# workers' SSH daemons (a LeaderWorkerSet starts the group's pods together).
leader_setup() {
  local hosts_list=${COIL_HOSTS:-}
  local ranks_per_host=${COIL_RANKS_PER_HOST:-1}
  [[ "$ranks_per_host" =~ ^[1-9][0-9]*$ ]] ||
    die "COIL_RANKS_PER_HOST=$ranks_per_host is not a positive integer"
  if [[ -z "$hosts_list" ]]; then
    # LeaderWorkerSet: the leader is <group>.<subdomain>..., worker i is <group>-<i>.<subdomain>...
    [[ -n "${LWS_LEADER_ADDRESS:-}" && -n "${LWS_GROUP_SIZE:-}" ]] ||
      die "COIL_ROLE=leader needs COIL_HOSTS (the hosts, comma-separated, this one first) or a LeaderWorkerSet's LWS_LEADER_ADDRESS and LWS_GROUP_SIZE"
    [[ "$LWS_GROUP_SIZE" =~ ^[1-9][0-9]*$ ]] || die "LWS_GROUP_SIZE=$LWS_GROUP_SIZE is not a positive integer"
    local leader_pod=${LWS_LEADER_ADDRESS%%.*} domain="" i
    [[ "$LWS_LEADER_ADDRESS" == *.* ]] && domain=.${LWS_LEADER_ADDRESS#*.}
    # The leader by its own name (its hostname in the pod), which mpirun knows for itself.
    hosts_list=$leader_pod
    for ((i = 1; i < LWS_GROUP_SIZE; i++)); do hosts_list+=",$leader_pod-$i$domain"; done
  fi
  local hosts host
  IFS=, read -r -a hosts <<<"$hosts_list"
  ((${#hosts[@]} * ranks_per_host == tp_size)) ||
    die "COIL_TP_SIZE=$tp_size, but ${#hosts[@]} hosts ($hosts_list) x COIL_RANKS_PER_HOST=$ranks_per_host = $((${#hosts[@]} * ranks_per_host)) ranks; make them agree"
  local hostfile=${TMPDIR:-/tmp}/coil-hostfile
  : >"$hostfile"
  for host in "${hosts[@]}"; do
    [[ "$host" =~ ^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?$ ]] ||
      die "'$host' in COIL_HOSTS=$hosts_list is not a host name"
    echo "$host slots=$ranks_per_host" >>"$hostfile"
  done
  local launcher=${COIL_MPI_LAUNCHER:-}
  if [[ -z "$launcher" ]]; then
    copy_ssh_keys
    # Known hosts: any name that presents the group's key.
    echo "* $(cut -d' ' -f1,2 "$ssh_home/id_ed25519.pub")" >"$ssh_home/known_hosts"
    launcher="ssh -p $ssh_port -i $ssh_home/id_ed25519 -o IdentitiesOnly=yes -o BatchMode=yes"
    launcher+=" -o UserKnownHostsFile=$ssh_home/known_hosts -o StrictHostKeyChecking=yes -o LogLevel=ERROR"
    local wait_for=${COIL_WORKER_WAIT:-600} deadline
    is_uint "$wait_for" || die "COIL_WORKER_WAIT=$wait_for is not a whole number of seconds"
    deadline=$((SECONDS + wait_for))
    for host in "${hosts[@]:1}"; do
      until (exec 3<>"/dev/tcp/$host/$ssh_port") 2>/dev/null; do
        ((SECONDS < deadline)) || die "worker $host:$ssh_port did not answer within ${wait_for} s (COIL_WORKER_WAIT)"
        sleep 2
      done
      echo "coil-entrypoint: leader: worker $host answers on port $ssh_port" >&2
    done
  fi
  mpirun_args+=(--hostfile "$hostfile" --mca plm_rsh_agent "$launcher")
  echo "coil-entrypoint: leader: $tp_size ranks on ${hosts[*]}" >&2
}

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
if [[ "$role" == leader ]]; then leader_setup; fi

echo "coil-entrypoint: ${COIL_MPIRUN:-mpirun} ${mpirun_args[*]} ${COIL_SERVE:-coil-serve} ${serve_args[*]} $*" >&2

# mpirun runs as a child, not exec'd, so that this shell decides where a signal goes.
#
# Where: to the ranks themselves (those of mpirun's children that are MPI processes), not
# to mpirun. On a leader, mpirun's other children are the launchers of the remote hosts'
# daemons: signalled, they would cut the workers off in the middle of the drain. Remote
# ranks hear of the stop from rank 0, as the shutdown plan. Open MPI 4.1's mpirun,
# when signalled, sends its ranks SIGCONT, sleeps odls_base_sigkill_timeout, sends SIGTERM,
# sleeps it again and sends SIGKILL, whatever the ranks do meanwhile: the ranks would learn
# of the shutdown one timeout late and be killed one timeout after that, so with the short
# timeout that ends a lost job at once a drain would get about a second.
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
watcher=""
lost_flag=${TMPDIR:-/tmp}/coil-job-lost.$$
rm -f "$lost_flag"

ranks_of() {  # the children of mpirun $1 that are MPI ranks (Open MPI gave them a rank)
  local pid
  for pid in $(children_of "$1"); do
    # grep -z reads the NUL-separated file itself: no pipe, whose writer a grep -q that
    # matches early would end with SIGPIPE, failing the check under pipefail.
    if grep -qz '^OMPI_COMM_WORLD_RANK=' "/proc/$pid/environ" 2>/dev/null; then
      echo "$pid"
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
  # A stop was asked for: the ranks exit because of it, not because the job was lost.
  if [[ -n "$watcher" ]]; then kill "$watcher" 2>/dev/null || true; fi
  watcher=""
  local ranks
  ranks=$(ranks_of "$child" | tr '\n' ' ')
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

# A job that lost a rank ends by itself: coil notices a dead rank within 2 s and every
# rank exits with status 3, and mpirun runs its kill sequence at once. On one host mpirun
# exits within twice odls_base_sigkill_timeout of the death (less the time the ranks
# took); on a leader it waits for every remote daemon to run the same sequence after its
# own (docs/deployment.md). The watcher ends that teardown: once every rank here has
# exited with no stop asked for, mpirun has lost_grace more to exit by itself (beyond its
# own sequence on one host, so it is not cut there), then it gets SIGKILL (the remote
# daemons, cut off, end by themselves: their ranks have already exited) and this script
# exits with status 3. It polls /proc five times a second and sleeps in between.
lost_grace_us=2000000
# shellcheck disable=SC2317  # run in the background below
watch_job() {
  local seen=0 gone_at=0 now
  while kill -0 "$child" 2>/dev/null; do
    if [[ -n "$(ranks_of "$child")" ]]; then
      seen=1 gone_at=0
    elif ((seen)); then
      now=${EPOCHREALTIME/./}
      ((gone_at)) || gone_at=$now
      if ((now - gone_at >= lost_grace_us)); then
        echo "coil-entrypoint: every rank here has exited and no stop was asked for: the job lost a rank; ending mpirun's teardown (SIGKILL)" >&2
        : >"$lost_flag"
        kill -KILL "$child" 2>/dev/null || true
        return 0
      fi
    fi
    sleep 0.2
  done
}

"${COIL_MPIRUN:-mpirun}" "${mpirun_args[@]}" "${COIL_SERVE:-coil-serve}" "${serve_args[@]}" "$@" &
child=$!
if [[ -n "$pending" ]]; then
  forward "$pending"
else
  watch_job &
  watcher=$!
fi

# `wait` returns early (status > 128) when a trapped signal arrives; wait again until the
# child itself has ended, and exit with its status.
while :; do
  before=$signals
  status=0
  wait "$child" || status=$?
  ((signals != before)) || break
done
if [[ -n "$watcher" ]]; then kill "$watcher" 2>/dev/null || true; fi
if [[ -e "$lost_flag" ]]; then
  rm -f "$lost_flag"
  echo "coil-entrypoint: mpirun ended (status $status); exiting with status 3: the job lost a rank" >&2
  exit 3
fi
echo "coil-entrypoint: mpirun exited with status $status" >&2
exit "$status"
