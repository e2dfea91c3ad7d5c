#!/usr/bin/env bash
# The GPU check of jax_tilescale, for the lent H200 machines (offline, Python 3.12, jax 0.11.2,
# NVSHMEM 3.4.5). From the repository root, with the nvshmem4py-cu13 wheel in .whl/:
#
#   bash tools/gpu_test.sh            # build, install, GPU tests, examples, two "nodes" on one machine
#   bash tools/gpu_test.sh bench      # ... then the benchmarks
#   STEPS="gpu_tests two_nodes" bash tools/gpu_test.sh   # only some steps (names as in the summary)
#
# With one GPU, the suite runs in two passes: the single-GPU tests (tests/gpu/test_compute_gpu.py, ...)
# as one process, and everything that needs two PEs as two processes sharing GPU 0 under MPS
# (../shared/notes/two_pes_one_gpu.md; TILESCALE_PES_SHARE_GPU=1 makes tests that need an XLA
# collective, which NCCL refuses there, skip with that reason). With two or more GPUs: one process per GPU.
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

# STEPS="gpu_tests two_nodes" runs only those steps (the build always runs); default: all of them.
want() { [ -z "${STEPS:-}" ] || [[ " $STEPS " == *" $1 "* ]]; }
# The two-PE suite's halves (one GPU: two PEs on it), each file in one of them (tests/tools/test_gpu_tools.py checks);
# STEPS=gpu_tests_2pe names both.
TWO_PE_A="tests/gpu/test_examples_gpu.py tests/gpu/test_compute_gpu.py tests/gpu/test_dependent_launch_gpu.py tests/gpu/test_faults_gpu.py tests/gpu/test_overlap_gpu.py tests/gpu/test_views_gpu.py"
TWO_PE_B="tests/gpu/test_primitives_gpu.py tests/gpu/test_command_buffers_gpu.py tests/gpu/test_kernel_staging_gpu.py tests/gpu/test_loads_gpu.py tests/gpu/test_workspace_gpu.py tests/gpu/test_zero_copy_gpu.py"
if [[ " ${STEPS:-} " == *" gpu_tests_2pe "* ]]; then STEPS="$STEPS gpu_tests_2pe_a gpu_tests_2pe_b"; fi

step() {  # step NAME COMMAND...: runs, logs, records pass/fail and the time
  local name=$1; shift
  if [ "$name" != build ] && ! want "$name"; then return 0; fi
  local t0=$SECONDS
  echo "=== $name: $*"
  "$@" 2>&1 | tee "$LOG/$name.log"
  local rc=${PIPESTATUS[0]}
  SUMMARY+=("$(printf '%-22s %-6s %4ds' "$name" "$([ "$rc" = 0 ] && echo ok || echo FAIL:$rc)" $((SECONDS - t0)))")
  return "$rc"
}

# Two "nodes" of one GPU each on this machine: two launchers (NODES=2, NODE_RANK=0/1, GPUS=1) that meet at
# MASTER_PORT on loopback. Each node's rank must drive its own GPU: MODE=cvd hides the other GPU
# (CUDA_VISIBLE_DEVICES=k, the usual multi-node picture), MODE=devices keeps both visible and picks GPU k with
# --devices k (the fallback if NVSHMEM dislikes per-process CUDA_VISIBLE_DEVICES).
# two_nodes PORT MODE TIMEOUT SCRIPT [ARGS...]: prints both nodes' output, then "node 0 exit A, node 1 exit B".
two_nodes() {
  local port=$1 mode=$2 limit=$3; shift 3
  local -a node_env=(NODES=2 GPUS=1 MASTER_ADDR=127.0.0.1 MASTER_PORT="$port")
  local -a pick0=(CUDA_VISIBLE_DEVICES=0) pick1=(CUDA_VISIBLE_DEVICES=1) flag0=() flag1=()
  if [ "$mode" = devices ]; then pick0=(); pick1=(); flag0=(--devices 0); flag1=(--devices 1); fi
  env "${node_env[@]}" NODE_RANK=1 "${pick1[@]}" \
    python3 -m jax_tilescale.launch --timeout "$limit" "${flag1[@]}" "$@" > "$LOG/node1.out" 2>&1 &
  local pid1=$!
  env "${node_env[@]}" NODE_RANK=0 "${pick0[@]}" \
    python3 -m jax_tilescale.launch --timeout "$limit" "${flag0[@]}" "$@" 2>&1 | sed -u 's/^/[node 0] /'
  local rc0=${PIPESTATUS[0]}
  wait "$pid1"; local rc1=$?
  sed 's/^/[node 1] /' "$LOG/node1.out"
  echo "node 0 exit $rc0, node 1 exit $rc1"
  [ "$rc0" = 0 ] && [ "$rc1" = 0 ]
}

# A rank fails while its peer (on the other "node", so no launcher stops it) waits on the GPU for its signal:
# the peer's watchdog must end it within seconds (exit 79), naming the failed rank.
two_nodes_fault() {
  local t0=$SECONDS out
  out=$(two_nodes "$1" "$2" 120 tests/gpu/scripts/peer_fails_while_waiting.py 2>&1)
  echo "$out"
  local took=$((SECONDS - t0))
  echo "took ${took}s"
  grep -q "node 0 exit 79, node 1 exit 1" <<<"$out" \
    && grep -q "\[jax_tilescale\] rank 1 failed: RuntimeError: rank 1 fails on purpose" <<<"$out" \
    && [ "$took" -lt 100 ]
}

if compgen -G ".whl/*.whl" > /dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi

# Two PEs (processes) on GPU 0 under MPS: two launcher "nodes" of one rank each, both seeing only GPU 0.
# shared_two_pes PORT TIMEOUT ARGS...: ARGS as for the launcher (a script, or -m module ...).
mps_started=0
start_mps() {
  [ "$mps_started" = 1 ] && return 0
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps_pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps_log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  # Steps run in subshells (step pipes through tee), so an earlier step may have started the daemon already.
  nvidia-cuda-mps-control -d 2>/dev/null || pgrep -f nvidia-cuda-mps-control >/dev/null || return 1
  mps_started=1
}
stop_mps() { echo quit | nvidia-cuda-mps-control 2>/dev/null; mps_started=0; }
trap stop_mps EXIT
# shared_pes N PORT TIMEOUT ARGS...: N PEs (processes) on GPU 0, each a launcher "node" of one rank; rank 0's
# output is printed as it comes, the others' after it ends (in $LOG/peK.out).
shared_pes() {
  local n=$1 port=$2 limit=$3; shift 3
  start_mps || return 1
  local frac; frac=$(python3 -c "print(round(0.6 / $n, 3))")
  local -a envn=(NODES="$n" GPUS=1 MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" CUDA_VISIBLE_DEVICES=0
                 CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=$((100 / n)) XLA_PYTHON_CLIENT_MEM_FRACTION="$frac"
                 NVSHMEM_SYMMETRIC_SIZE=2G TILESCALE_PES_SHARE_GPU=1)
  local -a pids=()
  for ((k = 1; k < n; k++)); do
    env "${envn[@]}" NODE_RANK=$k python3 -m jax_tilescale.launch --timeout "$limit" "$@" > "$LOG/pe$k.out" 2>&1 &
    pids+=($!)
  done
  env "${envn[@]}" NODE_RANK=0 python3 -m jax_tilescale.launch --timeout "$limit" "$@" 2>&1 | sed -u 's/^/[pe 0] /'
  local rc0=${PIPESTATUS[0]} ok=1 rck
  [ "$rc0" = 0 ] || ok=0
  local codes="pe 0 exit $rc0"
  for ((k = 1; k < n; k++)); do
    wait "${pids[$((k - 1))]}"; rck=$?
    sed "s/^/[pe $k] /" "$LOG/pe$k.out"
    codes+=", pe $k exit $rck"
    [ "$rck" = 0 ] || ok=0
  done
  echo "$codes"
  # Quit MPS after each shared run: a later single-process step (a benchmark) would otherwise run as an MPS
  # client too, its launches passing through the MPS server (measured: +0.5 us per cuLaunchKernel).
  stop_mps
  [ "$ok" = 1 ]
}
shared_two_pes() { shared_pes 2 "$@"; }

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
# SKIP_BUILD=1: the extension is built and installed already (tools/ab_gpu.sh runs this script once per variant).
if [ "${SKIP_BUILD:-0}" != 1 ]; then
  step build python3 -m pip install -q --no-build-isolation --no-deps -e . || { printf '%s\n' "${SUMMARY[@]}"; exit 1; }
fi
python3 -c "import jax_tilescale._ffi as m; print('ffi extension:', m.__file__)"
# CPU-suite checks that depend on this machine's Python (3.12) and JAX (0.11.2): run on simulated CPU devices.
step python312_checks env JAX_PLATFORMS=cpu python3 -m pytest -q -rs -p no:cacheprovider tests/ir/test_truth_test.py \
  tests/runtime/test_abi.py tests/jax
step codegen_smoke python3 -m pytest -q tests/codegen/test_gpu_smoke.py -o addopts=""
# One process per test worker on GPU 0 (nothing here needs NVSHMEM); compiling the kernels is most of the time, so
# pytest-xdist spreads them over the CPUs when it is installed (the image has it).
XDIST=(); python3 -c "import xdist" 2>/dev/null && XDIST=(-n "${XDIST_WORKERS:-8}")
# Bounded (GPU_TESTS_TIMEOUT, default 420 s; about 60-80 s when all pass): a kernel that hangs (a deadlocked
# barrier spins forever) fails this step with 124 instead of taking the whole device call and the steps after it.
step gpu_tests_1pe timeout -k 10 "${GPU_TESTS_TIMEOUT:-420}" env CUDA_VISIBLE_DEVICES=0 \
  XLA_PYTHON_CLIENT_PREALLOCATE=false \
  python3 -m pytest tests/gpu -m "not multi_pe" -q -o addopts="" -p no:cacheprovider "${XDIST[@]}"
# STEPS=pick_1pe PICK_1PE='tests/gpu/test_x.py -k "a or b"': some one-PE GPU tests only (the pytest arguments as
# written, quotes included), bounded as gpu_tests_1pe is.
if [[ " ${STEPS:-} " == *" pick_1pe "* ]]; then
  step pick_1pe timeout -k 10 "${GPU_TESTS_TIMEOUT:-420}" env CUDA_VISIBLE_DEVICES=0 XLA_PYTHON_CLIENT_PREALLOCATE=false \
    bash -c "python3 -m pytest -m 'not multi_pe' -q -o addopts='' -p no:cacheprovider ${XDIST[*]} ${PICK_1PE:?PICK_1PE names the tests}"
fi
step gemm_example env CUDA_VISIBLE_DEVICES=0 python3 examples/gemm.py
step softmax_example env CUDA_VISIBLE_DEVICES=0 python3 examples/softmax.py
if [ "$NGPU" -ge 2 ]; then
  step gpu_tests python3 -m jax_tilescale.launch -n "$NGPU" --timeout 480 -m pytest tests/gpu -m multi_pe -q \
    -o addopts="" -p no:cacheprovider
  for ex in "simple_shift.py --m 4096 --n 1024" "allgather.py --m 4096 --n 1024" "primitives/thread_signal.py" \
            "allgather_gemm.py --m 256 --k 256 --n 128" "all_to_all.py" "moe_dispatch.py" "gemm_allreduce_view.py --m 128 --k 128 --n 64"; do
    step "ex_${ex%%.py*}" python3 -m jax_tilescale.launch -n "$NGPU" --timeout 300 examples/$ex
  done
else  # one GPU: what needs two PEs runs as two processes on it
  # -v: the launcher prints whole lines, so -q's dots would stay hidden until a line of them is full.
  # In two halves (STEPS=gpu_tests_2pe runs both, gpu_tests_2pe_a or _b one): the whole ran 566 s of its 580 on an
  # H100 (2026-12-05), so one call could not hold it once it grew; --durations names the slowest of each half.
  # TWO_PE_K='test_loads_gpu or test_zero_copy_gpu': only the tests pytest's -k selects (a half's part, when a call
  # cannot hold the whole half).
  TWO_PE_SELECT=(); [ -n "${TWO_PE_K:-}" ] && TWO_PE_SELECT=(-k "$TWO_PE_K")
  # shellcheck disable=SC2086
  step gpu_tests_2pe_a shared_two_pes 29611 "${TWO_PE_TIMEOUT:-580}" -m pytest $TWO_PE_A -m multi_pe -v -rs -o addopts="" \
    -p no:cacheprovider --durations=10 "${TWO_PE_SELECT[@]}"
  # shellcheck disable=SC2086
  step gpu_tests_2pe_b shared_two_pes 29615 "${TWO_PE_TIMEOUT:-580}" -m pytest $TWO_PE_B -m multi_pe -v -rs -o addopts="" \
    -p no:cacheprovider --durations=10 "${TWO_PE_SELECT[@]}"
  port=29621
  for ex in "simple_shift.py --m 4096 --n 1024" "allgather.py --m 4096 --n 1024" "primitives/thread_signal.py" \
            "allgather_gemm.py --m 256 --k 256 --n 128" "primitives/put_block.py" "primitives/get_block.py" \
            "primitives/sync.py" "moe_dispatch.py --tokens 1024 --hidden 1024" "gemm_allreduce_view.py --m 128 --k 128 --n 64" \
            "all_to_all.py --tokens 1024 --hidden 1024 --offsets host"; do
    name=${ex%%.py*}; step "ex2_${name##*/}" shared_two_pes "$port" "${EX_TIMEOUT:-300}" examples/$ex; port=$((port + 2))
  done
  # 2 x 2 meshes (issue 4's SUMMA and Cannon, issue 17's views): four PEs on the one GPU
  for ex in summa.py cannon.py summa_view.py; do
    step "ex4_${ex%.py}" shared_pes 4 "$port" "${EX_TIMEOUT:-300}" examples/$ex; port=$((port + 2))
  done
fi
if [ "$NGPU" -ge 4 ]; then  # 2x2 meshes (issue 4): one PE per GPU
  step summa python3 -m jax_tilescale.launch -n 4 --timeout 300 examples/summa.py
  step cannon python3 -m jax_tilescale.launch -n 4 --timeout 300 examples/cannon.py
  step summa_view python3 -m jax_tilescale.launch -n 4 --timeout 300 examples/summa_view.py
fi
if [ "$NGPU" -ge 2 ]; then
  PORT2=${TWO_NODE_PORT:-29533} MODE2=cvd
  if ! step two_nodes two_nodes "$PORT2" cvd 300 examples/allgather.py --m 4096 --n 1024; then
    step two_nodes_devices two_nodes "$((PORT2 + 2))" devices 300 examples/allgather.py --m 4096 --n 1024 \
      && MODE2=devices
  fi
  step two_nodes_fault two_nodes_fault "$((PORT2 + 4))" "$MODE2"
fi
# Only when asked for (gpu_tests_2pe runs them too): issue 15's overlap kernels and the workspace, two PEs on GPU 0.
if [ "$NGPU" -lt 2 ] && [[ " ${STEPS:-} " == *" overlap_2pe "* ]]; then
  step overlap_2pe shared_two_pes 29671 "${EX_TIMEOUT:-300}" -m pytest tests/gpu/test_overlap_gpu.py \
    tests/gpu/test_workspace_gpu.py -m multi_pe -v -rs -o addopts="" -p no:cacheprovider
fi
# Only when asked for (gpu_tests_2pe runs them too): zero-copy and command buffers (issue 14) and the primitives,
# two PEs on GPU 0.
if [ "$NGPU" -lt 2 ] && [[ " ${STEPS:-} " == *" zero_copy_2pe "* ]]; then
  step zero_copy_2pe shared_two_pes 29681 "${EX_TIMEOUT:-300}" -m pytest tests/gpu/test_command_buffers_gpu.py \
    tests/gpu/test_zero_copy_gpu.py tests/gpu/test_workspace_gpu.py tests/gpu/test_primitives_gpu.py -m multi_pe -v \
    -rs -o addopts="" -p no:cacheprovider
fi
# Only when asked for (gpu_tests_2pe runs them too): staging copies done by the kernel (issue 14, item 3),
# with NVSHMEM's calls, and the staging tests around it, two PEs on GPU 0 (KERNEL_STAGING_ARGS="-k pull": a part).
if [ "$NGPU" -lt 2 ] && [[ " ${STEPS:-} " == *" kernel_staging_2pe "* ]]; then
  # shellcheck disable=SC2086
  step kernel_staging_2pe shared_two_pes 29687 "${EX_TIMEOUT:-300}" -m pytest tests/gpu/test_kernel_staging_gpu.py \
    tests/gpu/test_workspace_gpu.py -m multi_pe -v -rs -o addopts="" -p no:cacheprovider ${KERNEL_STAGING_ARGS:-}
fi
# Only when asked for: a chosen part of the two-PE suite, two PEs on GPU 0 (the whole of it takes ~8 minutes), e.g.
# STEPS=pick_2pe PICK_2PE="tests/gpu/test_primitives_gpu.py -k all_to_all".
if [ "$NGPU" -lt 2 ] && [[ " ${STEPS:-} " == *" pick_2pe "* ]]; then
  # shellcheck disable=SC2086
  step pick_2pe shared_two_pes 29699 "${EX_TIMEOUT:-300}" -m pytest ${PICK_2PE:?PICK_2PE names the tests} -m multi_pe \
    -v -rs -o addopts="" -p no:cacheprovider
fi
# Only when asked for: the command buffer tests with XLA recording whole while loops (a fori_loop of our kernels
# becomes one CUDA graph with a conditional node), one PE and two PEs on GPU 0.
LOOP_GRAPHS="${XLA_FLAGS:-} --xla_gpu_enable_command_buffer=+WHILE,+CONDITIONAL --xla_gpu_graph_min_graph_size=1"
loop_graphs() { XLA_FLAGS="$LOOP_GRAPHS" shared_two_pes "$@"; }
if [[ " ${STEPS:-} " == *" loop_graphs"* ]]; then  # STEPS names loop_graphs and/or loop_graphs_2pe
  step loop_graphs env XLA_FLAGS="$LOOP_GRAPHS" CUDA_VISIBLE_DEVICES=0 python3 -m pytest \
    tests/gpu/test_command_buffers_gpu.py -m "not multi_pe" -v -rs -o addopts="" -p no:cacheprovider
  if [ "$NGPU" -lt 2 ]; then
    step loop_graphs_2pe loop_graphs 29683 "${EX_TIMEOUT:-300}" -m pytest tests/gpu/test_command_buffers_gpu.py \
      -m multi_pe -v -rs -o addopts="" -p no:cacheprovider
  fi
fi
# BENCH_GEMM_ARGS / BENCH_OVERLAP_SHAPES shorten the benchmarks (e.g. BENCH_GEMM_ARGS="--shapes 2048x2048x2048").
if [ "${1:-}" = bench ] && want bench_view; then
  step bench_view env CUDA_VISIBLE_DEVICES=0 python3 benchmarks/bench_view.py
fi
if [ "${1:-}" = bench ] && want bench_overlap; then  # one PE: each overlap kernel against gemm.py's and XLA's
  step bench_overlap env CUDA_VISIBLE_DEVICES=0 python3 benchmarks/bench_overlap.py
fi
if [ "${1:-}" = bench ] && want bench_gemm; then  # one GPU is enough: the first
  # shellcheck disable=SC2086
  step bench_gemm env CUDA_VISIBLE_DEVICES=0 python3 benchmarks/bench_gemm.py ${BENCH_GEMM_ARGS:-}
fi
if [ "${1:-}" = bench ] && want chain_time; then  # an MLP's two products in a row, dependent-launch variants
  # shellcheck disable=SC2086
  step chain_time env CUDA_VISIBLE_DEVICES=0 python3 tools/chain_time.py ${CHAIN_TIME_ARGS:-4096x4096x14336}
fi
if [[ " ${STEPS:-} " == *" profile_gemm "* ]]; then  # only when asked for: Nsight Compute of XLA's GEMM and ours
  # PROFILE_SHAPES (comma-separated), each shape's report in $LOG/profile_<shape>[_<i>]/; PROFILE_CONFIGS
  # (comma-separated bench_gemm.py --configs entries, `table` for the table's pick; default: the pick only), the i-th
  # config's report in the _<i> directory; SECTIONS and METRICS as profile_gemm.sh reads them
  profile_shapes() {
    local shape config i dir rc=0
    local shapes=${PROFILE_SHAPES:-8192x8192x8192,16384x8192x1024} configs=${PROFILE_CONFIGS:-table}
    for shape in ${shapes//,/ }; do
      i=0
      for config in ${configs//,/ }; do
        dir="$LOG/profile_$shape"; [ -n "${PROFILE_CONFIGS:-}" ] && dir="${dir}_$i"
        mkdir -p "$dir"
        echo "--- $shape ${config}"
        # shellcheck disable=SC2046
        OUT="$dir" CUDA_VISIBLE_DEVICES=0 timeout -k 10 "${PROFILE_TIMEOUT:-150}" \
          bash tools/profile_gemm.sh "$shape" $([ "$config" = table ] || echo --config "$config") || rc=1
        i=$((i + 1))
      done
    done
    return "$rc"
  }
  step profile_gemm profile_shapes
fi
if [[ " ${STEPS:-} " == *" cycle_rank "* ]]; then  # only when asked for: elapsed cycles of XLA's GEMM and ours (ncu)
  # CYCLE_SHAPES (comma-separated), CYCLE_CONFIGS (bench_gemm.py --configs entries; default: the pick), CYCLE_ROUNDS,
  # CYCLE_METRICS (more ncu metrics, comma-separated);
  # per shape ncu's CSV in $LOG/cycle_rank_<shape>.csv and the ranking (tools/cycle_rank.py's doc)
  cycle_rank() {
    local shape csv rc=0 configs=${CYCLE_CONFIGS:-table} rounds=${CYCLE_ROUNDS:-5} metrics
    local shapes=${CYCLE_SHAPES:-16384x8192x1024}
    metrics=$(python3 tools/cycle_rank.py metrics) || return 1
    metrics="$metrics${CYCLE_METRICS:+,$CYCLE_METRICS}"  # more ncu metrics: their medians print after the ranking
    for shape in ${shapes//,/ }; do
      csv="$LOG/cycle_rank_$shape.csv"
      echo "--- $shape: $configs, $rounds rounds"
      for attempt in 1 2; do  # ncu's first run on a fresh machine has crashed as it connected (profile_gemm.sh)
        XLA_PYTHON_CLIENT_PREALLOCATE=false CUDA_VISIBLE_DEVICES=0 timeout -k 10 "${CYCLE_TIMEOUT:-420}" \
          ncu --csv --print-units base --clock-control none --cache-control all --profile-from-start off \
          --metrics "$metrics" python3 tools/cycle_rank.py run "$shape" --configs "$configs" --rounds "$rounds" \
          > "$csv" 2>&1 && break
        grep -q "Segmentation fault" "$csv" && ! grep -q "==PROF== Profiling" "$csv" && [ "$attempt" = 1 ] || break
        echo "ncu crashed before it profiled anything: once more"
      done
      grep -v '^"' "$csv" | grep -v "^==PROF== Profiling" | tail -n 25
      python3 tools/cycle_rank.py report "$csv" --configs "$configs" --rounds "$rounds" || rc=1
    done
    return "$rc"
  }
  step cycle_rank cycle_rank
fi
if [[ " ${STEPS:-} " == *" probe_zero_copy "* ]]; then  # only when asked for: issue 14's zero-copy probe
  if [ "$NGPU" -ge 2 ]; then
    step probe_zero_copy python3 -m jax_tilescale.launch -n 2 --timeout 120 tools/proto/zero_copy_probe.py
  else
    step probe_zero_copy shared_two_pes 29781 120 tools/proto/zero_copy_probe.py
  fi
fi
if [[ " ${STEPS:-} " == *" trip_latency "* ]]; then  # only when asked for: one-way trips between two processes
  trip_latency() {  # tools/proto/trip_latency.cu, two processes on GPU 0 under MPS as shared_pes runs them
    nvcc -O3 -arch=sm_90 -o /tmp/trip tools/proto/trip_latency.cu || return 1
    rm -rf /tmp/trip_files && mkdir -p /tmp/trip_files && start_mps || return 1
    local -a on_gpu0=(env CUDA_VISIBLE_DEVICES=0 CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50 TRIP_DIR=/tmp/trip_files)
    "${on_gpu0[@]}" timeout 120 /tmp/trip 1 &
    local pid=$!
    "${on_gpu0[@]}" timeout 120 /tmp/trip 0
    local rc0=$?; wait "$pid"; local rc1=$?; stop_mps
    [ "$rc0" = 0 ] && [ "$rc1" = 0 ]
  }
  step trip_latency trip_latency
fi
# Only when asked for: the swapped loop's k-step against the pick's, both operands K-major, n192 both ways
# (tools/swap_probe.py; SWAP_PROBE_ARGS for its arguments; about 4 minutes at its defaults).
if [[ " ${STEPS:-} " == *" swap_probe "* ]]; then
  # shellcheck disable=SC2086
  step swap_probe timeout -k 5 480 env CUDA_VISIBLE_DEVICES=0 python3 tools/swap_probe.py ${SWAP_PROBE_ARGS:-}
fi
# Only when asked for: tools/stage_trace.py for each "SHAPE CONFIG" of STAGE_TRACES (separated by ";"), e.g.
# STAGE_TRACES="16384x8192x1024 128x192x64/4/g8/p/pp;16384x8192x1024 160x128x64/4/g8/p/pp/swap"; STAGE_TRACE_HEAT
# seconds of heat before each trace (default 2: the power cap's steady state); STAGE_TRACE_LAUNCHES consecutive
# launches decoded after it, each on one time axis (default 0: none).
if [[ " ${STEPS:-} " == *" stage_trace "* ]]; then
  stage_traces() {
    local entry rc=0
    IFS=';' read -ra entries <<<"${STAGE_TRACES:?STAGE_TRACES names the traces}"
    for entry in "${entries[@]}"; do
      # shellcheck disable=SC2086
      timeout -k 5 240 env CUDA_VISIBLE_DEVICES=0 python3 tools/stage_trace.py $entry --heat "${STAGE_TRACE_HEAT:-2}" \
        --launches "${STAGE_TRACE_LAUNCHES:-0}" || rc=1
    done
    return "$rc"
  }
  step stage_trace stage_traces
fi
if [[ " ${STEPS:-} " == *" profile_call "* ]]; then  # only when asked for: kernel durations per loop form (ncu)
  profile_call() {  # tools/profile_call.py under ncu in three loop forms, then the median duration per kernel
    # PROFILE_CALL_FORMS: which loop forms (default all three); PROFILE_CALL_ARGS: for tools/profile_call.py. One
    # metric only, one pass: with ncu's sections (several replay passes per kernel) the run hung until the call's
    # limit (300 s, 2026-12-03), and nothing came back.
    local form flags
    for form in ${PROFILE_CALL_FORMS:-graph fori chain}; do
      flags=""; [ "$form" = graph ] && flags="$LOOP_GRAPHS"
      XLA_FLAGS="$flags" CUDA_VISIBLE_DEVICES=0 ncu --profile-from-start off --cache-control none --clock-control none \
        --metrics gpu__time_duration.sum --csv python3 tools/profile_call.py --loop "${form/graph/fori}" \
        ${PROFILE_CALL_ARGS:-} > "$LOG/profile_call_$form.csv" 2> "$LOG/profile_call_$form.err" \
        || { tail -20 "$LOG/profile_call_$form.err"; return 1; }
    done
    python3 - "$LOG" <<'PY'
import csv, statistics, sys
from pathlib import Path
for form in ("graph", "fori", "chain"):
    if not Path(sys.argv[1], f"profile_call_{form}.csv").exists():
        continue
    lines = Path(sys.argv[1], f"profile_call_{form}.csv").read_text().splitlines()
    start = next((i for i, l in enumerate(lines) if l.startswith('"ID"')), None)
    if start is None:
        print(f"{form}: no kernels profiled"); continue
    per = {}
    for row in csv.DictReader(lines[start:]):
        if row.get("Metric Name") == "gpu__time_duration.sum":
            per.setdefault(row["Kernel Name"][:60], []).append(float(row["Metric Value"].replace(",", "")))
    print(f"--- {form}: kernel, launches, median / min / max duration (ns)")
    for name, v in per.items():
        print(f"  {name:60s} {len(v):5d} {statistics.median(v):9.0f} {min(v):9.0f} {max(v):9.0f}")
PY
  }
  step profile_call profile_call
fi
if [[ " ${STEPS:-} " == *" diag_2pe "* ]]; then  # only when asked for: where a two-PE run hangs
  diag_2pe() { TILESCALE_TRACE_LAUNCH=1 TILESCALE_WAIT_TIMEOUT_S=10 shared_two_pes 29751 75 "$@"; }
  step diag_2pe diag_2pe tools/diag_hang.py 30 examples/simple_shift.py --m 256 --n 128
fi
if [ "${1:-}" = bench ] && want bench_call_overhead; then  # one PE, then two PEs (sharing GPU 0 if need be)
  # shellcheck disable=SC2086
  step bench_call_overhead env CUDA_VISIBLE_DEVICES=0 python3 benchmarks/bench_call_overhead.py ${BENCH_CALL_ARGS:-}
  if [ "$NGPU" -ge 2 ]; then
    step bench_call_overhead_2pe python3 -m jax_tilescale.launch -n 2 --timeout 300 \
      benchmarks/bench_call_overhead.py --only comm,shift
  else
    step bench_call_overhead_2pe shared_two_pes 29691 "${BENCH_TIMEOUT:-300}" benchmarks/bench_call_overhead.py --only comm,shift
    # the same with NVSHMEM's calls and staged buffers (no call-free kernels, so no zero-copy): the comparison
    if want bench_call_overhead_2pe_calls; then
      with_calls() { TILESCALE_CALL_FREE=0 shared_two_pes "$@"; }
      step bench_call_overhead_2pe_calls with_calls 29693 "${BENCH_TIMEOUT:-300}" benchmarks/bench_call_overhead.py \
        --only comm,shift
    fi
  fi
fi
# Only when asked for: the signalled shifts with NVSHMEM's calls (staged outputs, as across machines), copied out by
# the kernel against the same kernels whose outputs the handler copies out after them, in one run.
if [ "${1:-}" = bench ] && want bench_copy_out_2pe; then
  if [ "$NGPU" -ge 2 ]; then
    # shellcheck disable=SC2086
    step bench_copy_out_2pe python3 -m jax_tilescale.launch -n 2 --timeout 300 benchmarks/bench_call_overhead.py \
      --only copy_out ${BENCH_CALL_ARGS:-}
  else
    # shellcheck disable=SC2086
    step bench_copy_out_2pe shared_two_pes 29697 "${BENCH_TIMEOUT:-300}" benchmarks/bench_call_overhead.py \
      --only copy_out ${BENCH_CALL_ARGS:-}
  fi
fi
# The same rows with XLA recording whole while loops into command buffers (CUDA graphs with conditional nodes):
# by default XLA records neither WHILE nor a body under 5 commands, so every fori iteration returns to the host.
if [ "${1:-}" = bench ] && want bench_call_overhead_graphs; then
  # shellcheck disable=SC2086
  step bench_call_overhead_graphs env XLA_FLAGS="$LOOP_GRAPHS" CUDA_VISIBLE_DEVICES=0 python3 \
    benchmarks/bench_call_overhead.py --loop fori ${BENCH_CALL_ARGS:-}
  if [ "$NGPU" -ge 2 ]; then
    step bench_call_overhead_graphs_2pe env XLA_FLAGS="$LOOP_GRAPHS" python3 -m jax_tilescale.launch -n 2 \
      --timeout 300 benchmarks/bench_call_overhead.py --only comm,shift --loop fori
  else
    step bench_call_overhead_graphs_2pe loop_graphs 29695 "${BENCH_TIMEOUT:-300}" benchmarks/bench_call_overhead.py \
      --only comm,shift --loop fori
  fi
fi
if [ "${1:-}" = bench ] && want bench_wait_timeout && [ "$NGPU" -ge 2 ]; then
  step bench_wait_timeout python3 -m jax_tilescale.launch -n "$NGPU" --timeout 600 benchmarks/wait_timeout_cost.py
fi
# The collective benchmarks (issue 18), two or more GPUs: each prints its table and writes bench_<name>.csv and
# bench_<name>.png (bus bandwidth against size) into $LOG ($OUT, so the plots come back with the logs; the PNGs
# need matplotlib: pip install '.[bench]', else the run says so). BENCH_COLL_ARGS shortens them ("--sizes 1M,1G").
if [ "$NGPU" -ge 2 ]; then
  for b in allgather reduce_scatter all_to_all ring_shift; do
    if [ "${1:-}" = bench ] && want "bench_$b"; then
      # shellcheck disable=SC2086
      step "bench_$b" python3 -m jax_tilescale.launch -n "$NGPU" --timeout 900 benchmarks/bench_$b.py \
        --out-dir "$LOG" ${BENCH_COLL_ARGS:-}
      grep -E "^(\[rank 0\] )?( *size/rank| +[0-9]+ [KMG]iB|check|note|wrote|all-|reduce-|ring )" "$LOG/bench_$b.log" \
        | sed 's/^\[rank 0\] //' || true
    fi
  done
fi
echo "=== summary ($(date -u +%F), $NGPU GPU(s))"
printf '%s\n' "${SUMMARY[@]}"
