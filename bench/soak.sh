#!/usr/bin/env bash
# Memory under a long load: a router and two CPU workers serve a closed-loop
# load of 1-128-token requests for MINUTES (default 10); every process's RSS
# is sampled every 10 s. Fails (exit 1) when any process grows by more than
# 3% over the second half of the run, the part where a plateau is expected.
#
#   bench/soak.sh [BUILD_DIR] [MINUTES] [CONCURRENCY]
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$here/build}"
minutes="${2:-10}"
concurrency="${3:-24}"
samples="$(mktemp)"
trap 'rm -f "$samples"' EXIT
run="
  \$MOE_BIN/client/moe-loadtest --target \$MOE_TARGET -c $concurrency \
    -z ${minutes}m --warmup 0s --tokens 1:128 --layer all --format json \
    > $samples.load 2>/dev/null &
  load=\$!
  start=\$(date +%s)
  while kill -0 \$load 2>/dev/null; do
    line=\"\$((\$(date +%s) - start))\"
    for pid in \$MOE_PIDS; do
      line=\"\$line \$(awk '/VmRSS/ {print \$2}' /proc/\$pid/status)\"
    done
    echo \"\$line\" >> $samples
    sleep 10
  done
  wait \$load"
"$here/deploy/local/moe-local.sh" --workers 2 --port 50095 --build-dir "$build" \
  --run "$run" -- --synthetic --hidden 1024 --inter 512 --experts 32 --top-k 4 \
  --shared-inter 1024 --layers 2 --seed 42 --threads 1 >/dev/null 2>&1
python3 - "$samples" "$samples.load" <<'PY'
import json, sys
rows = [list(map(int, l.split())) for l in open(sys.argv[1]) if l.strip()]
load = json.load(open(sys.argv[2]))
names = ["router", "worker 0", "worker 1"]
print("time_s  " + "  ".join(f"{n:>10}" for n in names) + "   (RSS, MiB)")
for r in rows:
    print(f"{r[0]:6d}  " + "  ".join(f"{v / 1024:10.1f}" for v in r[1:]))
half = [r for r in rows if r[0] >= rows[-1][0] / 2]
ok = True
for i, n in enumerate(names, start=1):
    first, peak = half[0][i], max(r[i] for r in half)
    growth = (peak - first) / first * 100
    ok = ok and growth <= 3.0
    print(f"{n}: {rows[0][i] / 1024:.1f} MiB at start, {first / 1024:.1f} at half time, "
          f"peak {peak / 1024:.1f} after: {growth:+.1f}% over the second half")
print(f"load: {load['requests']} requests, {load['errors']} failed, "
      f"{load['tokens_per_s']:.0f} tokens/s, p99 {load['latency_ms']['p99']:.1f} ms")
sys.exit(0 if ok and load["errors"] == 0 else 1)
PY
