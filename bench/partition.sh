#!/usr/bin/env bash
# How long a partitioned worker costs: a router and two workers in network
# namespaces (tests/multihost/netns.sh, scenario partition-busy); worker 1's
# link goes down for 3, 6, 10 and 15 s while one client sends request after
# request (router --step-timeout-ms 2000). Each trial prints the time from
# the partition to the first failed request (fail_ms) and from the heal to
# the first answer (recovery_ms), then a summary per partition length.
# Needs root and iproute2.
#
#   bench/partition.sh BUILD_DIR [TRIALS]   (TRIALS per length, default 3)
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:?usage: $0 BUILD_DIR [TRIALS]}"
trials="${2:-3}"
lines="$(mktemp)"
trap 'rm -f "$lines"' EXIT
for seconds in 3 6 10 15; do
  for t in $(seq "$trials"); do
    rc=0
    out="$(bash "$here/tests/multihost/netns.sh" "$build" partition-busy \
      "$seconds" 2>&1)" || rc=$?
    if [[ $rc -eq 77 ]]; then
      echo "$out"
      exit 77
    fi
    line="$(grep '^trial:' <<<"$out" || echo "trial: partition_s=$seconds (no result)")"
    [[ $rc -eq 0 ]] || line="$line FAILED(rc $rc)"
    echo "$t $line" | tee -a "$lines"
  done
done
echo
echo "partition_s  trials  failed  fail_ms (min/max)  recovery_ms (min/max)"
awk '{
  for (i = 1; i <= NF; ++i) { split($i, kv, "="); v[kv[1]] = kv[2] }
  p = v["partition_s"]; f = v["fail_ms"]; r = v["recovery_ms"]
  if (!(p in n)) { n[p] = bad[p] = 0; order[++k] = p }
  n[p]++
  if ($0 ~ /FAILED/ || f == "" || r == "" || r < 0) { bad[p]++; delete v; next }
  if (!(p in fmin)) { fmin[p] = fmax[p] = f; rmin[p] = rmax[p] = r }
  if (f < fmin[p]) fmin[p] = f; if (f > fmax[p]) fmax[p] = f
  if (r < rmin[p]) rmin[p] = r; if (r > rmax[p]) rmax[p] = r
  delete v
} END {
  for (j = 1; j <= k; ++j) { p = order[j]
    if (p in fmin)
      printf "%11s  %6d  %6d  %7d / %-7d  %9d / %d\n", p, n[p], bad[p],
        fmin[p], fmax[p], rmin[p], rmax[p]
    else printf "%11s  %6d  %6d  -\n", p, n[p], bad[p] }
}' "$lines"
