#!/usr/bin/env bash
# Two PEs on GPU 0 under MPS, one program, with every log kept: what tools/gpu_test.sh's shared_two_pes does,
# spelled out for diagnosis. Usage: bash tools/two_pes_diag.sh LIMIT_S ARGS... (ARGS as for the launcher).
set -u
limit=$1; shift
LOG=${OUT:-/tmp/ts_diag}; mkdir -p "$LOG"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps_pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps_log
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
nvidia-cuda-mps-control -d; echo "mps control: $?"
common=(NODES=2 GPUS=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=${PORT:-29711} CUDA_VISIBLE_DEVICES=0
        CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50 XLA_PYTHON_CLIENT_MEM_FRACTION=0.3 NVSHMEM_SYMMETRIC_SIZE=2G
        TILESCALE_PES_SHARE_GPU=1)
( for i in $(seq 1 $((limit / 10))); do sleep 10; echo "--- t=$((i * 10))s"; nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader; done ) > "$LOG/smi.log" 2>&1 &
sampler=$!
env "${common[@]}" NODE_RANK=1 timeout "$limit" python3 -m jax_tilescale.launch --timeout $((limit - 10)) "$@" > "$LOG/pe1.log" 2>&1 &
p1=$!
env "${common[@]}" NODE_RANK=0 timeout "$limit" python3 -m jax_tilescale.launch --timeout $((limit - 10)) "$@" > "$LOG/pe0.log" 2>&1
rc0=$?; wait $p1; rc1=$?
kill $sampler 2>/dev/null
echo quit | nvidia-cuda-mps-control
echo "pe 0 exit $rc0, pe 1 exit $rc1"
cat /tmp/mps_log/control.log 2>/dev/null | tail -5 > "$LOG/mps_control.log"; cat /tmp/mps_log/server.log 2>/dev/null | tail -20 > "$LOG/mps_server.log"
tail -25 "$LOG/pe0.log"; echo ===; tail -15 "$LOG/pe1.log"; echo ===; tail -6 "$LOG/smi.log"; tail -5 "$LOG/mps_server.log"
