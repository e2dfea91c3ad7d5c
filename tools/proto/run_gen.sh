#!/usr/bin/env bash
# Device run: generated GEMM kernels timed outside XLA beside the hand-written TMA prototype.
set -uo pipefail
cd "$(dirname "$0")"
build() { nvcc -gencode=arch=compute_90a,code=sm_90a -O3 -std=c++17 -o "$1" "$2" -lcuda 2>&1 | grep -E "error"; return ${PIPESTATUS[0]}; }
python3 gemm_ws_proto.py
build /tmp/gemm_tma gemm_tma.cu && /tmp/gemm_tma | head -2
for cfg in "8192 8192 8192 256 128 64 4 256 8" "8192 8192 8192 256 128 64 4 256 1" "8192 8192 8192 128 256 64 4 256 8"; do
  python3 gen_harness.py $cfg > /tmp/g.cu 2>/dev/null && build /tmp/g /tmp/g.cu && /tmp/g
  sed 's/int64_t ts_i0/int ts_i0/g' /tmp/g.cu > /tmp/g32.cu && build /tmp/g32 /tmp/g32.cu && echo -n "int loop: " && /tmp/g32
done
