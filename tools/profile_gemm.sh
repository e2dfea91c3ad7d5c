#!/usr/bin/env bash
# Nsight Compute of one GEMM shape on the GPU machine: which kernel XLA's jnp.dot runs (its name says the
# tile, the cluster and the schedule) and how it and ours use the SMs and memory (Speed Of Light section,
# clocks left alone as device/METHOD.md asks). From the repository root, after tools/gpu_test.sh's build
# (or: python3 -m pip install -q --no-build-isolation --no-deps -e .):
#
#   bash tools/profile_gemm.sh 16384x8192x1024 [--config 128x256x64/3/g8/p]
#   SECTIONS="SpeedOfLight ComputeWorkloadAnalysis" bash tools/profile_gemm.sh 8192x8192x8192
#
# SECTIONS (default: the list below) names fewer ncu sections for fewer replay passes; METRICS (comma-separated
# ncu metric names, e.g. sm__cycles_active.min,sm__cycles_active.max) adds metrics to the stall reasons, printed
# per kernel after the summary. The clocks stay as the card sets them (--clock-control none; device/METHOD.md forbids pinning them): to compare two kernels whose
# clocks differ under the power cap, compare their "Elapsed Cycles", not their durations.
#
# Writes $OUT/profile_gemm.txt (or /tmp), prints the kernels' names, durations, throughputs, shared-memory and
# issue figures (the whole report is in the file).
set -uo pipefail
LOG=${OUT:-/tmp}
export TILESCALE_CACHE_DIR=${TILESCALE_CACHE_DIR:-/tmp/ts_cache}
# XLA reserves 75% of the GPU's memory by default, and ncu saves and restores all of it around every replay
# pass ("Backing up device memory in system memory"): the seventeenth session's runs spent their 80 s there.
export XLA_PYTHON_CLIENT_PREALLOCATE=false
SECTIONS=${SECTIONS:-SpeedOfLight ComputeWorkloadAnalysis MemoryWorkloadAnalysis WarpStateStats SchedulerStats InstructionStats}
declare -a SECTION_ARGS=()
for section in $SECTIONS; do SECTION_ARGS+=(--section "$section"); done
# Only the profiler range the workload marks (one product each, after compilation and XLA's autotuning,
# whose candidate kernels would otherwise be profiled one by one: a first run spent its 200 s on them).
# Sections: throughput (SpeedOfLight), pipe use (ComputeWorkloadAnalysis: the tensor pipe's share), shared memory
# and L2 use (MemoryWorkloadAnalysis: "Max Bandwidth", "Mem Pipes Busy"), and why warps wait (WarpStateStats,
# SchedulerStats), what they execute (InstructionStats: instructions per kernel) and each stall reason's cycles
# per issued instruction (the stall metrics: WarpStateStats prints only their sum). About twenty replay passes per
# kernel, two kernels: about a minute after the warm-up.
# (ncu takes --metrics once: one comma-separated list, each entry with its own regex: prefix or none)
profile() {
  ncu --clock-control none "${SECTION_ARGS[@]}" --profile-from-start off \
    --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio${METRICS:+,$METRICS}" \
    python3 tools/profile_gemm.py "$@" > "$LOG/profile_gemm.txt" 2>&1
}
profile "$@"
rc=$?
# ncu's first run on a freshly started GPU machine crashed as it connected, twice on 2026-12-03 (the rerun worked)
if [ "$rc" != 0 ] && grep -q "Segmentation fault" "$LOG/profile_gemm.txt" && ! grep -q "==PROF== Profiling" "$LOG/profile_gemm.txt"; then
  echo "ncu crashed before it profiled anything: once more" >&2
  profile "$@"
  rc=$?
fi
grep -E "^  [a-zA-Z_].*\(|Duration|SM Frequency|Elapsed Cycles|Compute \(SM\) Throughput|Memory Throughput|DRAM Throughput|max \|ours|\
Max Bandwidth|Mem Pipes Busy|Executed Ipc Active|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|Active Warps Per|\
Eligible Warps Per|Executed Instructions  " \
  "$LOG/profile_gemm.txt"
# the added metrics, per kernel
[ -n "${METRICS:-}" ] && awk -v m="${METRICS//,/|}" '/^  [a-zA-Z_].*\(/ {print "  " $1} $1 ~ "^(" m ")$" {print "    " $0}' \
  "$LOG/profile_gemm.txt"
# the stall reasons that cost at least half a cycle per issued instruction, per kernel
awk '/^  [a-zA-Z_].*\(/ {print "  " $1} /issue_stalled_.*_per_issue_active.ratio/ && $NF + 0 >= 0.5 {print "    " $1, $NF}' \
  "$LOG/profile_gemm.txt"
[ "$rc" = 0 ] || tail -20 "$LOG/profile_gemm.txt"
exit "$rc"
