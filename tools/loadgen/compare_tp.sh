#!/usr/bin/env bash
# Compares coil at TP1 and TP2 on the same model and workload: starts coil-serve at each
# tensor-parallel size in turn (TP1: one rank with 2 threads; TP2: two ranks with 1 thread
# each, so both use the same cores), runs the same scenarios against each with coil-loadgen
# (closed loop at several concurrencies, then an open-loop rate sweep), stops each server
# with SIGTERM and waits for it, and writes:
#   OUT/<tp>_<scenario>.json      coil-loadgen's result of each run
#   OUT/summary.tsv               one row per run
#   OUT/comparison.md             Markdown tables (all runs; TP2 against TP1)
#   OUT/*.png                     throughput against concurrency, latency percentiles,
#                                 TTFT CDF, rate sweep (gnuplot; installed if missing)
#
#   tools/loadgen/compare_tp.sh [--build build] [--out DIR]
#       [--shape tiny|130m|nemotron-tiny|nemotron-130m] [--dtype bf16]
#       [--model DIR] [--duration 30] [--concurrency "1 8 32"] [--rates auto|"0.5 1 2"]
#       [--prompt-tokens 128] [--output-tokens 128] [--warmup 2] [--threads 2] [--drain 60]
#       [--server-flags "--state-rows 40"] [--no-install] [--check]
#
# --warmup requests go to each server once, before its first scenario. --no-install draws
# the plots only if gnuplot is already there. --check ends with a non-zero status unless
# every scenario ran at both TP sizes with every request completed (the ctest uses it).
# --rates auto offers these fractions (default 25%, 50%, 75% and 100%) of the best
# closed-loop request rate of the first TP size measured, so the sweep offers both the same load.
set -euo pipefail

BUILD=build
OUT=""
SHAPE=130m
DTYPE=bf16
MODEL=""
DURATION=30
CONCURRENCY="1 8 32"
RATES=auto
RATE_FRACTIONS="0.25 0.5 0.75 1"
PROMPT_TOKENS=128
OUTPUT_TOKENS=128
WARMUP=2
DRAIN=60
THREADS=2
SERVER_FLAGS=""
TP_SIZES="1 2"
INSTALL=1
CHECK=0

usage() { sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-0}"; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) BUILD=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --shape) SHAPE=$2; shift 2 ;;
    --dtype) DTYPE=$2; shift 2 ;;
    --model) MODEL=$2; shift 2 ;;
    --duration) DURATION=$2; shift 2 ;;
    --concurrency) CONCURRENCY=$2; shift 2 ;;
    --rates) RATES=$2; shift 2 ;;
    --rate-fractions) RATE_FRACTIONS=$2; shift 2 ;;
    --prompt-tokens) PROMPT_TOKENS=$2; shift 2 ;;
    --output-tokens) OUTPUT_TOKENS=$2; shift 2 ;;
    --warmup) WARMUP=$2; shift 2 ;;
    --drain) DRAIN=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --server-flags) SERVER_FLAGS=$2; shift 2 ;;
    --tp) TP_SIZES=$2; shift 2 ;;
    --no-install) INSTALL=0; shift ;;
    --check) CHECK=1; shift ;;
    -h|--help) usage 0 ;;
    *) echo "compare_tp.sh: unknown argument $1; see --help" >&2; exit 2 ;;
  esac
done

SERVE="$BUILD/engine/coil-serve"
LOADGEN="$BUILD/tools/loadgen/coil-loadgen"
MAKE_MODEL="$BUILD/tools/make_model/coil-make-model"
for program in "$SERVE" "$LOADGEN" "$MAKE_MODEL"; do
  if [[ ! -x "$program" ]]; then
    echo "compare_tp.sh: $program is missing; build it: ninja -C $BUILD coil-serve coil-loadgen coil-make-model" >&2
    exit 1
  fi
done
command -v mpirun > /dev/null || { echo "compare_tp.sh: mpirun not found; run scripts/setup.sh" >&2; exit 1; }

OUT=${OUT:-load-results/$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
rm -f "$OUT/summary.tsv"

# gnuplot draws the plots; install Debian's gnuplot-nox if it is missing (plots are skipped
# when that is impossible, e.g. without root or a package mirror).
HAVE_GNUPLOT=1
if ! command -v gnuplot > /dev/null && [[ $INSTALL -eq 0 ]]; then
  echo "compare_tp.sh: gnuplot is missing and --no-install was given; no plots" >&2
  HAVE_GNUPLOT=0
elif ! command -v gnuplot > /dev/null; then
  echo "compare_tp.sh: installing gnuplot-nox for the plots" >&2
  SUDO=""
  [[ $(id -u) -ne 0 ]] && command -v sudo > /dev/null && SUDO=sudo
  if ! { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq \
           --no-install-recommends gnuplot-nox; } > "$OUT/apt.log" 2>&1; then
    echo "compare_tp.sh: could not install gnuplot-nox (see $OUT/apt.log); no plots" >&2
    HAVE_GNUPLOT=0
  fi
fi

if [[ -z "$MODEL" ]]; then
  MODEL="$OUT/model-$SHAPE-$DTYPE"
  if [[ ! -f "$MODEL/config.json" ]]; then
    echo "== making a random $SHAPE model ($DTYPE) in $MODEL"
    "$MAKE_MODEL" --shape "$SHAPE" --dtype "$DTYPE" --out "$MODEL" > "$OUT/make-model.log" 2>&1
  fi
fi

SERVER_PID=""
# SIGTERM goes to rank 0, which drains and then ends the other ranks with its shutdown plan;
# mpirun then exits by itself with rank 0's status. (Signalled itself, mpirun would forward
# the signal to every rank and report the job as killed.)
stop_server() {
  if [[ -n "$SERVER_PID" ]]; then
    local rank0=""
    for child in $(pgrep -P "$SERVER_PID" || true); do
      if grep -qzx 'OMPI_COMM_WORLD_RANK=0' "/proc/$child/environ" 2> /dev/null; then
        rank0=$child
      fi
    done
    kill -TERM "${rank0:-$SERVER_PID}" 2> /dev/null || true
    local code=0
    wait "$SERVER_PID" || code=$?
    SERVER_PID=""
    return "$code"
  fi
}
trap 'stop_server || true' EXIT

# Starts coil-serve at TP $1 and sets PORT once it listens.
start_server() {
  local tp=$1 threads=$(( THREADS / $1 ))
  (( threads >= 1 )) || threads=1
  local port_file="$OUT/tp$tp.port"
  rm -f "$port_file"
  # shellcheck disable=SC2086  # SERVER_FLAGS is a list of flags
  # --bind-to none: with -np 1 or 2 Open MPI binds each rank to one core, which would put
  # TP1's two threads on a single core (decode many times slower: docs/deployment.md).
  mpirun -np "$tp" --bind-to none --oversubscribe --allow-run-as-root --mca odls_base_sigkill_timeout 100 \
    "$SERVE" --model "$MODEL" --host 127.0.0.1 --port 0 --port_file "$port_file" \
    --threads "$threads" --drain_timeout 60 --metrics_port 0 $SERVER_FLAGS > "$OUT/tp$tp-serve.log" 2>&1 &
  SERVER_PID=$!
  for _ in $(seq 1 1200); do
    # Written whole (renamed into place). Line 1: the gRPC port; line 2: the metrics port
    # (coil-loadgen reads the preemption counter there).
    if [[ -s "$port_file" ]]; then
      PORT=$(sed -n 1p "$port_file")
      METRICS_PORT=$(sed -n 2p "$port_file")
      return 0
    fi
    kill -0 "$SERVER_PID" 2> /dev/null || break
    sleep 0.1
  done
  echo "compare_tp.sh: coil-serve at TP $tp did not start; see $OUT/tp$tp-serve.log" >&2
  tail -20 "$OUT/tp$tp-serve.log" >&2
  exit 1
}

# Runs one coil-loadgen scenario: $1 = TP, $2 = scenario name, the rest = load flags.
run_scenario() {
  local tp=$1 name=$2
  shift 2
  echo "== TP$tp $name"
  "$LOADGEN" --target "127.0.0.1:$PORT" --label "TP$tp" --prompt-tokens "$PROMPT_TOKENS" \
    --output-tokens "$OUTPUT_TOKENS" --warmup "$WARMUP_NOW" --duration "$DURATION" --drain "$DRAIN" \
    --metrics "127.0.0.1:$METRICS_PORT" \
    --out "$OUT/tp${tp}_$name.json" --summary-tsv "$OUT/summary.tsv" \
    --ttft-cdf "$OUT/tp${tp}_$name.ttft" "$@" | tee "$OUT/tp${tp}_$name.txt"
  WARMUP_NOW=0
}

for tp in $TP_SIZES; do
  start_server "$tp"
  WARMUP_NOW=$WARMUP
  echo "== coil-serve TP$tp on port $PORT ($MODEL)"
  for c in $CONCURRENCY; do
    run_scenario "$tp" "c$c" --concurrency "$c"
  done
  if [[ "$RATES" == auto ]]; then
    # Fractions of the best closed-loop request rate measured so far (column 9: req/s).
    best=$(awk -F'\t' 'NR > 1 && $2 == "closed" && $9 > m { m = $9 } END { print m + 0 }' "$OUT/summary.tsv")
    RATES=$(awk -v b="$best" -v f="$RATE_FRACTIONS" \
      'BEGIN { n = split(f, x, " "); for (i = 1; i <= n; i++) printf "%s%.3g", (i > 1 ? " " : ""), b * x[i] }')
    echo "== open-loop rates (req/s): $RATES"
  fi
  for r in $RATES; do
    run_scenario "$tp" "r$r" --rate "$r" --seed 1
  done
  code=0
  stop_server || code=$?
  echo "== coil-serve TP$tp stopped (exit $code)"
  if [[ $code -ne 0 && $CHECK -eq 1 ]]; then
    echo "compare_tp.sh: coil-serve TP$tp exited with $code after SIGTERM" >&2
    exit 1
  fi
done

# ---- Markdown ----
TSV="$OUT/summary.tsv"
{
  echo "Model: \`$SHAPE\` shape, $DTYPE random weights; prompts $PROMPT_TOKENS tokens, $OUTPUT_TOKENS output tokens (ignore_eos); $DURATION s per scenario; TP1 = 1 rank x $THREADS threads, TP2 = 2 ranks x $(( THREADS / 2 > 0 ? THREADS / 2 : 1 )) thread(s)."
  echo
  echo "| TP | load | sent | errors | req/s | output tok/s | total tok/s | TTFT p50 / p90 / p99 (ms) | ITL p50 / p90 / p99 (ms) | E2E p50 / p90 / p99 (ms) | preemptions |"
  echo "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
  awk -F'\t' 'NR > 1 {
    load = ($2 == "closed") ? sprintf("concurrency %d", $3) : sprintf("rate %g/s", $4)
    printf "| %s | %s | %d | %d | %.2f | %.1f | %.1f | %.0f / %.0f / %.0f | %.1f / %.1f / %.1f | %.0f / %.0f / %.0f | %s |\n",
      $1, load, $5, $7, $9, $10, $11, $12, $13, $14, $16, $17, $18, $20, $21, $22, ($27 == "" || $27 < 0 ? "-" : $27) }' "$TSV"
  echo
  echo "| load | TP1 output tok/s | TP2 output tok/s | TP2 / TP1 | TP1 E2E p50 (ms) | TP2 E2E p50 (ms) |"
  echo "|---|---:|---:|---:|---:|---:|"
  awk -F'\t' 'NR > 1 {
    load = ($2 == "closed") ? sprintf("concurrency %d", $3) : sprintf("rate %g/s", $4)
    if (!(load in seen)) { seen[load] = 1; order[++n] = load }
    tok[$1, load] = $10; e2e[$1, load] = $20 }
    END { for (i = 1; i <= n; i++) { l = order[i]
      ratio = (tok["TP1", l] > 0 && ("TP2", l) in tok) ? sprintf("%.2f", tok["TP2", l] / tok["TP1", l]) : "-"
      printf "| %s | %.1f | %.1f | %s | %.0f | %.0f |\n", l, tok["TP1", l], tok["TP2", l], ratio, e2e["TP1", l], e2e["TP2", l] } }' "$TSV"
} > "$OUT/comparison.md"
echo "== wrote $OUT/comparison.md"
cat "$OUT/comparison.md"

# ---- plots ----
if [[ $HAVE_GNUPLOT -eq 1 ]]; then
  for tp in $TP_SIZES; do
    awk -F'\t' -v l="TP$tp" 'NR > 1 && $1 == l && $2 == "closed"' "$TSV" > "$OUT/tp$tp.closed.dat"
    awk -F'\t' -v l="TP$tp" 'NR > 1 && $1 == l && $2 == "open"' "$TSV" > "$OUT/tp$tp.open.dat"
  done
  term="pngcairo size 900,600 font ',10'"
  gnuplot -e 'set terminal pngcairo' > /dev/null 2>&1 || term="png size 900,600"
  cdf_c=$(echo "$CONCURRENCY" | awk '{ print $(int((NF + 1) / 2)) }')  # the middle concurrency
  (
    cd "$OUT"
    gnuplot << GNUPLOT
set terminal $term
set datafile separator "\t"
set key top left
set grid
set logscale x 2
set output "throughput_vs_concurrency.png"
set title "Output throughput against concurrency ($SHAPE, $DTYPE, prompt $PROMPT_TOKENS, output $OUTPUT_TOKENS)"
set xlabel "concurrent requests (closed loop)"
set ylabel "output tokens/s"
plot "tp1.closed.dat" using 3:10 with linespoints lw 2 pt 7 title "TP1", \
     "tp2.closed.dat" using 3:10 with linespoints lw 2 pt 5 title "TP2"

set output "latency_percentiles.png"
set terminal $term
set multiplot layout 1,3 title "Latency percentiles against concurrency (solid p50, dashed p99)"
set ylabel "ms"
set logscale y
set title "TTFT"
plot "tp1.closed.dat" using 3:12 with linespoints lw 2 lc 1 pt 7 title "TP1 p50", \
     "tp1.closed.dat" using 3:14 with linespoints lw 2 lc 1 dt 2 pt 7 title "TP1 p99", \
     "tp2.closed.dat" using 3:12 with linespoints lw 2 lc 2 pt 5 title "TP2 p50", \
     "tp2.closed.dat" using 3:14 with linespoints lw 2 lc 2 dt 2 pt 5 title "TP2 p99"
set title "ITL"
plot "tp1.closed.dat" using 3:16 with linespoints lw 2 lc 1 pt 7 title "TP1 p50", \
     "tp1.closed.dat" using 3:18 with linespoints lw 2 lc 1 dt 2 pt 7 title "TP1 p99", \
     "tp2.closed.dat" using 3:16 with linespoints lw 2 lc 2 pt 5 title "TP2 p50", \
     "tp2.closed.dat" using 3:18 with linespoints lw 2 lc 2 dt 2 pt 5 title "TP2 p99"
set title "E2E"
plot "tp1.closed.dat" using 3:20 with linespoints lw 2 lc 1 pt 7 title "TP1 p50", \
     "tp1.closed.dat" using 3:22 with linespoints lw 2 lc 1 dt 2 pt 7 title "TP1 p99", \
     "tp2.closed.dat" using 3:20 with linespoints lw 2 lc 2 pt 5 title "TP2 p50", \
     "tp2.closed.dat" using 3:22 with linespoints lw 2 lc 2 dt 2 pt 5 title "TP2 p99"
unset multiplot
unset logscale y

set output "ttft_cdf.png"
set title "TTFT CDF at concurrency $cdf_c"
set logscale x 10
set xlabel "time to first token (ms)"
set ylabel "fraction of requests"
set key bottom right
set yrange [0:1]
plot "tp1_c$cdf_c.ttft" using 1:2 with steps lw 2 title "TP1", \
     "tp2_c$cdf_c.ttft" using 1:2 with steps lw 2 title "TP2"
unset logscale x
set autoscale y

set output "rate_sweep.png"
set multiplot layout 1,2 title "Open-loop rate sweep (Poisson arrivals)"
set key top left
set xlabel "offered load (requests/s)"
set title "Achieved throughput"
set ylabel "completed requests/s"
plot "tp1.open.dat" using 4:9 with linespoints lw 2 pt 7 title "TP1", \
     "tp2.open.dat" using 4:9 with linespoints lw 2 pt 5 title "TP2", \
     x with lines dt 3 lc rgb "gray" title "offered"
set title "End-to-end latency (solid p50, dashed p99)"
set ylabel "ms"
plot "tp1.open.dat" using 4:20 with linespoints lw 2 lc 1 pt 7 title "TP1 p50", \
     "tp1.open.dat" using 4:22 with linespoints lw 2 lc 1 dt 2 pt 7 title "TP1 p99", \
     "tp2.open.dat" using 4:20 with linespoints lw 2 lc 2 pt 5 title "TP2 p50", \
     "tp2.open.dat" using 4:22 with linespoints lw 2 lc 2 dt 2 pt 5 title "TP2 p99"
unset multiplot
GNUPLOT
  )
  echo "== wrote $OUT/throughput_vs_concurrency.png latency_percentiles.png ttft_cdf.png rate_sweep.png"
fi

# ---- --check: every scenario ran at every TP size and its counts add up ----
if [[ $CHECK -eq 1 ]]; then
  scenarios=$(( $(wc -w <<< "$CONCURRENCY") + $(wc -w <<< "$RATES") ))
  expected=$(( scenarios * $(wc -w <<< "$TP_SIZES") ))
  rows=$(awk 'NR > 1' "$TSV" | wc -l)
  if [[ $rows -ne $expected ]]; then
    echo "compare_tp.sh: --check: $rows runs in $TSV; expected $expected" >&2
    exit 1
  fi
  # Columns 5-7: sent, completed, errors.
  if ! awk -F'\t' 'NR > 1 && ($5 != $6 + $7 || $7 != 0 || $6 == 0) { bad = 1; print "bad run: " $0 }
                   END { exit bad }' "$TSV" >&2; then
    echo "compare_tp.sh: --check: a run has errors or counts that do not add up" >&2
    exit 1
  fi
  for f in "$OUT"/tp*_*.json "$OUT/comparison.md"; do
    [[ -s "$f" ]] || { echo "compare_tp.sh: --check: $f is missing or empty" >&2; exit 1; }
  done
  echo "== check passed: $expected runs"
fi
