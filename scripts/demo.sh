#!/usr/bin/env bash
# coil in one command: installs what is missing, builds the serving programs, writes a
# model with RANDOM weights (mamba2-130m's shape; SHAPE=nemotron-130m writes the Nemotron-H
# hybrid of Mamba2, attention and MLP blocks instead), serves it with two tensor-parallel ranks
# (mpirun -np 2 coil-serve), waits until the health service says SERVING, streams one
# generation with coil-cli, prints what it measured and stops the server (SIGTERM: drain).
#
# The weights are random, so the text is gibberish: the demo shows the machinery (batching,
# tensor parallelism, streaming, health, drain), not a language model. To serve a real
# checkpoint, point --model at a directory holding config.json and the weights
# (model.safetensors, an index with shards, or pytorch_model.bin), e.g. a download of
# state-spaces/mamba2-130m:
#
#   mpirun -np 2 --bind-to none --mca odls_base_sigkill_timeout 1 build/engine/coil-serve \
#       --model /path/to/mamba2-130m --port 50051
#
# Usage: scripts/demo.sh [PROMPT]
#   (environment: SHAPE=130m|nemotron-130m PORT=50051 MAX_TOKENS=48 BUILD_DIR=build)
set -euo pipefail

cd "$(dirname "$0")/.."
PROMPT="${1:-The state space model reads its input one token at a time and}"
PORT="${PORT:-50051}"
MAX_TOKENS="${MAX_TOKENS:-48}"
SHAPE="${SHAPE:-130m}"
BUILD_DIR="${BUILD_DIR:-build}"
DRAIN_TIMEOUT=30
WORK="$(mktemp -d "${TMPDIR:-/tmp}/coil-demo-XXXXXX")"
SERVER_PID=""

# Stops the server the way coil expects (deploy/docker/coil-entrypoint.sh does the same):
# SIGTERM to the ranks, not to mpirun. Rank 0 drains and sends the workers the shutdown
# plan; the other ranks ignore the signal; mpirun then exits 0 by itself. (mpirun, when
# signalled itself, sends SIGTERM only after odls_base_sigkill_timeout and SIGKILL one
# timeout later.)
stop_server() {
  [[ -n "$SERVER_PID" ]] && kill -0 "$SERVER_PID" 2>/dev/null || return 0
  local ranks
  ranks=$(pgrep -P "$SERVER_PID" || true)
  if [[ -n "$ranks" ]]; then
    # shellcheck disable=SC2086  # one pid per word
    kill -TERM $ranks 2>/dev/null || true
  else
    kill -TERM "$SERVER_PID" 2>/dev/null || true
  fi
  local status=0
  wait "$SERVER_PID" || status=$?
  SERVER_PID=""
  return "$status"
}

cleanup() {
  stop_server || true
  rm -rf "$WORK"
}
trap cleanup EXIT

step() { printf '\n== %s\n' "$*"; }
since() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }

step "setup: Debian packages (scripts/setup.sh)"
scripts/setup.sh

step "build: coil-serve, coil-cli, coil-make-model (${BUILD_DIR}/)"
# The configuration scripts/test.sh uses, so that running both compiles each file once.
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release >"$WORK/cmake.log" \
  || { cat "$WORK/cmake.log"; exit 1; }
ninja -C "$BUILD_DIR" coil-serve coil-cli coil-make-model

case "$SHAPE" in
  130m) MODEL="$WORK/mamba2-130m-random" ;;
  nemotron-130m) MODEL="$WORK/nemotron-130m-random" ;;
  *) echo "demo.sh: SHAPE is '$SHAPE'; use 130m or nemotron-130m" >&2; exit 2 ;;
esac
step "model: $SHAPE shape, RANDOM weights, in $MODEL"
start=$(date +%s.%N)
"$BUILD_DIR/tools/make_model/coil-make-model" --shape "$SHAPE" --out "$MODEL"
echo "written in $(since "$start") s"

step "serve: mpirun -np 2 coil-serve on 127.0.0.1:$PORT (log: $WORK/server.log)"
mpi_flags=(-np 2 --bind-to none --mca odls_base_sigkill_timeout 1)
if [[ "$(id -u)" == 0 ]]; then mpi_flags+=(--allow-run-as-root); fi
if (($(nproc) < 2)); then mpi_flags+=(--oversubscribe); fi
start=$(date +%s.%N)
# A hybrid's KV pages come from --memory-budget beside the state rows (both are printed).
mpirun "${mpi_flags[@]}" "$BUILD_DIR/engine/coil-serve" --model "$MODEL" \
  --host 127.0.0.1 --port "$PORT" --state-rows 4 --max-model-len 2048 --memory-budget 512MiB \
  --drain-timeout "$DRAIN_TIMEOUT" >"$WORK/server.log" 2>&1 &
SERVER_PID=$!

until "$BUILD_DIR/tools/coil-cli" --target "127.0.0.1:$PORT" --connect_timeout_ms 500 info \
  >"$WORK/info.txt" 2>/dev/null; do
  if ! kill -0 "$SERVER_PID" 2>/dev/null; then
    echo "coil-serve stopped before serving; its log:" >&2
    cat "$WORK/server.log" >&2
    exit 1
  fi
  sleep 0.5
done
echo "SERVING after $(since "$start") s"
grep -E "budgets|loaded|serving" "$WORK/server.log" | sed 's/^/  server: /'
grep -E "^(architecture|tp_size|state_rows_total|kv_pages_total|dtype|n_layer|d_model):" \
  "$WORK/info.txt" | sed 's/^/  info: /'

step "generate: \"$PROMPT\" ($MAX_TOKENS tokens, greedy, streamed)"
"$BUILD_DIR/tools/coil-cli" --target "127.0.0.1:$PORT" generate "$PROMPT" \
  --max-tokens "$MAX_TOKENS" --ignore_eos

step "stop: SIGTERM to the ranks (rank 0 drains, then sends the workers' shutdown plan)"
start=$(date +%s.%N)
if stop_server; then
  echo "mpirun exited 0 after $(since "$start") s"
else
  echo "mpirun exited with an error; the server log:" >&2
  cat "$WORK/server.log" >&2
  exit 1
fi
grep -E "draining|drained" "$WORK/server.log" | sed 's/^/  server: /' || true
echo
echo "The weights above were random. Serve a real checkpoint with:"
echo "  mpirun -np 2 --bind-to none --mca odls_base_sigkill_timeout 1 $BUILD_DIR/engine/coil-serve --model DIR"
