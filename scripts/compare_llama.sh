#!/usr/bin/env bash
# Runs coil and llama.cpp side by side on the same weights, in interleaved rounds, and prints
# one table row per round: the machine's measured FMA peak and memory bandwidth, then
# prefill 512, decode at batch 1 and decode at batch 32 (f32 and bf16 state) for both
# engines, with coil's figures beside their bandwidth bounds at the round's own triad rate.
#
#   scripts/compare_llama.sh --llama LLAMA_BIN_DIR --model COIL_MODEL_DIR --gguf MODEL.gguf
#                            [--build build] [--rounds 3] [--threads 2] [--log FILE]
#
# The model and GGUF file hold the same weights (tools/coil_to_gguf.py writes one from the
# other); llama.cpp is built outside this repository (docs/PERFORMANCE.md, "The whole model
# on the CPU"). Every round's raw output goes to --log (default: a temporary file).
set -euo pipefail

llama="" model="" gguf="" build="build" rounds=3 threads=2 log=""
usage() {
  sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}
while [ $# -gt 0 ]; do
  case "$1" in
    --llama) llama="$2"; shift 2 ;;
    --model) model="$2"; shift 2 ;;
    --gguf) gguf="$2"; shift 2 ;;
    --build) build="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --log) log="$2"; shift 2 ;;
    -h|--help) usage ;;
    *) echo "compare_llama.sh: unknown argument '$1'" >&2; usage ;;
  esac
done
fail() { echo "compare_llama.sh: $*" >&2; exit 2; }
if [ -z "$llama" ] || [ -z "$model" ] || [ -z "$gguf" ]; then usage; fi
for exe in llama-bench llama-batched-bench; do
  [ -x "$llama/$exe" ] || fail "--llama $llama has no $exe: give llama.cpp's build/bin folder"
done
bench="$build/tests/bench"
for exe in cpu_peak_bench memory_bandwidth_bench model_bench; do
  [ -x "$bench/$exe" ] || fail "$bench/$exe is missing: build coil first (--build names its build folder)"
done
[ -f "$model/config.json" ] || fail "--model $model is not a model directory (no config.json)"
[ -f "$gguf" ] || fail "--gguf $gguf does not exist (tools/coil_to_gguf.py writes it)"
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || fail "--rounds '$rounds' is not a positive count"
[[ "$threads" =~ ^[1-9][0-9]*$ ]] || fail "--threads '$threads' is not a positive count"
[ -n "$log" ] || log=$(mktemp /tmp/compare_llama.XXXXXX.log)
: > "$log"

# field FILE PATTERN COLUMN: column COLUMN (of '|'-separated fields) of the first line
# matching PATTERN, blanks trimmed.
field() { grep -E -m1 -- "$2" "$1" | awk -F'|' -v c="$3" '{gsub(/^ +| +$/, "", $c); print $c}'; }
# rate FILE NAME KEY: a Google Benchmark counter (items_per_second, bytes_per_second) in G.
rate() {
  grep -E -m1 -- "$2" "$1" | grep -o "$3=[0-9.]*[kMGT]*" | cut -d= -f2 |
    awk '{v=$1; u=substr(v,length(v)); if (u ~ /[kMGT]/) v=substr(v,1,length(v)-1); else u="";
          s=(u=="k")?1e-6:(u=="M")?1e-3:(u=="T")?1e3:(u=="G")?1:1e-9; printf "%.1f", v*s}'
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{ if (b > 0) printf "%.2f", a / b; else print "-" }'; }

echo "| round (UTC) | peak | triad (read) | prefill 512: coil / llama.cpp | decode batch 1: coil / llama.cpp (of bound) | batch 32, f32 state: coil / llama.cpp (of bound) | batch 32, bf16 state: coil (of bound) |"
echo "|---|---:|---|---|---|---|---|"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for r in $(seq 1 "$rounds"); do
  start=$(date -u +%H:%M:%S)
  "$bench/cpu_peak_bench" --benchmark_filter="BM_Bf16DotPeak/$threads|BM_F32FmaPeakAvx2/$threads" \
    --benchmark_min_time=0.2 > "$tmp/peak" 2>&1 || true
  "$bench/memory_bandwidth_bench" --benchmark_filter="BM_Triad/$threads|BM_Read/$threads" \
    --benchmark_min_time=0.3 --benchmark_repetitions=3 --benchmark_report_aggregates_only=true \
    > "$tmp/bw" 2>&1
  triad=$(rate "$tmp/bw" "^BM_Triad/$threads/.*_mean" bytes_per_second)
  read_gbs=$(rate "$tmp/bw" "^BM_Read/$threads/.*_mean" bytes_per_second)
  [ -n "$triad" ] || fail "memory_bandwidth_bench gave no triad rate (see $log)"
  common=(--model "$model" --threads "$threads" --bandwidth_gbs "$triad")
  "$bench/model_bench" "${common[@]}" --batches 1 --decode-steps 64 --prefill 512 > "$tmp/coil1" 2>&1
  "$llama/llama-bench" -m "$gguf" -t "$threads" -p 512 -n 128 -r 3 > "$tmp/llama1" 2>&1
  "$bench/model_bench" "${common[@]}" --batches 32 --decode-steps 16 --prefill 0 > "$tmp/coil32" 2>&1
  "$bench/model_bench" "${common[@]}" --batches 32 --decode-steps 16 --prefill 0 \
    --state-dtype bf16 > "$tmp/coil32b" 2>&1
  "$llama/llama-batched-bench" -m "$gguf" -t "$threads" -c 2048 -b 2048 -ub 512 -npp 8 -ntg 16 \
    -npl 32 > "$tmp/llama32" 2>&1
  for f in peak bw coil1 llama1 coil32 coil32b llama32; do
    { echo "=== round $r $start: $f"; cat "$tmp/$f"; } >> "$log"
  done

  peak=$(rate "$tmp/peak" "^BM_.*items_per_second" items_per_second)
  prefill=$(field "$tmp/coil1" '^\| prefill' 5)
  b1=$(field "$tmp/coil1" '^\| decode \| 1 ' 5)
  b1_share=$(field "$tmp/coil1" '^\| decode \| 1 ' 9)
  c32=$(field "$tmp/coil32" '^\| decode \| 32 ' 5)
  c32_share=$(field "$tmp/coil32" '^\| decode \| 32 ' 9)
  c32b=$(field "$tmp/coil32b" '^\| decode \| 32 ' 5)
  c32b_share=$(field "$tmp/coil32b" '^\| decode \| 32 ' 9)
  # llama-bench: the last column, "rate ± spread"; llama-batched-bench: S_TG of the -npl row.
  lpp=$(field "$tmp/llama1" 'pp512' 8 | awk '{print $1}')
  ltg=$(field "$tmp/llama1" 'tg128' 8 | awk '{print $1}')
  l32=$(field "$tmp/llama32" '^\|[ ]+8 \|[ ]+16 \|[ ]+32 ' 9)
  for v in prefill b1 c32 c32b lpp ltg l32; do
    [ -n "${!v}" ] || fail "round $r: no figure for $v (the raw output is in $log)"
  done
  echo "| $start | ${peak:--} GFLOP/s | $triad ($read_gbs) GB/s" \
    "| $prefill / $lpp ($(ratio "$prefill" "$lpp")×)" \
    "| $b1 / $ltg ($(ratio "$b1" "$ltg")×; $b1_share)" \
    "| $c32 / $l32 ($(ratio "$c32" "$l32")×; $c32_share)" \
    "| $c32b ($(ratio "$c32b" "$l32")×; $c32b_share) |"
done
echo "raw output: $log" >&2
