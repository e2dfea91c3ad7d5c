#!/usr/bin/env bash
# Device run: raw launches of generated GEMM variants (tile shape, group size, 2-block multicast
# clusters), burst and sustained, beside cuBLAS; then ncu's DRAM/L2 bytes of some of them.
#   VARIANTS="'128 256 64 4 256 8 mc' ..."  quoted groups: tiles, stages, threads, group, mc|nomc
#   SHAPES="8192x8192x8192 8192x28672x8192"  SECS=2  NO_NCU=1  NCU_VARIANTS=...  NCU_METRICS="a,b c,d"
set -uo pipefail
cd "$(dirname "$0")/../.."
SECS=${SECS:-2}
SHAPES=${SHAPES:-8192x8192x8192}
build() { nvcc -gencode=arch=compute_90a,code=sm_90a -O3 -std=c++17 -o "$1" "$2" -lcuda ${3:-} 2>&1 | grep -E " error"; return ${PIPESTATUS[0]}; }
DEFAULT_VARIANTS="'128 256 64 4 256 8 mc' '128 256 64 4 256 16 nomc' '256 128 64 4 256 8 nomc'"
VARIANTS=${VARIANTS:-$DEFAULT_VARIANTS}
for shape in $SHAPES; do
  read -r M N K <<< "${shape//x/ }"
  echo "##### $M x $N x $K"
  python3 tools/proto/gen_harness.py $M $N $K 128 256 64 4 256 8 nomc sustain=$SECS cublas > /tmp/v0.cu 2>/dev/null
  build /tmp/v0 /tmp/v0.cu -lcublas && /tmp/v0
  eval "set -- $VARIANTS"
  for v in "$@"; do
    python3 tools/proto/gen_harness.py $M $N $K $v sustain=$SECS > /tmp/v.cu 2>/dev/null && build /tmp/v /tmp/v.cu && /tmp/v
  done
done
[ -n "${NO_NCU:-}" ] && exit 0
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
read -r M N K <<< "${SHAPES%% *}"; read -r M N K <<< "${M//x/ }"
NCU_VARIANTS=${NCU_VARIANTS:-"'128 256 64 4 256 8 nomc' '128 256 64 4 256 8 mc'"}
# metric sets separated by spaces (one ncu run each, so that an unknown name costs only its set)
METRIC_SETS=${NCU_METRICS:-"gpu__time_duration.sum,lts__t_bytes.sum,dram__bytes.sum lts__t_sectors_op_read.sum,lts__t_sectors_srcunit_tex_op_read.sum"}
eval "set -- $NCU_VARIANTS"
for v in "$@"; do
  python3 tools/proto/gen_harness.py $M $N $K $v cublas > /tmp/v.cu 2>/dev/null && build /tmp/v /tmp/v.cu -lcublas
  echo "== ncu $v (the generated kernel; then cuBLAS, after the first variant only)"
  for skip in 2 $([ "$v" = "$1" ] && echo 80); do
    for metrics in $METRIC_SETS; do
      timeout 120 "$NCU" --clock-control none --launch-skip $skip --launch-count 1 --metrics "$metrics" /tmp/v 2>&1 \
        | grep -E "==ERR|__|\(" | grep -v "^generated\|^cublas" | head -8
    done
  done
done
