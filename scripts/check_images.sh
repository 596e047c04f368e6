#!/usr/bin/env bash
# Builds the CPU image (deploy/docker/Dockerfile.cpu) and runs it as a pod runs it:
#   1. a Debian 12 base image made here (debootstrap --variant=minbase from the Debian
#      archive apt already uses, imported with buildah and tagged as the Dockerfile's FROM),
#      kept in buildah's storage and reused while younger than --base-max-age days;
#   2. coil's programs as CI built them, installed with `cmake --install` into the build
#      context (compiled again, CPU only, in build-image/ when the test build links CUDA);
#   3. `buildah bud --isolation chroot --pull=never` with COIL_BINARIES=prebuilt;
#   4. the image's entrypoint, as the image's user, under `buildah run --isolation chroot`
#      (the host's network): coil-serve at TP1 and at TP2 (mpirun inside the image), a
#      TP2 group of two containers in two network namespaces (a leader and a worker that
#      talk over SSH and TCP, as the multi-pod overlay runs them), each checked from
#      outside: health SERVING, a gRPC request whose tokens must equal TP1's, and SIGTERM
#      to the entrypoint, which must drain and end with status 0; then a rank's death, at
#      TP2 in one container and in the worker of a two-container group: rank 1 killed with
#      SIGKILL, the container (the leader's) must end within 5 s with a non-zero status
#      (what makes a restart policy apply), rank 0 having logged the death;
#   5. the image's size, and what each phase took.
# Needs root (buildah's storage, ip netns) and buildah, debootstrap and iproute2 (from
# scripts/setup.sh); without root it says so and exits 0 having checked nothing.
#
# Usage: scripts/check_images.sh [--build-dir DIR] [--refresh-base] [--base-max-age DAYS]
#   --build-dir DIR     the configured and built tree to install from (default: build)
#   --refresh-base      make the base image again even if a recent one is stored
set -euo pipefail
cd "$(dirname "$0")/.."


build_dir=build
refresh_base=0
base_max_age_days=7
while (($#)); do
  case "$1" in
    --build-dir) build_dir=$2; shift 2 ;;
    --refresh-base) refresh_base=1; shift ;;
    --base-max-age) base_max_age_days=$2; shift 2 ;;
    *) echo "check_images: unknown argument $1 (see the usage at the top of the script)" >&2; exit 2 ;;
  esac
done

log() { echo "check_images: $*"; }
fail() {
  echo "check_images: FAIL: $*" >&2
  exit 1
}
if [[ $(id -u) -ne 0 ]]; then
  log "SKIP: building and running images needs root (buildah's storage, network namespaces)"
  exit 0
fi
for tool in buildah debootstrap ip; do
  command -v "$tool" >/dev/null || fail "$tool is not installed; run scripts/setup.sh"
done
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

image=localhost/coil:check-cpu
base_image=docker.io/library/debian:bookworm-slim  # Dockerfile.cpu's DEBIAN_IMAGE
work=$(mktemp -d /tmp/coil-check-images.XXXXXX)
containers=()
namespaces=()
cleanup() {
  local ctr ns pid
  for ctr in "${containers[@]}"; do buildah rm "$ctr" >/dev/null 2>&1 || true; done
  for ns in "${namespaces[@]}"; do
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null || true; done
    ip netns del "$ns" 2>/dev/null || true
  done
  rm -rf "$work"
}
trap cleanup EXIT
phase_start=$SECONDS
timings=()
phase_done() {  # phase_done NAME: record how long the phase since the last call took
  timings+=("$1 $((SECONDS - phase_start)) s")
  phase_start=$SECONDS
}

# Containers left by a run that was killed before its cleanup (its pid is gone).
for name in $(buildah containers --format '{{.ContainerName}}' 2>/dev/null | grep -E '^coil-check-[0-9]+-' || true); do
  owner=${name#coil-check-}
  kill -0 "${owner%%-*}" 2>/dev/null || buildah rm "$name" >/dev/null 2>&1 || true
done

# ---- 1. the base image ----
# The Debian mirror apt uses here (deb822 sources or the one-line format), else Debian's own.
debian_mirror() {
  local uri
  uri=$(cat /etc/apt/sources.list.d/*.sources 2>/dev/null |
    awk '/^URIs:/ {for (i = 2; i <= NF; i++) if ($i ~ /\/debian\/?$/) {print $i; exit}}')
  [[ -n "$uri" ]] || uri=$(awk '$1 == "deb" {for (i = 2; i <= NF; i++) if ($i ~ /^https?:.*\/debian\/?$/) {print $i; exit}}' \
    /etc/apt/sources.list 2>/dev/null)
  echo "${uri:-http://deb.debian.org/debian}"
}

make_base() {
  local mirror rootfs=$work/rootfs ctr mount
  mirror=$(debian_mirror)
  log "making the base image: debootstrap --variant=minbase bookworm from $mirror"
  debootstrap --variant=minbase bookworm "$rootfs" "$mirror" >"$work/debootstrap.log" 2>&1 ||
    { tail -n 20 "$work/debootstrap.log" >&2; fail "debootstrap failed (log above)"; }
  # Slim as Debian's -slim images are: no documentation, manuals or translations installed
  # later either, and no package lists or downloaded packages kept.
  cat >"$rootfs/etc/dpkg/dpkg.cfg.d/coil-slim" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
path-exclude /usr/share/lintian/*
EOF
  find "$rootfs/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete
  rm -rf "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/* "$rootfs"/var/cache/apt/*.bin \
    "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* "$rootfs"/etc/apt/sources.list
  find "$rootfs/usr/share/locale" -mindepth 1 -maxdepth 1 -not -name locale.alias -exec rm -rf {} +
  local security=${mirror%/debian}/debian-security
  [[ "$mirror" == */debian ]] || security=http://deb.debian.org/debian-security
  cat >"$rootfs/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $mirror
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: $security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  ctr=$(buildah from scratch)
  containers+=("$ctr")
  mount=$(buildah mount "$ctr")
  tar -C "$rootfs" -cf - . | tar -C "$mount" -xf -
  buildah umount "$ctr" >/dev/null
  buildah config --cmd /bin/bash --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --label org.coil.base="debootstrap --variant=minbase bookworm $mirror" "$ctr"
  buildah commit -q --rm "$ctr" "$base_image" >/dev/null
  containers=("${containers[@]/$ctr/}")
  rm -rf "$rootfs"
}

base_age_days() {  # whole days since the stored base image was made; empty if none
  local created
  created=$(buildah inspect --type image --format '{{.OCIv1.Created}}' "$base_image" 2>/dev/null) || return 0
  echo $((($(date +%s) - $(date -d "${created% +0000 UTC}" +%s)) / 86400))
}
age=$(base_age_days)
if [[ -z "$age" || $refresh_base -eq 1 || $age -ge $base_max_age_days ]]; then
  make_base
  phase_done "base image (made)"
else
  log "base image $base_image is $age days old: reusing it (--refresh-base makes it again)"
  phase_done "base image (stored)"
fi

# ---- 2. coil's programs, installed into the build context ----
context=$work/context
mkdir -p "$context/prebuilt" "$context/deploy/docker"
cp deploy/docker/coil-entrypoint.sh "$context/deploy/docker/"
[[ -f "$build_dir/CMakeCache.txt" ]] || fail "$build_dir is not a configured build; run scripts/test.sh first (or give --build-dir)"
install_from=$build_dir
serve_built=$(find "$build_dir" -type f -name coil-serve -perm -u+x | head -n1)
[[ -n "$serve_built" ]] || fail "$build_dir has no coil-serve; build it first"
serve_libraries=$(ldd "$serve_built")  # not piped into grep -q: pipefail and SIGPIPE
if grep -q 'libcudart\|libcublas\|libnccl' <<<"$serve_libraries"; then
  # The CPU image carries no CUDA libraries: build the programs once more without CUDA.
  install_from=build-image
  launcher=()
  command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  log "$build_dir links CUDA: building the CPU-only programs in $install_from"
  cmake -S . -B "$install_from" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCOIL_CUDA=OFF \
    -DCOIL_BUILD_TESTS=OFF -DCOIL_BUILD_BENCHMARKS=OFF "${launcher[@]}" >"$work/configure.log" 2>&1 ||
    { cat "$work/configure.log" >&2; fail "configuring $install_from failed"; }
  cmake --build "$install_from" -j "$(nproc)" >"$work/build.log" 2>&1 ||
    { tail -n 40 "$work/build.log" >&2; fail "building $install_from failed"; }
  phase_done "CPU-only build ($install_from)"
fi
DESTDIR=$context/prebuilt cmake --install "$install_from" --prefix /usr/local >"$work/install.log" 2>&1 ||
  { cat "$work/install.log" >&2; fail "cmake --install $install_from failed (is every target built? cmake --build $install_from)"; }
prefix=$context/prebuilt/usr/local
for program in coil-serve coil-cli; do
  [[ -x "$prefix/bin/$program" ]] || fail "cmake --install $install_from installed no bin/$program"
done
bash deploy/docker/runtime-packages.sh "$prefix"/bin/* >"$context/prebuilt/runtime-packages.txt"
log "installed $(find "$prefix" -type f | wc -l) files from $install_from; runtime packages:" \
  "$(tr '\n' ' ' <"$context/prebuilt/runtime-packages.txt")"
phase_done "install"

# ---- 3. the image ----
previous=$(buildah inspect --type image --format '{{.FromImageID}}' "$image" 2>/dev/null || true)
# --layers: the package installation is cached while the package list stays the same.
if ! buildah bud --isolation chroot --pull=never --layers --force-rm -q \
    --build-arg COIL_BINARIES=prebuilt -f deploy/docker/Dockerfile.cpu -t "$image" \
    "$context" >"$work/bud.log" 2>&1; then
  tail -n 40 "$work/bud.log" >&2
  fail "buildah bud failed (log above)"
fi
user=$(buildah inspect --type image --format '{{.OCIv1.Config.User}}' "$image")
entrypoint=$(buildah inspect --type image --format '{{range .OCIv1.Config.Entrypoint}}{{.}} {{end}}' "$image")
entrypoint=${entrypoint% }
[[ "$user" == 10001:10001 ]] || fail "the image runs as '$user'; the manifests expect 10001:10001"
[[ -n "$entrypoint" ]] || fail "the image has no entrypoint"
current=$(buildah inspect --type image --format '{{.FromImageID}}' "$image")
# The previous run's image, now untagged, and the untagged images a build leaves (the
# build stage): the layers below the programs, parents of the new image, stay as the
# cache.
if [[ -n "$previous" && "$previous" != "$current" ]]; then buildah rmi "$previous" >/dev/null 2>&1 || true; fi
buildah rmi --prune >/dev/null 2>&1 || true
size=$(buildah images --format '{{.Size}}' "$image")
log "built $image ($size), user $user, entrypoint $entrypoint"
phase_done "image build"

# ---- 4. run it ----
cli=$prefix/bin/coil-cli
make_model=$prefix/bin/coil-make-model
[[ -x "$make_model" ]] || fail "cmake --install $install_from installed no bin/coil-make-model"
"$make_model" --shape tiny --dtype f32 --out "$work/model" >"$work/make_model.log" 2>&1 ||
  { cat "$work/make_model.log" >&2; fail "coil-make-model failed"; }
chmod -R a+rX "$work/model"
# Sampled (temperature 1, a fixed seed): the random tiny model's greedy choice repeats one
# token, and a sampled choice moves with any difference in the logits.
prompt_ids=11,42,7,99,3,200  # below the tiny shape's 250-token vocabulary

# start_container NAME NETNS ENV...: the image's entrypoint in a new container, in network
# namespace NETNS ("" for this one's), with /models/m (the model, read-only), /etc/coil/ssh
# (the group's key pair) and /run/coil (writable: the port file) mounted. Sets $started_pid.
start_container() {
  local name=$1 netns=$2
  shift 2
  local ctr run_dir=$work/$name
  mkdir -p "$run_dir"
  chmod 777 "$run_dir"
  ctr=$(buildah from --pull=never --name "coil-check-$$-$name" "$image")
  containers+=("$ctr")
  local env_args=() setting
  # Loopback only (the image's default for /metrics is every address, for Prometheus).
  for setting in COIL_MODEL=/models/m COIL_HOST=127.0.0.1 COIL_METRICS_HOST=127.0.0.1 COIL_PORT=0 COIL_METRICS_PORT=0 \
      COIL_THREADS=1 COIL_DRAIN_TIMEOUT=10 "$@"; do
    env_args+=(--env "$setting")
  done
  local wrap=()
  [[ -n "$netns" ]] && wrap=(ip netns exec "$netns")
  # shellcheck disable=SC2086  # the entrypoint is one word per argument
  "${wrap[@]}" buildah run --isolation chroot -v "$work/model:/models/m:ro" \
    -v "$work/ssh:/etc/coil/ssh:ro" -v "$run_dir:/run/coil" "${env_args[@]}" "$ctr" -- \
    $entrypoint --port-file /run/coil/port >"$run_dir/log" 2>&1 &
  started_pid=$!
}

# is_below PID OWNER: whether process PID runs below process OWNER, at any depth.
is_below() {
  local up=$1
  while ((up > 1)); do
    [[ "$up" == "$2" ]] && return 0
    up=$(awk '{print $4}' "/proc/$up/stat" 2>/dev/null || echo 1)
  done
  return 1
}

# The entrypoint's process (the container's PID 1 in a pod), below buildah run's pid $1.
entrypoint_pid() {
  local pid
  for pid in $(pgrep -f "bash $entrypoint" || true); do
    is_below "$pid" "$1" && { echo "$pid"; return 0; }
  done
  return 1
}

# wait_serving NAME BUILDAH_PID NETNS: waits for the port file and checks health from
# outside (through NETNS when given). Sets $port.
wait_serving() {
  local name=$1 pid=$2 netns=$3 run_dir=$work/$1 wrap=()
  [[ -n "$netns" ]] && wrap=(ip netns exec "$netns")
  for _ in $(seq 1200); do
    [[ -s "$run_dir/port" ]] && break
    kill -0 "$pid" 2>/dev/null || { cat "$run_dir/log" >&2; fail "$name: the container exited while starting"; }
    sleep 0.1
  done
  [[ -s "$run_dir/port" ]] || { cat "$run_dir/log" >&2; fail "$name: no port file after 120 s"; }
  port=$(head -n1 "$run_dir/port")
  "${wrap[@]}" "$cli" --target "127.0.0.1:$port" info >"$run_dir/info" 2>&1 ||
    { cat "$run_dir/info" "$run_dir/log" >&2; fail "$name: health is not SERVING"; }
}

# serve_and_check NAME BUILDAH_PID NETNS: waits until it serves, sends a request from
# outside (through NETNS when given), then SIGTERM to the entrypoint: the container must
# end with status 0. Leaves the tokens in $work/NAME.tokens.
serve_and_check() {
  local name=$1 pid=$2 netns=$3 run_dir=$work/$1 wrap=()
  [[ -n "$netns" ]] && wrap=(ip netns exec "$netns")
  wait_serving "$name" "$pid" "$netns"
  "${wrap[@]}" "$cli" --target "127.0.0.1:$port" generate --ids "$prompt_ids" --max-tokens 12 \
    --temperature 1 --seed 7 --ignore-eos --print-ids >"$work/$name.tokens" 2>"$run_dir/cli" ||
    { cat "$run_dir/cli" "$run_dir/log" >&2; fail "$name: the request failed"; }
  local ep status=0 uid
  ep=$(entrypoint_pid "$pid") || { cat "$run_dir/log" >&2; fail "$name: cannot find the entrypoint's process"; }
  # The processes run as the image's user, not as root (the pods require runAsNonRoot).
  uid=$(awk '/^Uid:/ {print $2}' "/proc/$ep/status")
  [[ "$uid" == 10001 ]] || fail "$name: the entrypoint runs as uid $uid, not 10001"
  kill -TERM "$ep"
  for _ in $(seq 600); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$pid" 2>/dev/null && { cat "$run_dir/log" >&2; fail "$name: still running 60 s after SIGTERM"; }
  wait "$pid" || status=$?
  ((status == 0)) || { cat "$run_dir/log" >&2; fail "$name: ended with status $status after SIGTERM"; }
  grep -q "drained; exiting" "$run_dir/log" || { cat "$run_dir/log" >&2; fail "$name: no drain in the log"; }
  log "$name: SERVING, tokens $(cat "$work/$name.tokens"), drained on SIGTERM, status 0"
}

# rank_pid_below OWNER RANK: the coil-serve process of MPI rank RANK that runs below
# process OWNER (at any depth: the entrypoint's mpirun, or a worker's sshd and orted).
rank_pid_below() {
  local pid
  for pid in $(pgrep -x coil-serve || true); do
    grep -qz "^OMPI_COMM_WORLD_RANK=$2\$" "/proc/$pid/environ" 2>/dev/null || continue
    is_below "$pid" "$1" && { echo "$pid"; return 0; }
  done
  return 1
}

# kill_and_check NAME BUILDAH_PID NETNS OWNER: once it serves, SIGKILL to rank 1 (found
# below OWNER: this container, or the worker's), and the container must end within 5 s
# with a non-zero status, rank 0 having logged "rank 1 died".
kill_and_check() {
  local name=$1 pid=$2 netns=$3 owner=$4 run_dir=$work/$1 victim status=0 start end ms
  wait_serving "$name" "$pid" "$netns"
  victim=$(rank_pid_below "$owner" 1) || { cat "$run_dir/log" >&2; fail "$name: cannot find rank 1"; }
  start=$(date +%s%N)
  kill -KILL "$victim"
  for _ in $(seq 1500); do kill -0 "$pid" 2>/dev/null || break; sleep 0.02; done
  end=$(date +%s%N)
  kill -0 "$pid" 2>/dev/null && { cat "$run_dir/log" >&2; fail "$name: still running 30 s after rank 1 was killed"; }
  wait "$pid" || status=$?
  ms=$(((end - start) / 1000000))
  ((status != 0)) || { cat "$run_dir/log" >&2; fail "$name: ended with status 0 after rank 1 was killed"; }
  ((ms < 5000)) || { cat "$run_dir/log" >&2; fail "$name: ended ${ms} ms after rank 1 was killed, not within 5 s"; }
  grep -q "rank 1 died" "$run_dir/log" || { cat "$run_dir/log" >&2; fail "$name: rank 0 did not log rank 1's death"; }
  log "$name: rank 1 killed; the container ended with status $status ${ms} ms later"
}

mkdir -p "$work/ssh"
ssh-keygen -q -t ed25519 -N '' -C coil-check -f "$work/ssh/id_ed25519"
chmod 644 "$work/ssh/id_ed25519"  # a mounted Secret under an fsGroup is group-readable too

start_container tp1 "" COIL_TP_SIZE=1
serve_and_check tp1 "$started_pid" ""
start_container tp2 "" COIL_TP_SIZE=2
serve_and_check tp2 "$started_pid" ""
cmp -s "$work/tp1.tokens" "$work/tp2.tokens" ||
  fail "TP2's tokens ($(cat "$work/tp2.tokens")) differ from TP1's ($(cat "$work/tp1.tokens"))"
start_container tp2-kill "" COIL_TP_SIZE=2
kill_and_check tp2-kill "$started_pid" "" "$started_pid"
phase_done "TP1 and TP2 in the image"

# A group across two hosts: a worker container in one namespace, the leader in another.
host_a=coil-img-$$-a host_b=coil-img-$$-b
# Namespaces left by a run that was killed before its cleanup (its pid is gone).
for ns in $(ip netns list 2>/dev/null | awk '$1 ~ /^coil-img-[0-9]+-[ab]$/ {print $1}'); do
  owner=${ns#coil-img-}
  kill -0 "${owner%-*}" 2>/dev/null || ip netns del "$ns" 2>/dev/null || true
done
if ip netns add "$host_a" 2>"$work/netns.err"; then
  namespaces+=("$host_a" "$host_b")
  ip netns add "$host_b"
  ip link add "ci$$a" type veth peer name "ci$$b"
  ip link set "ci$$a" netns "$host_a"
  ip link set "ci$$b" netns "$host_b"
  ip -n "$host_a" addr add 198.18.1.1/24 dev "ci$$a"
  ip -n "$host_b" addr add 198.18.1.2/24 dev "ci$$b"
  for ns in "$host_a" "$host_b"; do ip -n "$ns" link set lo up; done
  ip -n "$host_a" link set "ci$$a" up
  ip -n "$host_b" link set "ci$$b" up
  start_container worker "$host_b" COIL_ROLE=worker
  worker_pid=$started_pid
  start_container leader "$host_a" COIL_ROLE=leader COIL_TP_SIZE=2 COIL_HOSTS=198.18.1.1,198.18.1.2 \
    COIL_WORKER_WAIT=60
  serve_and_check leader "$started_pid" "$host_a"
  cmp -s "$work/tp1.tokens" "$work/leader.tokens" ||
    fail "the two-pod group's tokens ($(cat "$work/leader.tokens")) differ from TP1's ($(cat "$work/tp1.tokens"))"
  # The worker, stopped as its pod would be, ends promptly once the leader has gone.
  ep=$(entrypoint_pid "$worker_pid") || fail "worker: cannot find the entrypoint's process"
  kill -TERM "$ep"
  status=0
  wait "$worker_pid" || status=$?
  ((status == 0)) || { cat "$work/worker/log" >&2; fail "worker: ended with status $status after SIGTERM"; }
  log "leader and worker in two namespaces: the same tokens as TP1; both ended with status 0"
  # The worker's rank dies: the leader's container ends, and the group would be recreated.
  start_container worker-kill "$host_b" COIL_ROLE=worker
  worker_pid=$started_pid
  start_container leader-kill "$host_a" COIL_ROLE=leader COIL_TP_SIZE=2 \
    COIL_HOSTS=198.18.1.1,198.18.1.2 COIL_WORKER_WAIT=60
  kill_and_check leader-kill "$started_pid" "$host_a" "$worker_pid"
  ep=$(entrypoint_pid "$worker_pid") || fail "worker-kill: cannot find the entrypoint's process"
  kill -TERM "$ep"
  status=0
  wait "$worker_pid" || status=$?
  ((status == 0)) || { cat "$work/worker-kill/log" >&2; fail "worker-kill: ended with status $status after SIGTERM"; }
  phase_done "TP2 across two containers (SSH, TCP)"
else
  log "SKIP the two-container group: cannot create a network namespace ($(cat "$work/netns.err"))"
fi

log "image $image: $size"
log "times: $(printf '%s; ' "${timings[@]}")"
echo "check_images: 1 passed, 0 failed"
