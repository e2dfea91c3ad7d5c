#!/usr/bin/env bash
# Device run: is the GEMM gap through XLA a launch-path cost or a power/clock limit? Raw launches
# (burst and sustained, beside cuBLAS when its headers are there) and the XLA path (burst and
# sustained), with the SM clock, power and throttle reasons logged every 100 ms.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/probe}; mkdir -p "$OUT"
CFG=${CFG:-"8192 8192 8192 128 256 64 4 256 8"}
SECS=${SECS:-3}
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,power.limit,temperature.gpu,clocks_throttle_reasons.active \
  --format=csv,noheader -lms 100 > "$OUT/smi.csv" 2>&1 &
SMI=$!
mark() { echo "$(date +%H:%M:%S.%N | cut -c1-12) $*" | tee -a "$OUT/marks.txt"; }
python3 tools/proto/gen_harness.py $CFG nomc sustain=$SECS cublas > /tmp/g.cu 2>/dev/null
if nvcc -gencode=arch=compute_90a,code=sm_90a -O3 -std=c++17 -o /tmp/g /tmp/g.cu -lcuda -lcublas 2>/dev/null; then :; else
  python3 tools/proto/gen_harness.py $CFG nomc sustain=$SECS > /tmp/g.cu 2>/dev/null
  nvcc -gencode=arch=compute_90a,code=sm_90a -O3 -std=c++17 -o /tmp/g /tmp/g.cu -lcuda 2>&1 | grep error
fi
mark raw start; /tmp/g; mark raw end
mark xla start; python3 tools/proto/sustain_xla.py "$SECS"; mark xla end
kill $SMI
# clock/power summary per phase
python3 - "$OUT" <<'PY'
import sys, statistics, datetime
out = sys.argv[1]
rows = [l.split(", ") for l in open(f"{out}/smi.csv") if l.count(",") >= 6]
def t(s): return datetime.datetime.strptime(s.split()[1][:12], "%H:%M:%S.%f").time()
busy = [(t(r[0]), float(r[1].split()[0]), float(r[3].split()[0]), r[6]) for r in rows if r[3].split()[0] not in ("[N/A]",)]
busy = [b for b in busy if b[2] > 300]
if busy:
    print(f"samples >300 W: {len(busy)}; SM MHz median {statistics.median(b[1] for b in busy):.0f} "
          f"(min {min(b[1] for b in busy):.0f}); power median {statistics.median(b[2] for b in busy):.0f} W; "
          f"throttle reasons seen: {sorted(set(b[3] for b in busy))}")
PY
# per-kernel duration and SM clock, if Nsight Compute is installed (clocks left to the GPU)
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
if [ -n "$NCU" ]; then
  timeout 240 "$NCU" --clock-control none --launch-skip 20 --launch-count 6 \
    --metrics gpu__time_duration.sum,smsp__cycles_elapsed.avg.per_second,sm__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_bytes.sum,dram__bytes.sum \
    python3 tools/proto/sustain_xla.py 0.3 2>&1 | grep -E "^\s+[a-z_]+\.|^  [A-Za-z_]|void|ts_|nvjet|sm90|gemm" | head -80
else
  echo "no ncu"
fi
