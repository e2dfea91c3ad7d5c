#!/usr/bin/env bash
# Device run of the GEMM prototype: build, check, time; then XLA's dot in the same run.
set -uo pipefail
cd "$(dirname "$0")"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
nvcc -gencode=arch=compute_90a,code=sm_90a -O3 -std=c++17 -Xptxas -v -o /tmp/gemm_ws gemm_ws.cu 2>&1 | grep -E "error|spill" | sort | uniq -c
/tmp/gemm_ws
python3 xla_dot.py 2>&1 | grep -v Warning
