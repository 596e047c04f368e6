#!/usr/bin/env bash
# A checkpoint larger than the memory a rank may use is refused at start, before any
# weight is read, with the sizes (workers/memory_fit.h): coil-run and coil-serve on a tiny
# random f32 model with --max-host-memory below its weights exit non-zero naming the weight
# bytes (those of the safetensors file's tensors, summed from its header here), the
# available bytes and the advice; under mpirun every rank stops; a cap above the need runs.
# Usage: memory_refusal_test.sh COIL_RUN COIL_MAKE_MODEL [COIL_SERVE [MPIEXEC]]
set -u
coil_run=$1 make_model=$2 coil_serve=${3:-} mpiexec=${4:-}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# shellcheck source=tests/unit/tools/tool_test_lib.sh
source "$(dirname "$0")/tool_test_lib.sh"

# A safetensors file, f32 throughout, with its lm_head (untied): the model holds every
# stored tensor as stored, so its weight bytes are the tensors' bytes in the header.
"$make_model" --shape tiny --dtype f32 --layout hf --format safetensors \
  --set tie_embeddings=false --out "$work/f32" >/dev/null 2>&1 || { echo "make-model failed"; exit 1; }
weights=$(python3 - "$work/f32/model.safetensors" <<'PY'
import json, struct, sys
with open(sys.argv[1], 'rb') as f:
    n = struct.unpack('<Q', f.read(8))[0]
    header = json.loads(f.read(n))
total = 0
for name, t in header.items():
    if name == '__metadata__':
        continue
    assert t['dtype'] == 'F32', t['dtype']
    elements = 1
    for d in t['shape']:
        elements *= d
    total += 4 * elements
print(total)
PY
)
echo "weights in the header: $weights bytes"
check "header summed" test "${weights:-0}" -gt 100000

cap=$((weights / 2))
out=$("$coil_run" --model "$work/f32" --ids 1,2,3 --max-tokens 2 --threads 1 --max-host-memory "$cap" 2>&1)
status=$?
echo "$out" | tail -n 3
check "coil-run refuses: non-zero exit" test "$status" -ne 0
check "coil-run: RESOURCE_EXHAUSTED" grep -q "RESOURCE_EXHAUSTED: .*model too big for host memory" <<<"$out"
check "coil-run names the weight bytes" grep -q "rank 0/1 needs $weights B f32 weights + [0-9]* B state/KV" <<<"$out"
check "coil-run names the available bytes" grep -q "; $cap B ([0-9.]* [KMG]iB) free (--max-host-memory)" <<<"$out"
check "coil-run logs every reading" grep -q -- "MemAvailable [0-9]* bytes.*--max-host-memory $cap bytes" <<<"$out"
check "coil-run advises bf16 weights" grep -q -- "--weights bf16" <<<"$out"
check "coil-run loaded nothing" bash -c "! grep -q '^ids: ' <<<\"\$1\"" _ "$out"

# bf16 matrices: the need shrinks (the vectors stay f32), and the advice no longer says bf16.
out16=$("$coil_run" --model "$work/f32" --ids 1,2,3 --max-tokens 2 --threads 1 --weights bf16 \
  --max-host-memory "$cap" 2>&1)
need16=$(sed -n "s/.*needs \([0-9]*\) B bf16.*/\1/p" <<<"$out16" | head -n1)
check "bf16 weights need less than f32" test "${need16:-$weights}" -lt "$weights"
check "bf16 weights need more than half" test "$((2 * ${need16:-0}))" -gt "$weights"
check "no bf16 advice for bf16 weights" bash -c "! grep -q -- '--weights bf16' <<<\"\$1\"" _ "$out16"

out=$("$coil_run" --model "$work/f32" --ids 1,2,3 --max-tokens 2 --threads 1 --max-host-memory 64GiB 2>&1)
check "coil-run runs under a cap above the need" grep -q '^ids: ' <<<"$out"
out=$("$coil_run" --model "$work/f32" --ids 1,2,3 --max-host-memory lots 2>&1)
check "a bad cap is refused by name" grep -q -- "--max-host-memory is 'lots'" <<<"$out"

if [[ -n $coil_serve ]]; then
  # coil-serve: the weights and its --memory-budget's pools against the cap.
  start=$(date +%s)
  out=$(timeout 60 "$coil_serve" --model "$work/f32" --port 0 --metrics-port -1 --threads 1 \
    --memory-budget 1MiB --max-host-memory "$((weights + 1024))" 2>&1)
  status=$?
  echo "$out" | tail -n 2
  check "coil-serve refuses: non-zero exit" test "$status" -ne 0 -a "$status" -ne 124
  check "coil-serve names the weight bytes" grep -q "loading: RESOURCE_EXHAUSTED: .*needs $weights B f32 weights" <<<"$out"
  check "coil-serve counts the pools" grep -q "needs $weights B f32 weights + 10[0-9][0-9][0-9][0-9][0-9] B state/KV" <<<"$out"
  check "coil-serve advises a smaller budget" grep -q -- "smaller --memory-budget" <<<"$out"
  check "coil-serve refuses within seconds" test $(($(date +%s) - start)) -lt 30
fi

if [[ -n $mpiexec ]]; then
  # Two ranks on one host: each holds about half the weights, and both draw on its memory;
  # the agreed status stops both, rank 0 printing it.
  start=$(date +%s)
  out=$(timeout 60 "$mpiexec" -np 2 --oversubscribe "$coil_run" --model "$work/f32" --ids 1,2,3 \
    --threads 1 --max-host-memory "$cap" 2>&1)
  status=$?
  echo "$out" | tail -n 2
  check "TP2: non-zero exit" test "$status" -ne 0 -a "$status" -ne 124
  check "TP2: the message names rank 0 of 2" grep -q "rank 0/2 needs" <<<"$out"
  check "TP2: the ranks on this host share it" grep -q "x2 ranks here" <<<"$out"
  check "TP2: every rank stops within seconds" test $(($(date +%s) - start)) -lt 30
fi

echo "passed $passed, failed $failed"
test "$failed" -eq 0
