#!/usr/bin/env bash
# What the distributed step adds to the in-process one at decode sizes: a
# DeepSeek-V2-Lite-sized layer (H=2048, I=1408, E=64, k=6, shared 2816,
# fp32), router and two workers at --threads 1 each on loopback, against the
# same router with --num-workers 0, N = 1, 8, 64 and 512, back to back.
# Prints the stage tables and the distributed / in-process p50 ratios.
#
#   bench/dist-overhead.sh [BUILD_DIR] [--requests R]
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
build="$here/build"
requests=20
while (($#)); do
  case "$1" in
    --requests) requests="$2"; shift 2 ;;
    *) build="$1"; shift ;;
  esac
done
table="$(mktemp)"
trap 'rm -f "$table"' EXIT
"$here/bench/service-latency.sh" "$build" --workers "0 2" --tokens "1 8 64 512" \
  --dtype f32 --requests "$requests" --worker-threads 1 -- \
  --synthetic --hidden 2048 --inter 1408 --experts 64 --top-k 6 \
  --shared-inter 2816 --seed 1 --threads 1 | tee "$table"
echo
python3 - "$table" <<'PY'
import sys
rows = [l.split() for l in open(sys.argv[1]) if l[:1].isdigit()]
p50 = {(r[0], r[1]): float(r[2]) for r in rows}
for n in ["1", "8", "64", "512"]:
    if ("0", n) in p50 and ("2", n) in p50:
        row = next(r for r in rows if r[:2] == ["2", n])
        dc = float(row[-1]) / 1000 if "dispatch+combine" in row else float("nan")
        d = dict(zip(*[iter(row[6:row.index("|") if "|" in row else None])] * 2))
        mean = (float(d.get("dispatch", 0)) + float(d.get("combine", 0))) / 1000
        print(f"N={n:<4} distributed/in-process p50 {p50[('2', n)] / p50[('0', n)]:.2f}x"
              f"  (P=2 dispatch+combine p50 {dc:.2f} ms, mean {mean:.2f} ms)")
PY
