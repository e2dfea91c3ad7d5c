#!/usr/bin/env bash
# The GPU check of jax_tilescale, for the lent 2 x H200 machine (offline, Python 3.12, jax 0.11.2,
# NVSHMEM 3.4.5). From the repository root, with the nvshmem4py-cu13 wheel in .whl/:
#
#   bash tools/gpu_test.sh            # build, install, GPU tests, examples
#   bash tools/gpu_test.sh bench      # ... then the benchmarks
#
# Logs go to $OUT (or /tmp/ts_gpu); a summary table is printed last.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1  # never multicast here
export PYTHONUNBUFFERED=1
export NVSHMEM_SYMMETRIC_SIZE=${NVSHMEM_SYMMETRIC_SIZE:-8G}
export TILESCALE_CACHE_DIR=${TILESCALE_CACHE_DIR:-/tmp/ts_cache}
LOG=${OUT:-/tmp/ts_gpu}
mkdir -p "$LOG"
NGPU=$(nvidia-smi -L 2>/dev/null | wc -l)
declare -a SUMMARY

step() {  # step NAME COMMAND...: runs, logs, records pass/fail and the time
  local name=$1; shift
  local t0=$SECONDS
  echo "=== $name: $*"
  "$@" 2>&1 | tee "$LOG/$name.log"
  local rc=${PIPESTATUS[0]}
  SUMMARY+=("$(printf '%-22s %-6s %4ds' "$name" "$([ "$rc" = 0 ] && echo ok || echo FAIL:$rc)" $((SECONDS - t0)))")
  return "$rc"
}

if compgen -G ".whl/*.whl" > /dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
step build python3 -m pip install -q --no-build-isolation --no-deps -e . || { printf '%s\n' "${SUMMARY[@]}"; exit 1; }
python3 -c "import jax_tilescale._ffi as m; print('ffi extension:', m.__file__)"
step codegen_smoke python3 -m pytest -q tests/codegen/test_gpu_smoke.py -o addopts=""
step gpu_tests python3 -m jax_tilescale.launch -n "$NGPU" --timeout 900 -m pytest tests/gpu -q -x -o addopts=""
step simple_shift python3 -m jax_tilescale.launch -n "$NGPU" --timeout 300 examples/simple_shift.py --m 4096 --n 1024
step allgather python3 -m jax_tilescale.launch -n "$NGPU" --timeout 300 examples/allgather.py --m 4096 --n 1024
if [ "${1:-}" = bench ]; then
  step bench_allgather python3 -m jax_tilescale.launch -n "$NGPU" --timeout 600 benchmarks/bench_allgather.py
  grep -A20 "all-gather," "$LOG/bench_allgather.log" | sed 's/^\[rank 0\] //' | grep -v '^\[rank' || true
fi
echo "=== summary ($(date -u +%F), $NGPU GPU(s))"
printf '%s\n' "${SUMMARY[@]}"
