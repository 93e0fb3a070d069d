#!/usr/bin/env bash
# How long a partitioned worker costs: a router and two workers in network
# namespaces (tests/multihost/netns.sh, scenario partition-busy); worker 1's
# link goes down for each of LENGTHS seconds (default 3, 6, 10 and 15) while
# one client sends request after request (router --step-timeout-ms 2000,
# --regroup-after-ms at its default 5000, so a long cut ends with worker 0
# serving alone). Each trial prints the time from the partition to the
# first failed request (fail_ms), from the heal to the first answer
# (recovery_ms) and how many requests were answered during the cut, then a
# summary per partition length. Needs root and iproute2.
#
#   bench/partition.sh BUILD_DIR [TRIALS] [LENGTHS]
#     TRIALS per length (default 3); LENGTHS: comma-separated seconds
#     bench/partition.sh build 1 3,4,5,6,8,9,10,12,14,15   (10 trials, 3-15 s)
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:?usage: $0 BUILD_DIR [TRIALS]}"
trials="${2:-3}"
lengths="${3:-3,6,10,15}"
lines="$(mktemp)"
trap 'rm -f "$lines"' EXIT
for seconds in ${lengths//,/ }; do
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
echo "partition_s  trials  failed  fail_ms (min/max)  recovery_ms (min/max)  answered_during_cut"
awk '{
  for (i = 1; i <= NF; ++i) { split($i, kv, "="); v[kv[1]] = kv[2] }
  p = v["partition_s"]; f = v["fail_ms"]; r = v["recovery_ms"]
  if (!(p in n)) { n[p] = bad[p] = served[p] = 0; order[++k] = p }
  served[p] += v["requests_during"] - v["failed_during"]
  n[p]++
  if ($0 ~ /FAILED/ || f == "" || r == "" || r < 0) { bad[p]++; delete v; next }
  if (!(p in fmin)) { fmin[p] = fmax[p] = f; rmin[p] = rmax[p] = r }
  if (f < fmin[p]) fmin[p] = f; if (f > fmax[p]) fmax[p] = f
  if (r < rmin[p]) rmin[p] = r; if (r > rmax[p]) rmax[p] = r
  delete v
} END {
  for (j = 1; j <= k; ++j) { p = order[j]
    if (p in fmin)
      printf "%11s  %6d  %6d  %7d / %-7d  %9d / %-7d  %d\n", p, n[p], bad[p],
        fmin[p], fmax[p], rmin[p], rmax[p], served[p]
    else printf "%11s  %6d  %6d  -\n", p, n[p], bad[p] }
}' "$lines"
