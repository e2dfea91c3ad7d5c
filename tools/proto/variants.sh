#!/usr/bin/env bash
# Device run: raw launches of generated GEMM variants (tile shape, group size, 2-block multicast
# clusters), burst and sustained 2 s, beside cuBLAS; then ncu's DRAM/L2 bytes of each kernel.
set -uo pipefail
cd "$(dirname "$0")/../.."
SECS=${SECS:-2}
M=${M:-8192}; N=${N:-8192}; K=${K:-8192}
build() { nvcc -gencode=arch=compute_90a,code=sm_90a -O3 -std=c++17 -o "$1" "$2" -lcuda ${3:-} 2>&1 | grep -E " error"; return ${PIPESTATUS[0]}; }
python3 tools/proto/gen_harness.py $M $N $K 128 256 64 4 256 8 nomc sustain=$SECS cublas > /tmp/v0.cu 2>/dev/null
build /tmp/v0 /tmp/v0.cu -lcublas && /tmp/v0
DEFAULT_VARIANTS="'128 256 64 4 256 8 mc' '128 256 64 4 256 16 nomc' '128 256 64 4 256 4 nomc' '256 128 64 4 256 8 nomc' '256 128 64 4 256 8 mc'"
VARIANTS=${VARIANTS:-$DEFAULT_VARIANTS}  # quoted groups: tiles, stages, threads, group, mc|nomc
eval "set -- $VARIANTS"
for v in "$@"; do
  python3 tools/proto/gen_harness.py $M $N $K $v sustain=$SECS > /tmp/v.cu 2>/dev/null && build /tmp/v /tmp/v.cu && /tmp/v
done
[ -n "${NO_NCU:-}" ] && exit 0
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
for v in "128 256 64 4 256 8 nomc" "128 256 64 4 256 8 mc" "128 256 64 4 256 16 nomc"; do
  python3 tools/proto/gen_harness.py $M $N $K $v cublas > /tmp/v.cu 2>/dev/null && build /tmp/v /tmp/v.cu -lcublas
  echo "== ncu $v"
  timeout 120 "$NCU" --clock-control none --launch-skip 2 --launch-count 1 -k regex:"ts_gemm|nvjet|sm90|gemm" \
    --metrics gpu__time_duration.sum,smsp__cycles_elapsed.avg.per_second,lts__t_bytes.sum,dram__bytes.sum /tmp/v 2>&1 \
    | grep -E "dram__|lts__|gpu__time|cycles_elapsed|\(" | head -12
  timeout 120 "$NCU" --clock-control none --launch-skip 80 --launch-count 1 \
    --metrics gpu__time_duration.sum,smsp__cycles_elapsed.avg.per_second,lts__t_bytes.sum,dram__bytes.sum /tmp/v 2>&1 \
    | grep -E "dram__|lts__|gpu__time|cycles_elapsed|\(" | head -6
done
