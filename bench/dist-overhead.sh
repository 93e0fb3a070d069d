#!/usr/bin/env bash
# What the distributed step adds to the in-process one at decode sizes: a
# DeepSeek-V2-Lite-sized layer (H=2048, I=1408, E=64, k=6, shared 2816,
# fp32), router and two workers at --threads 1 each on loopback, against the
# same router with --num-workers 0, N = 1, 8, 64 and 512, back to back, then
# P = 2 at N <= 64 again with every step through the workers' all-to-alls
# (--direct-step-tokens 0). Prints the stage tables and the distributed /
# in-process p50 ratios of both paths.
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
a2a="$(mktemp)"
trap 'rm -f "$table" "$a2a"' EXIT
layer=(--synthetic --hidden 2048 --inter 1408 --experts 64 --top-k 6
  --shared-inter 2816 --seed 1 --threads 1)
# The router's defaults: steps of at most --direct-step-tokens (64) tokens
# are direct (no all-to-all between the workers).
"$here/bench/service-latency.sh" "$build" --workers "0 2" --tokens "1 8 64 512" \
  --dtype f32 --requests "$requests" --worker-threads 1 -- "${layer[@]}" | tee "$table"
echo
echo "P=2 with every step through the workers' all-to-alls (--direct-step-tokens 0):"
"$here/bench/service-latency.sh" "$build" --workers 2 --tokens "1 8 64" \
  --dtype f32 --requests "$requests" --worker-threads 1 -- "${layer[@]}" \
  --direct-step-tokens 0 | tee "$a2a"
echo
python3 - "$table" "$a2a" <<'PY'
import sys
def load(path):
    rows = [l.split() for l in open(path) if l[:1].isdigit()]
    return {(r[0], r[1]): r for r in rows}
def dc(row):  # the median step's dispatch + combine, and the mean's
    p50 = float(row[-1]) / 1000 if "dispatch+combine" in row else float("nan")
    d = dict(zip(*[iter(row[6:row.index("|") if "|" in row else None])] * 2))
    mean = (float(d.get("dispatch", 0)) + float(d.get("combine", 0))) / 1000
    return p50, mean
main, a2a = load(sys.argv[1]), load(sys.argv[2])
for n in ["1", "8", "64", "512"]:
    if ("0", n) in main and ("2", n) in main:
        p0, p2 = float(main[("0", n)][2]), float(main[("2", n)][2])
        m, mean = dc(main[("2", n)])
        line = (f"N={n:<4} distributed/in-process p50 {p2 / p0:.2f}x"
                f"  (P=2 dispatch+combine p50 {m:.2f} ms, mean {mean:.2f} ms)")
        if ("2", n) in a2a:
            pa = float(a2a[("2", n)][2])
            ma, _ = dc(a2a[("2", n)])
            line += (f"; all-to-all path {pa / p0:.2f}x, dispatch+combine"
                     f" p50 {ma:.2f} ms")
        print(line)
PY
