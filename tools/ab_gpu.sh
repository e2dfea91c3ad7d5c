#!/usr/bin/env bash
# A/B of code changes on the GPU in one device call: the tree as it is ("base") and the tree with each patch
# applied, run alternately ROUNDS times through `tools/gpu_test.sh bench` (same STEPS, same BENCH_* settings), so
# that every variant sees the same machine state. Prints each variant's benchmark rows per round, last.
#
#   git diff main my_branch > ab/my_branch.patch       # on the workstation (ab/ is not ignored: it travels)
#   STEPS="bench_copy_out_2pe" ROUNDS=2 bash tools/ab_gpu.sh ab/my_branch.patch [ab/other.patch ...]
#
# STEPS names every step wanted: the two-PE half of a benchmark is a step of its own (bench_call_overhead_graphs
# and bench_call_overhead_graphs_2pe). The extension is built once, from the base tree: a patch must not touch compiled sources (xla_ffi/, jax_tilescale/abi/);
# the script refuses such a patch. Kernels are compiled per variant (the cache key covers the generated source,
# headers included, so variants never share a stale binary). The tree is restored to base on exit.
set -uo pipefail
[ $# -ge 1 ] || { echo "usage: bash tools/ab_gpu.sh PATCH [PATCH ...]" >&2; exit 2; }
ROUNDS=${ROUNDS:-2}
LOG=${OUT:-/tmp/ts_gpu}
mkdir -p "$LOG"
for p in "$@"; do
  [ -f "$p" ] || { echo "no patch file $p" >&2; exit 2; }
  # the extension's sources (xla_ffi/, and the ABI header it shares with the kernels); tests' files may change
  if grep -E '^\+\+\+ b/' "$p" | grep -qE '^\+\+\+ b/(xla_ffi/|jax_tilescale/abi/|CMakeLists|pyproject)'; then
    echo "$p touches compiled sources; A/B it with two device calls instead" >&2; exit 2
  fi
done

applied=""
restore() { [ -n "$applied" ] && { git apply -R "$applied" 2>/dev/null || patch -s -R -p1 < "$applied"; }; applied=""; }
trap restore EXIT

run_variant() {  # run_variant NAME ROUND BUILD(0/1)
  local name=$1 round=$2 skip=$((1 - $3))
  echo "##### $name, round $round"
  SKIP_BUILD=$skip OUT="$LOG/ab_${name}_r$round" bash tools/gpu_test.sh bench > "$LOG/ab_${name}_r$round.txt" 2>&1
  tail -n 4 "$LOG/ab_${name}_r$round.txt"
}

built=1
for ((r = 1; r <= ROUNDS; r++)); do
  run_variant base "$r" "$built"; built=0
  for p in "$@"; do
    name=$(basename "$p" .patch)
    git apply --check "$p" 2>/dev/null || patch --dry-run -s -p1 < "$p" >/dev/null \
      || { echo "$p does not apply to the base tree" >&2; exit 2; }
    git apply "$p" 2>/dev/null || patch -s -p1 < "$p"; applied=$p
    run_variant "$name" "$r" 0
    restore
  done
done

echo "===== rows (ours us, base us, diff us, ratio, ...), per variant and round"
for f in "$LOG"/ab_*_r*.txt; do
  echo "--- $(basename "$f" .txt)"
  # the benchmark tables (bench_call_overhead's, bench_gemm's): from the header to the next blank or === line
  sed -E 's/^(\[(pe|rank) [0-9]+\] )+//' "$f" | awk '/^what |^ +shape +what /{on=1} on&&/^(=|$)/{on=0} on'
done
