#!/usr/bin/env bash
# Device run: generated GEMM kernels timed outside XLA beside the hand-written TMA prototype.
set -uo pipefail
cd "$(dirname "$0")"
build() { nvcc -gencode=arch=compute_90a,code=sm_90a -O3 -std=c++17 -o "$1" "$2" -lcuda 2>&1 | grep -E "error"; return ${PIPESTATUS[0]}; }
python3 gemm_ws_proto.py
build /tmp/gemm_tma gemm_tma.cu && /tmp/gemm_tma | head -1
for round in 1 2; do
for cfg in "8192 8192 8192 128 256 64 4 256 8" "8192 8192 8192 256 128 64 4 256 8"; do
  for mc in mc nomc; do python3 gen_harness.py $cfg $mc > /tmp/g.cu 2>/dev/null && build /tmp/g /tmp/g.cu && /tmp/g; done
done
done
