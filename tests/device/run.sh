#!/usr/bin/env bash
# The GPU check, on a machine with an NVIDIA GPU, nvcc, CMake, Ninja, GCC and Python but
# none of gRPC, Protobuf, MPI, GoogleTest, Abseil or nlohmann_json: builds coil's core
# (COIL_SERVING=OFF, COIL_CUDA=ON) from the repository and third_party_local/ (filled by
# scripts/device_bundle.sh on a Debian machine and carried along), runs the CUDA test
# programs, one coil-run generation on the GPU from a random 130m-shape model, the model
# benchmark and the per-op benchmark (op_bench), the same for a random Nemotron-H hybrid
# (nemotron-130m: logits and greedy tokens against the CPU backend and with decode graphs
# off, decode figures with graphs on and off, prefill figures), and prints one table. Meant to take about 5 minutes, build included.
#
# Usage (from anywhere): tests/device/run.sh
#   environment: OUT=DIR       write the summary and every log there as they come (a run
#                              killed at its time limit still leaves what it had done)
#                BUDGET=500    seconds for the whole run: each step's time limit is cut to
#                              what is left less 5 s, and a step with under 15 s left is
#                              skipped
#                JOBS=16       build jobs          CUDA_ARCH=90   CMAKE_CUDA_ARCHITECTURES
#                BUILD_DIR=build-device            EXTRA_TARGETS="t1 t2"  more test programs
#                SANITIZE=1    also run, last, the CUDA op cases under compute-sanitizer
#                              memcheck, and the scan, mixer and attention cases under
#                              racecheck
# Order: build, the tests, one generation, the benchmarks and the op profile, then the
# sanitizers: what a time limit cuts is what matters least.
# Exit status: 0 when everything built and no test failed.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
started=$(date +%s)
build=${BUILD_DIR:-build-device}
jobs=${JOBS:-16}
arch=${CUDA_ARCH:-90}
budget=${BUDGET:-500}
if [[ ! $budget =~ ^[0-9]+$ ]]; then
  echo "BUDGET is \"$budget\"; give a number of seconds" >&2
  exit 2
fi
logs=${OUT:+$OUT/logs}
logs=${logs:-$build/device-logs}
mkdir -p "$logs"
rows=()     # "| program | passed | failed | skipped | seconds | note |"
bench=()    # the model benchmark's table lines
op_table=() # the op benchmark's table lines
profile=()  # where a step's time goes, op by op
overall=0

elapsed() { echo $(( $(date +%s) - started )); }
note() { printf '[%4ss] %s\n' "$(elapsed)" "$*"; }
# The time limit for a step that wants $1 seconds: what the budget leaves less 5 s, at most
# $1; 0 (skip the step) when under 15 s are left.
limit_for() {
  local left=$(( budget - $(elapsed) - 5 ))
  (( left < 10 )) && { echo 0; return; }
  (( left < $1 )) && { echo "$left"; return; }
  echo "$1"
}
skipped_for_time() { rows+=("| $1 | - | - | - | - | skipped: the ${budget} s budget is spent |"); }
# How a step with exit status $1 under a $2-second limit ended, in words.
ended() {
  case $1 in
    0) echo "passed" ;;
    124) echo "timed out after ${2}s" ;;
    125) echo "skipped (budget)" ;;
    *) echo "exit $1" ;;
  esac
}

# The table so far, written to $logs/summary.md (and with OUT to $OUT/summary.md); called
# after each section, so that a run cut short still leaves its figures.
summary() {
  {
    echo
    echo "## coil device check: $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1), $(git rev-parse --short HEAD 2>/dev/null), $(elapsed) s in all"
    echo
    echo "| program | passed | failed | skipped | seconds | note |"
    echo "|---|---:|---:|---:|---:|---|"
    printf '%s\n' "${rows[@]}"
    if [[ ${#bench[@]} -gt 0 ]]; then
      echo
      printf '%s\n' "${bench[@]}"
    fi
    if [[ ${#op_table[@]} -gt 0 ]]; then
      echo
      printf '%s\n' "${op_table[@]}"
    fi
    if [[ ${#profile[@]} -gt 0 ]]; then
      echo
      printf '%s\n' "${profile[@]}"
    fi
  } > "$logs/summary.md"
  [[ -n ${OUT:-} ]] && cp "$logs/summary.md" "$OUT/summary.md"
  return 0
}

# ---- the machine ----
note "machine"
if command -v nvidia-smi >/dev/null; then
  nvidia-smi > "$logs/nvidia-smi.txt" 2>&1
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader 2>&1 | head -n 8
else
  echo "nvidia-smi not found" | tee "$logs/nvidia-smi.txt"
fi
{ nvcc --version 2>&1 || /usr/local/cuda/bin/nvcc --version 2>&1; cmake --version; ninja --version
  "${CXX:-g++}" --version; nproc; } > "$logs/toolchain.txt" 2>&1
grep -h -E 'release|cmake version|g\+\+' "$logs/toolchain.txt" | head -n 3

# ---- NCCL: the toolkit's, else a Python wheel's (PyTorch brings one), else a search ----
nccl_args=()
find_nccl() {
  local dir
  for dir in "${CUDA_HOME:-}" /usr/local/cuda /usr; do
    [[ -n $dir && -f $dir/include/nccl.h ]] && return 0
  done
  local header lib
  header=$(python3 - <<'EOF' 2>/dev/null
import glob, site, sys
roots = site.getsitepackages() + [site.getusersitepackages()]
for root in roots:
    for path in sorted(glob.glob(root + "/nvidia/**/include/nccl.h", recursive=True)):
        print(path)
        sys.exit(0)
EOF
  )
  if [[ -z $header ]]; then
    header=$(timeout 20 find / -xdev -name nccl.h -path '*include*' 2>/dev/null | head -n 1)
  fi
  [[ -z $header ]] && return 1
  local root
  root=$(dirname "$(dirname "$header")")
  lib=$(find "$root/lib" -maxdepth 1 -name "libnccl.so*" 2>/dev/null | sort | head -n 1)
  [[ -z $lib ]] && return 1
  nccl_args=(-DNCCL_INCLUDE_DIR="$(dirname "$header")" -DNCCL_LIBRARY="$lib")
  echo "NCCL: $header, $lib"
}
find_nccl || echo "NCCL: not found beside the toolkit or in Python's packages; configure will say"

if [[ -d third_party_local ]]; then
  echo "third_party_local: $(du -sh third_party_local | cut -f1)"
elif [[ ! -d /usr/include/absl ]]; then
  echo "third_party_local/ is missing: run scripts/device_bundle.sh on a Debian machine and carry it" >&2
fi

# ---- configure and build (only the device targets) ----
note "configure ($build)"
configure_start=$(date +%s)
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCOIL_SERVING=OFF -DCOIL_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$arch" \
  -DCMAKE_POLICY_VERSION_MINIMUM=3.5 "${nccl_args[@]}" > "$logs/configure.log" 2>&1
configure_status=$?
grep -E '^-- coil:' "$logs/configure.log"
if [[ $configure_status -ne 0 ]]; then
  tail -n 30 "$logs/configure.log"
  rows+=("| configure | - | 1 | - | $(( $(date +%s) - configure_start )) | see configure.log |")
  overall=1
fi

targets=(backend_ops_test cuda_runtime_test batch_invariance_test op_timing_test mamba2_model_test
         attention_ops_test coil-make-model coil-run model_bench op_bench)
if [[ $configure_status -eq 0 ]]; then
  # The whole-model GPU tests, whatever their names: test programs under
  # tests/unit/workers/runner whose name says gpu or cuda.
  mapfile -t model_tests < <(ninja -C "$build" -t targets all 2>/dev/null |
    sed -n -E 's#^tests/unit/workers/runner/([A-Za-z0-9_]*(gpu|cuda)[A-Za-z0-9_]*): .*#\1#p' | sort -u)
  # shellcheck disable=SC2206  # a space-separated list
  targets+=("${model_tests[@]}" ${EXTRA_TARGETS:-})
  note "build: ${targets[*]} (-j$jobs)"
  build_start=$(date +%s)
  # -k 0: a target that fails to compile does not stop the others.
  timeout "$(limit_for 400)" ninja -C "$build" -j "$jobs" -k 0 "${targets[@]}" \
    > "$logs/build.log" 2>&1
  build_status=$?
  build_seconds=$(( $(date +%s) - build_start ))
  if [[ $build_status -ne 0 ]]; then
    grep -E 'error|FAILED' "$logs/build.log" | head -n 20
    rows+=("| build | - | 1 | - | $build_seconds | see build.log |")
    overall=1
  else
    rows+=("| build | ${#targets[@]} targets | 0 | - | $build_seconds | |")
  fi
fi
summary

program() {  # the built file of a target, or nothing
  find "$build" -type f -perm -u+x -name "$1" -not -path '*/CMakeFiles/*' 2>/dev/null | head -n 1
}

# ---- the test programs ----
wrap=()  # a tool the test programs run under (compute-sanitizer), set for one call
run_gtest() {  # run_gtest TARGET TIMEOUT [GTEST_FILTER]
  local name=$1 limit=$2 filter=${3:-} exe
  exe=$(program "$name")
  if [[ -z $exe ]]; then
    rows+=("| $name | - | - | - | - | not built |")
    return
  fi
  limit=$(limit_for "$limit")
  if [[ $limit -eq 0 ]]; then
    skipped_for_time "$name"
    return
  fi
  note "$name (timeout ${limit}s)"
  local start status
  start=$(date +%s)
  local args=(--gtest_color=no)
  [[ -n $filter ]] && args+=("--gtest_filter=$filter")
  timeout "$limit" "${wrap[@]}" "$exe" "${args[@]}" > "$logs/$name.log" 2>&1
  status=$?
  local seconds=$(( $(date +%s) - start ))
  local passed failed skipped extra=""
  passed=$(sed -n -E 's/^\[  PASSED  \] ([0-9]+) test.*/\1/p' "$logs/$name.log" | tail -n 1)
  failed=$(sed -n -E 's/^\[  FAILED  \] ([0-9]+) test.*/\1/p' "$logs/$name.log" | tail -n 1)
  skipped=$(sed -n -E 's/^\[  SKIPPED \] ([0-9]+) test.*/\1/p' "$logs/$name.log" | tail -n 1)
  [[ $status -eq 124 ]] && extra="timed out after ${limit}s"
  [[ $status -ne 0 && $status -ne 124 && -z ${failed:-} ]] && extra="exit $status"
  if [[ $status -ne 0 ]]; then
    overall=1
    grep -E '^\[  FAILED  \] [A-Za-z]' "$logs/$name.log" | head -n 5 | sed 's/^/    /'
  fi
  [[ -n $filter ]] && extra="${extra:+$extra, }only $filter"
  rows+=("| $name | ${passed:-0} | ${failed:-0} | ${skipped:-0} | $seconds | $extra |")
}

run_gtest cuda_runtime_test 60
run_gtest backend_ops_test 120
run_gtest batch_invariance_test 60
run_gtest op_timing_test 60
# The attention ops on the GPU: split = whole = decode rows, batch invariance, relu², and a
# decode graph replayed over growing contexts against eager runs.
run_gtest attention_ops_test 60
summary
# The whole model: the GPU cases of the CPU model test (its CPU cases take minutes), and
# the GPU test programs found above.
run_gtest mamba2_model_test 120 '*Gpu*:*GPU*:*Cuda*:*CUDA*'
for name in "${model_tests[@]:-}" ${EXTRA_TARGETS:-}; do
  [[ -n $name ]] && run_gtest "$name" 120
done
summary

# ---- one generation on the GPU from a random 130m-shape model ----
rm -f "$logs/coil_run.log"
make_model=$(program coil-make-model)
coil_run=$(program coil-run)
model_dir=$(mktemp -d "${TMPDIR:-/tmp}/coil-130m-XXXXXX")
trap 'rm -rf "$model_dir"' EXIT  # and the hybrid's, below
if [[ -n $make_model ]]; then
  note "coil-make-model --shape 130m --dtype bf16"
  if ! "$make_model" --shape 130m --dtype bf16 --out "$model_dir" > "$logs/make_model.log" 2>&1; then
    rows+=("| coil-make-model | 0 | 1 | 0 | - | see make_model.log |")
    overall=1
    make_model=""
  fi
fi
limit=$(limit_for 60)
if [[ -n $make_model && -n $coil_run && $limit -eq 0 ]]; then
  skipped_for_time "coil-run --device cuda"
elif [[ -n $make_model && -n $coil_run ]]; then
  note "coil-run --device cuda"
  start=$(date +%s)
  timeout "$limit" "$coil_run" --model "$model_dir" --device cuda --ids 510,2020,310,1063,3286,273 \
    --max-tokens 16 > "$logs/coil_run.log" 2>&1
  status=$?
  seconds=$(( $(date +%s) - start ))
  sed -n -E '/^(ids|prefill|decode): /p' "$logs/coil_run.log" | sed 's/^/    /'
  if [[ $status -eq 0 ]] && grep -q '^ids: ' "$logs/coil_run.log"; then
    rows+=("| coil-run --device cuda | 1 | 0 | 0 | $seconds | 16 tokens |")
  else
    overall=1
    tail -n 3 "$logs/coil_run.log" | sed 's/^/    /'
    rows+=("| coil-run --device cuda | 0 | 1 | 0 | $seconds | exit $status |")
  fi
fi
summary

# ---- the hybrid: a random nemotron-130m (Mamba2, attention and MLP blocks, bf16) ----
# Greedy tokens equal on the GPU with decode graphs (the default), on the GPU op by op
# (--cuda-graphs=false) and on the CPU backend, and the prompt's logits within bf16
# tolerance (worst row: max |cuda - cpu| / max |cpu| <= 2e-2). Skipped, with a row saying
# so, while coil-make-model has no nemotron-130m shape.
nemo_dir=$(mktemp -d "${TMPDIR:-/tmp}/coil-nemotron-XXXXXX")
trap 'rm -rf "$model_dir" "$nemo_dir"' EXIT
have_nemo=""
if [[ -n ${make_model:-} ]]; then
  note "coil-make-model --shape nemotron-130m --dtype bf16"
  if "$make_model" --shape nemotron-130m --dtype bf16 --out "$nemo_dir" \
      > "$logs/make_model_nemotron.log" 2>&1; then
    have_nemo=1
  else
    rows+=("| nemotron-130m | - | - | - | - | skipped: $(tail -n 1 "$logs/make_model_nemotron.log" | cut -c1-80) |")
  fi
fi
limit=$(limit_for 60)
if [[ -n $have_nemo && -n $coil_run && $limit -eq 0 ]]; then
  skipped_for_time "coil-run nemotron-130m, cuda against cpu"
elif [[ -n $have_nemo && -n $coil_run ]]; then
  note "coil-run nemotron-130m on cuda (graphs on and off) and on cpu"
  start=$(date +%s)
  nemo_status=0
  for run in cuda cuda-nographs cpu; do
    args=(--device "${run%%-*}")
    [[ $run == cuda-nographs ]] && args+=(--cuda-graphs=false)
    timeout "$limit" "$coil_run" --model "$nemo_dir" "${args[@]}" \
      --ids 510,2020,310,1063,3286,273,2020,77 --max-tokens 16 \
      --dump-logits "$logs/nemotron_logits_$run.npy" > "$logs/coil_run_nemotron_$run.log" 2>&1 ||
      nemo_status=$?
  done
  seconds=$(( $(date +%s) - start ))
  ids_cuda=$(grep -m1 '^ids: ' "$logs/coil_run_nemotron_cuda.log")
  ids_nographs=$(grep -m1 '^ids: ' "$logs/coil_run_nemotron_cuda-nographs.log")
  ids_cpu=$(grep -m1 '^ids: ' "$logs/coil_run_nemotron_cpu.log")
  # The worst row's relative error of the two .npy files (f32, C order), without numpy.
  worst=$(python3 - "$logs/nemotron_logits_cuda.npy" "$logs/nemotron_logits_cpu.npy" <<'PY' 2>&1
import array, ast, sys
def load(path):
    data = open(path, "rb").read()
    header_len = int.from_bytes(data[8:10], "little")
    header = ast.literal_eval(data[10:10 + header_len].decode())
    values = array.array("f")
    values.frombytes(data[10 + header_len:])
    return header["shape"], values
(rows, cols), a = load(sys.argv[1])
shape_b, b = load(sys.argv[2])
assert shape_b == (rows, cols), (shape_b, (rows, cols))
worst = 0.0
for r in range(rows):
    ra, rb = a[r * cols:(r + 1) * cols], b[r * cols:(r + 1) * cols]
    scale = max(abs(x) for x in rb) or 1.0
    worst = max(worst, max(abs(x - y) for x, y in zip(ra, rb)) / scale)
print(f"{worst:.3g}")
PY
  )
  echo "    cuda $ids_cuda; cuda without graphs $ids_nographs; cpu $ids_cpu; logits' worst row error $worst"
  same=differ
  [[ -n $ids_cuda && $ids_cuda == "$ids_cpu" && $ids_cuda == "$ids_nographs" ]] && same=equal
  if [[ $nemo_status -eq 0 && $same == equal ]] &&
     python3 -c "import sys; sys.exit(0 if float('$worst') <= 2e-2 else 1)" 2>/dev/null; then
    rows+=("| coil-run nemotron-130m, cuda (graphs on, off) against cpu | 1 | 0 | 0 | $seconds | same 16 tokens; logits within $worst |")
  else
    overall=1
    rows+=("| coil-run nemotron-130m, cuda (graphs on, off) against cpu | 0 | 1 | 0 | $seconds | exit $nemo_status; tokens $same (graphs on, off, cpu); logits $worst |")
  fi
fi
summary

# ---- the model benchmark (figures, no assertions) ----
bench_exe=$(program model_bench)
# bench_run LOG SECONDS ARGS...: one model_bench run on the 130m model, its time limit cut
# to the budget; false when it failed, 125 when the budget left no time for it.
bench_run() {
  local log=$1 limit
  limit=$(limit_for "$2")
  shift 2
  if [[ $limit -eq 0 ]]; then
    skipped_for_time "model_bench $*"
    return 125
  fi
  note "model_bench $* (timeout ${limit}s)"
  local status
  timeout "$limit" "$bench_exe" --model "$model_dir" --device cuda "$@" > "$logs/$log" 2>&1
  status=$?
  if [[ $status -ne 0 && -n ${extra_run:-} ]]; then  # the main run reports itself
    overall=1
    tail -n 3 "$logs/$log" | sed 's/^/    /'
    rows+=("| model_bench $* | 0 | 1 | 0 | - | $(ended "$status" "$limit") |")
  fi
  return $status
}
rm -f "$logs"/model_bench*.log "$logs"/op_bench*.log  # a skipped run leaves no old figures
if [[ -n $bench_exe && -n $make_model ]]; then
  start=$(date +%s)
  bench_run model_bench.log 120 --batches 1,8,64,256 --decode-steps 32 --prefill 2048 \
    --prefill-seqs 8
  status=$?
  seconds=$(( $(date +%s) - start ))
  mapfile -t bench < <(grep -E '^(bounds:|\| (phase|---|decode|prefill))' "$logs/model_bench.log" 2>/dev/null)
  if [[ $status -eq 0 ]]; then
    rows+=("| model_bench --device cuda | 1 | 0 | 0 | $seconds | figures below |")
  elif [[ $status -ne 125 ]]; then
    overall=1
    tail -n 3 "$logs/model_bench.log" 2>/dev/null | sed 's/^/    /'
    rows+=("| model_bench --device cuda | 0 | 1 | 0 | $seconds | exit $status |")
  fi
  summary
  extra_run=1  # the runs below add a row of their own when they fail
  # Where each step's time goes, op by op (decode eager, so that every op is seen; the
  # chunked scan by phase too), for the next round of work.
  bench_run model_bench_profile.log 90 --batches 1,256 --decode-steps 16 --prefill 2048 \
    --prefill-seqs 8 --profile-ops &&
    mapfile -t profile < <(sed -n '/^decode, batch .*op by op/,$p' "$logs/model_bench_profile.log" |
                           grep -v '^matmul ')
  summary
  # cuBLASLt's algorithms pinned for single rows instead of 64 (--cuda-matmul-rows): what
  # decode at batch 1 gains (more blocks over N) and what prefill loses, in one run; its
  # op profile (in the log, after the figures, which it does not slow) gives each matmul
  # shape's time at one row under either pinning: what a decode matmul of coil's own
  # would have to beat.
  bench_run model_bench_rows1.log 90 --batches 1,256 --decode-steps 32 --prefill 2048 \
    --prefill-seqs 8 --cuda-matmul-rows 1 --profile-ops &&
    mapfile -t -O "${#bench[@]}" bench < <(grep -E '^\| (decode|prefill)' "$logs/model_bench_rows1.log" |
                                           sed -E 's/^\| (decode|prefill) \|/| \1, matmul rows 1 |/')
  # The same decode steps with the mixer as three ops: what the fused MixerDecode saves.
  bench_run model_bench_unfused.log 60 --batches 1,256 --decode-steps 32 --prefill 0 \
    --fused-mixer=false &&
    mapfile -t -O "${#bench[@]}" bench < <(grep -E '^\| decode' "$logs/model_bench_unfused.log" |
                                           sed 's/^| decode |/| decode, mixer unfused |/')
  # And with programmatic dependent launch for the kernels that take it (off by default).
  bench_run model_bench_pdl.log 60 --batches 1,256 --decode-steps 32 --prefill 0 --cuda-pdl &&
    mapfile -t -O "${#bench[@]}" bench < <(grep -E '^\| decode' "$logs/model_bench_pdl.log" |
                                           sed 's/^| decode |/| decode, pdl |/')
  # The algorithms each run pinned (cuBLASLt's ids, cublasLt.h): the default's, then rows 1's.
  mapfile -t -O "${#bench[@]}" bench < <(echo
    grep -h -E '^matmul ' "$logs/model_bench.log" "$logs/model_bench_rows1.log" 2>/dev/null)
  summary
fi

# ---- the hybrid's figures: decode at batch 1, 64 and 256 at 4k context (through decode
# graphs, then at batch 1 and 64 op by op: what the graphs save) and prefill 8 x 2048,
# bf16 ----
if [[ -n $bench_exe && -n $have_nemo ]]; then
  context_args=(--contexts 4096)
  limit=$(limit_for 90)
  if [[ $limit -eq 0 ]]; then
    skipped_for_time "model_bench nemotron-130m"
  else
    note "model_bench nemotron-130m (timeout ${limit}s)"
    start=$(date +%s)
    timeout "$limit" "$bench_exe" --model "$nemo_dir" --device cuda --batches 1,64,256 \
      --decode-steps 16 --prefill 2048 --prefill-seqs 8 "${context_args[@]}" \
      > "$logs/model_bench_nemotron.log" 2>&1
    status=$?
    seconds=$(( $(date +%s) - start ))
    if [[ $status -eq 0 ]]; then
      rows+=("| model_bench nemotron-130m | 1 | 0 | 0 | $seconds | figures below |")
      mapfile -t -O "${#bench[@]}" bench < <(echo
        grep -E '^bounds:' "$logs/model_bench_nemotron.log" | sed 's/^/nemotron-130m /'
        grep -E '^\| (decode|prefill)' "$logs/model_bench_nemotron.log" |
          sed -E 's/^\| (decode|prefill) \|/| \1, nemotron-130m |/')
    else
      overall=1
      tail -n 3 "$logs/model_bench_nemotron.log" | sed 's/^/    /'
      rows+=("| model_bench nemotron-130m | 0 | 1 | 0 | $seconds | $(ended "$status" "$limit") |")
    fi
  fi
  limit=$(limit_for 45)
  if [[ $limit -eq 0 ]]; then
    skipped_for_time "model_bench nemotron-130m --cuda-graphs=false"
  else
    note "model_bench nemotron-130m --cuda-graphs=false (timeout ${limit}s)"
    timeout "$limit" "$bench_exe" --model "$nemo_dir" --device cuda --batches 1,64 \
      --decode-steps 16 --prefill 0 "${context_args[@]}" --cuda-graphs=false \
      > "$logs/model_bench_nemotron_nographs.log" 2>&1
    status=$?
    if [[ $status -eq 0 ]]; then
      mapfile -t -O "${#bench[@]}" bench < <(grep -E '^\| decode' "$logs/model_bench_nemotron_nographs.log" |
                                             sed 's/^| decode |/| decode, nemotron-130m, graphs off |/')
    else
      overall=1
      tail -n 3 "$logs/model_bench_nemotron_nographs.log" | sed 's/^/    /'
      rows+=("| model_bench nemotron-130m --cuda-graphs=false | 0 | 1 | 0 | - | $(ended "$status" "$limit") |")
    fi
  fi
  summary
fi

# ---- per-op figures (no assertions): decode at 1 and 256 sequences and prefill of 2048
# tokens for every op, and the 16k-token prefill for the ops other than the vocabulary-wide
# matmul, embedding and argmax (gigabytes of random inputs, seconds of host time) ----
op_exe=$(program op_bench)
if [[ -n $op_exe ]]; then
  start=$(date +%s)
  status=125  # 125: skipped, the budget spent
  status_16k=125
  limit=$(limit_for 120)
  limit_main=$limit
  if [[ $limit -gt 0 ]]; then
    note "op_bench --device cuda (timeout ${limit}s)"
    timeout "$limit" "$op_exe" --device cuda --rows 1,256,2048 --repeats 50 > "$logs/op_bench.log" 2>&1
    status=$?
  fi
  limit=$(limit_for 60)
  if [[ $limit -gt 0 ]]; then
    timeout "$limit" "$op_exe" --device cuda --rows 16384 --repeats 50 \
      --ops SsmScan,CausalConv1d,AddRmsNorm,GatedSumSquares,GatedNormApply,GatedRmsNorm \
      > "$logs/op_bench_16k.log" 2>&1
    status_16k=$?
  fi
  # The attention ops beyond the 4k context of the run above (whose decode 256 row is the
  # bandwidth target): decode rows at 32k context, and one 8k-token prompt (the tensor-core
  # target), each beside its bound.
  status_attn=125
  limit=$(limit_for 60)
  if [[ $limit -gt 0 ]]; then
    { timeout "$limit" "$op_exe" --device cuda --rows 1,8 --context 32768 --repeats 50 \
        --ops PagedAttention,KvCacheWrite &&
      timeout "$limit" "$op_exe" --device cuda --rows 8192 --context 8192 --repeats 50 \
        --ops PagedAttention; } > "$logs/op_bench_attention.log" 2>&1
    status_attn=$?
  fi
  seconds=$(( $(date +%s) - start ))
  # The first log's header and rows, then the others' rows (data rows start "| Op").
  mapfile -t op_table < <(grep -E '^op_bench:' "$logs/op_bench.log" 2>/dev/null; echo
                          grep -E '^\|' "$logs/op_bench.log" 2>/dev/null
                          grep -E '^\| [A-Z]' "$logs/op_bench_16k.log" 2>/dev/null
                          sed -E 's/^\| (PagedAttention|KvCacheWrite) \|/| \1, context 32k or 8k |/' \
                            "$logs/op_bench_attention.log" 2>/dev/null | grep -E '^\| [A-Z]'
                          echo
                          echo "PagedAttention bounds: decode, the K/V bytes over 4.8 TB/s (the %" \
                               "column; target 60% at 256 x 4k); prefill, 989 TFLOP/s of dense" \
                               "bf16 tensor-core peak (H200; target 40% at 8k tokens)")
  failed=$(cat "$logs/op_bench.log" "$logs/op_bench_16k.log" "$logs/op_bench_attention.log" \
             2>/dev/null | grep -c '| failed: ')
  if [[ $status -eq 0 && $status_16k -eq 0 && ( $status_attn -eq 0 || $status_attn -eq 125 ) ]]; then
    rows+=("| op_bench --device cuda | 2 | 0 | 0 | $seconds | figures below |")
  elif [[ $status -eq 125 && $status_16k -eq 125 ]]; then
    skipped_for_time "op_bench --device cuda"
  else
    overall=1
    tail -n 3 "$logs/op_bench.log" "$logs/op_bench_16k.log" 2>/dev/null | sed 's/^/    /'
    rows+=("| op_bench --device cuda | - | $failed cases | 0 | $seconds | rows 1-2048: $(ended "$status" "$limit_main"); 16k: $(ended "$status_16k" "$limit"); attention: $(ended "$status_attn" "$limit") |")
  fi
  summary
fi

# ---- last, as they are slow: the sanitizers ----
# SANITIZE=1: the CUDA op cases again under compute-sanitizer's memcheck (out-of-bounds and
# misaligned accesses), e.g. on a first run of new kernels. Off by default: it is slow.
if [[ ${SANITIZE:-0} == 1 ]]; then
  if command -v compute-sanitizer >/dev/null; then
    wrap=(compute-sanitizer --tool memcheck --error-exitcode 99)
    cp "$(program backend_ops_test)" "$build/backend_ops_test_memcheck" 2>/dev/null &&
      run_gtest backend_ops_test_memcheck 240 '*cuda*'
    # The tiled SSD kernels (fp32 and bf16 tensor-core forms), the fused mixer decode and the
    # paged attention share memory between warps across barriers: racecheck finds a missing
    # one.
    wrap=(compute-sanitizer --tool racecheck --error-exitcode 99)
    cp "$(program backend_ops_test)" "$build/backend_ops_test_racecheck" 2>/dev/null &&
      run_gtest backend_ops_test_racecheck 180 '*SsmScan_cuda*:*MixerDecode_cuda*:*PagedAttention_cuda*'
    wrap=()
  else
    rows+=("| memcheck | - | - | - | - | compute-sanitizer not found |")
  fi
fi

summary
cat "$logs/summary.md"
exit "$overall"
