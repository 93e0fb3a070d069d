#!/usr/bin/env bash
# The load tester's own cost, old build against new: one router and two CPU
# workers (a small synthetic model, so that the client's share of the CPU
# shows), driven in turn by each build's moe-loadtest with the same closed
# loop (-c 8, 8 tokens, a fixed request count), rounds alternating A B A B.
# Prints per round the client's CPU time per request (user + sys, from
# /usr/bin/time) and the requests per second it reached, then the medians
# and the median of the per-round new/old ratios. The client's CPU time is the overhead
# figure: the service's own time is the same for both.
#   bench/loadtest-overhead.sh OLD_LOADTEST NEW_LOADTEST [ROUNDS] [REQUESTS]
# OLD_LOADTEST / NEW_LOADTEST: moe-loadtest binaries (or build directories
# holding client/moe-loadtest); the service comes from NEW's build, else
# build/.
set -euo pipefail
cd "$(dirname "$0")/.."
[[ $# -ge 2 ]] || {
  sed -n 2,13p "$0"
  exit 64
}
resolve() { [[ -d "$1" ]] && echo "$1/client/moe-loadtest" || echo "$1"; }
old="$(resolve "$1")"
new="$(resolve "$2")"
rounds="${3:-5}"
requests="${4:-3000}"
for b in "$old" "$new"; do
  [[ -x "$b" ]] || { echo "loadtest-overhead: no executable $b" >&2; exit 1; }
done
build="$(dirname "$(dirname "$new")")"
[[ -x "$build/server/moe-router" ]] || build=build
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
cat >"$out/rounds.sh" <<EOF
set -euo pipefail
for r in \$(seq $rounds); do
  for side in old new; do
    bin=\$([[ \$side == old ]] && echo "$old" || echo "$new")
    /usr/bin/time -f "%U %S %e" -o "$out/\$side.\$r.time" "\$bin" \
      --target "\$MOE_TARGET" -c 8 --tokens 8 -n $requests --warmup 0s \
      --seed 5 --format json >"$out/\$side.\$r.json" 2>/dev/null
  done
done
EOF
deploy/local/moe-local.sh --build-dir "$build" --workers 2 --port 0 \
  --run "bash $out/rounds.sh" -- --synthetic --hidden 256 --inter 128 \
  --experts 16 --top-k 2 --threads 1 >/dev/null

/usr/bin/python3 - "$out" "$rounds" "$requests" <<'PY'
import json, statistics, sys
d, rounds, requests = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
fig = {"old": [], "new": []}
for r in range(1, rounds + 1):
    row = []
    for side in ("old", "new"):
        user, sys_s, wall = map(float, open(f"{d}/{side}.{r}.time").read().split()[-3:])
        rps = json.load(open(f"{d}/{side}.{r}.json"))["requests_per_s"]
        us = (user + sys_s) / requests * 1e6
        fig[side].append((us, rps))
        row.append(f"{side} {us:6.1f} us/request CPU, {rps:7.1f} req/s")
    ratio = fig["new"][-1][0] / fig["old"][-1][0]
    print(f"round {r}: " + "; ".join(row) + f"; CPU new/old {ratio:.2f}")
med = {s: [statistics.median(v[i] for v in fig[s]) for i in (0, 1)] for s in fig}
print(f"median: old {med['old'][0]:.1f} us/request, {med['old'][1]:.1f} req/s; "
      f"new {med['new'][0]:.1f} us/request, {med['new'][1]:.1f} req/s")
# The service's speed moves both sides' figures from round to round (a
# slower round spends more client CPU per request): the ratio within a
# round, back to back, is the steadier figure.
cpu = sorted(n[0] / o[0] for n, o in zip(fig["new"], fig["old"]))
rps = sorted(n[1] / o[1] for n, o in zip(fig["new"], fig["old"]))
print(f"new/old per round, median (min-max): client CPU per request "
      f"{statistics.median(cpu):.2f}x ({cpu[0]:.2f}-{cpu[-1]:.2f}), requests per "
      f"second {statistics.median(rps):.2f}x ({rps[0]:.2f}-{rps[-1]:.2f})")
PY
