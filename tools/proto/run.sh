#!/usr/bin/env bash
# Device run of the GEMM prototypes: build, check, time; then XLA's dot in the same run.
# WHICH="ws tma xla" selects parts (default all).
set -uo pipefail
cd "$(dirname "$0")"
WHICH=${WHICH:-"ws tma xla"}
python3 gemm_ws_proto.py  # writes gemm_ws.cu and gemm_tma.cu from the templates and the sm90 header
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
if [[ " $WHICH " == *" ws "* ]]; then
  nvcc -gencode=arch=compute_90a,code=sm_90a -O3 -std=c++17 -Xptxas -v -o /tmp/gemm_ws gemm_ws.cu 2>&1 | grep -E "error|spill" | sort | uniq -c
  /tmp/gemm_ws
fi
if [[ " $WHICH " == *" tma "* ]]; then
  nvcc -gencode=arch=compute_90a,code=sm_90a -O3 -std=c++17 -Xptxas -v -o /tmp/gemm_tma gemm_tma.cu -lcuda 2>&1 | grep -E "error|spill" | sort | uniq -c
  /tmp/gemm_tma
fi
if [[ " $WHICH " == *" xla "* ]]; then python3 xla_dot.py 2>&1 | grep -v Warning; fi
