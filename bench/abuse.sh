#!/usr/bin/env bash
# The router under hostile and overloaded clients, short versions, against a
# router and two CPU workers on loopback (H=256, I=128, E=8, k=2):
#   1. a ForwardStream that never reads: the router's RSS growth;
#   2. an open-loop flood at ~2x the measured capacity (moe-loadtest --rps):
#      what is answered, what is refused, latency;
#   3. 500 rendezvous waits (WorkerControl.StoreGet) from a client that is
#      no worker, with a made-up generation and then the current one but no
#      store token: how they are answered, the router's threads;
#   4. a worker frozen (SIGSTOP) for 3 s and resumed: time to NOT_SERVING,
#      time to a correct answer after SIGCONT.
# Prints a table: attack, what held, figure.
#   bench/abuse.sh [BUILD_DIR] [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
build="$(cd "${1:-build}" && pwd)"
seconds="${2:-10}"
for b in server/moe-router worker/moe-worker client/moe-cli \
         client/moe-loadtest bench/moe-abuse-client; do
  [[ -x "$build/$b" ]] || {
    echo "abuse: $build/$b not found; build it first" >&2; exit 64; }
done
out="$(mktemp -d)"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -CONT "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$out"
}
trap cleanup EXIT

hidden=256
"$build/server/moe-router" --synthetic --hidden $hidden --inter 128 \
  --experts 8 --top-k 2 --threads 1 --num-workers 2 \
  --listen 127.0.0.1:0 --port-file "$out/port" \
  --health-listen 127.0.0.1:0 --health-port-file "$out/health_port" \
  --metrics-listen 127.0.0.1:0 --metrics-port-file "$out/metrics_port" \
  >"$out/router.log" 2>&1 &
router=$!
pids+=("$router")
for _ in $(seq 100); do [[ -s "$out/port" ]] && break; sleep 0.1; done
target="127.0.0.1:$(cat "$out/port")"
health="127.0.0.1:$(cat "$out/health_port")"
workers=()
for i in 0 1; do
  "$build/worker/moe-worker" --router "$target" --threads 1 \
    >"$out/worker$i.log" 2>&1 &
  workers+=("$!")
  pids+=("$!")
done
serving() { "$build/client/moe-cli" health --target "$health" \
              --timeout_ms 500 >/dev/null 2>&1; }
answers() { "$build/client/moe-cli" forward --target "$target" \
              --random 4 --timeout_ms 1000 >/dev/null 2>&1; }
for _ in $(seq 300); do serving && break; sleep 0.1; done
serving || { echo "abuse: the service never became ready" >&2;
             cat "$out"/*.log >&2; exit 1; }
now_ms() { date +%s%3N; }
rss_mib() { awk '/VmRSS/ {printf "%.1f", $2 / 1024}' "/proc/$1/status"; }
threads() { awk '/^Threads/ {print $2}' "/proc/$1/status"; }
rows=()
row() { rows+=("$(printf '| %s | %s | %s |' "$1" "$2" "$3")"); }

# 1. A stream that never reads, while another client is served.
"$build/client/moe-loadtest" --target "$target" -c 2 --tokens 8 -z 2s \
  >/dev/null 2>&1  # warm up
rss0="$(rss_mib "$router")"
"$build/bench/moe-abuse-client" --target "$target" --hidden $hidden \
  --tokens 8 --seconds "$seconds" >"$out/written" 2>&1 &
hostile=$!
"$build/client/moe-loadtest" --target "$target" -c 1 --tokens 8 \
  -z "$((seconds - 1))s" --format json >"$out/beside.json" 2>/dev/null &
beside_pid=$!
peak="$rss0"
while kill -0 "$hostile" 2>/dev/null; do
  peak="$(python3 -c "print(max($peak, $(rss_mib "$router")))")"
  sleep 0.5
done
wait "$hostile" || true
wait "$beside_pid" || true
beside="$(python3 -c "import json; r = json.load(open('$out/beside.json')); \
print(f\"{r['ok']} answered, {r['errors']} failed, p99 {r['latency_ms']['p99']:.1f} ms\")")"
row "stream that never reads (${seconds} s)" \
    "another client served: $beside" \
    "$(tail -1 "$out/written") requests written; router RSS ${rss0} -> ${peak} MiB (peak)"

# 2. Open-loop flood at ~2x capacity.
# Capacity: closed loop with enough clients to fill every step. Requests of
# 64 tokens, so that the router's queue bound ((--max-inflight-steps + 2) x
# --max-batch-tokens) is reached at a few hundred requests outstanding.
"$build/client/moe-loadtest" --target "$target" -c 256 --tokens 64 -z 4s \
  --format json >"$out/capacity.json" 2>/dev/null
cap="$(python3 -c "import json; print(json.load(open('$out/capacity.json'))['requests_per_s'])")"
rps="$(python3 -c "print(int(2 * $cap))")"
scrape() {
  python3 -c "import urllib.request,sys; sys.stdout.write(urllib.request.urlopen('http://127.0.0.1:$(cat "$out/metrics_port")/metrics', timeout=5).read().decode())"
}
scrape >"$out/metrics_before"
"$build/client/moe-loadtest" --target "$target" --rps "$rps" --tokens 64 \
  -z "${seconds}s" --no_retry --timeout_ms 5000 --max_outstanding 8192 \
  --format json \
  >"$out/flood.json" 2>/dev/null || true
scrape >"$out/metrics_after"
flood="$(python3 - "$out/flood.json" "$out/metrics_before" "$out/metrics_after" "$out/capacity.json" <<'PY'
import json, re, sys
r = json.load(open(sys.argv[1]))
cap_p99 = json.load(open(sys.argv[4]))["latency_ms"]["p99"]

# The router's own time for the refusals (the flood's RESOURCE_EXHAUSTED
# answers, from its request histogram): what saying no costs the service,
# apart from the client's and the kernel's share on a saturated host.
def buckets(path):
    b = {}
    for line in open(path):
        m = re.match(r'moe_request_duration_seconds_bucket\{(.*)\} (\S+)', line)
        if m and 'code="RESOURCE_EXHAUSTED"' in m.group(1):
            le = re.search(r'le="([^"]+)"', m.group(1)).group(1)
            b[float(le)] = b.get(float(le), 0) + float(m.group(2))
    return b
before, after = buckets(sys.argv[2]), buckets(sys.argv[3])
delta = sorted((le, after[le] - before.get(le, 0)) for le in after)
def quantile(q):
    total = delta[-1][1] if delta else 0
    for le, count in delta:
        if total and count >= q * total:
            return le
    return float("nan")
router_side = (f"; in the router: refusals p50 <= {quantile(0.5) * 1e3:g} ms, "
               f"p99 <= {quantile(0.99) * 1e3:g} ms") if delta else ""
codes = ", ".join(f"{k} {v}" for k, v in sorted(r["status_codes"].items()))
l = r["latency_ms"]
f = r["refused"]
print(f"{r['ok']} ok of {r['requests']} ({codes}); answered p50 "
      f"{l['p50']:.1f} ms, p99 {l['p99']:.1f} ms, max {l['max']:.1f} ms; "
      f"refused p50 {f['p50_ms']:.1f} ms, p99 {f['p99_ms']:.1f} ms, "
      f"max {f['max_ms']:.1f} ms{router_side}; answered p99 / closed-loop "
      f"p99 at capacity {l['p99'] / cap_p99:.2f} ({cap_p99:.1f} ms); "
      f"{r['requests_per_s']:.0f} req/s")
PY
)"
row "open-loop flood at 2x capacity (${rps} req/s vs ${cap%.*} closed-loop)" \
    "excess refused at once (RESOURCE_EXHAUSTED), the rest answered" "$flood"

# 3. Rendezvous waits from a client that is no worker (the worker port is
# the public one here: no --worker-listen).
threads0="$(threads "$router")"
"$build/bench/moe-abuse-client" --target "$target" --park_store_gets 500 \
  --seconds 2 >"$out/parked" 2>&1 &
parker=$!
threads_peak="$threads0"
while kill -0 "$parker" 2>/dev/null; do
  t="$(threads "$router")"
  (( t > threads_peak )) && threads_peak="$t"
  sleep 0.05
done
wait "$parker" || true
row "500 + 500 rendezvous waits (StoreGet) from a non-worker" \
    "none parked: answered at once" \
    "$(tail -1 "$out/parked"); router threads ${threads0} before, ${threads_peak} at most (sampled every 50 ms), $(threads "$router") after"

# 4. Freeze a worker, resume it.
frozen="${workers[1]}"
kill -STOP "$frozen"
t0="$(now_ms)"
until ! serving; do
  (( $(now_ms) - t0 > 10000 )) && break
  sleep 0.05
done
t_ns=$(( $(now_ms) - t0 ))
sleep "$(python3 -c "print(max(0, 3 - $t_ns / 1000))")"
kill -CONT "$frozen"
t1="$(now_ms)"
until answers; do
  (( $(now_ms) - t1 > 20000 )) && break
  sleep 0.05
done
t_ok=$(( $(now_ms) - t1 ))
row "worker frozen 3 s (SIGSTOP), then SIGCONT" \
    "health NOT_SERVING, then answers again" \
    "NOT_SERVING after ${t_ns} ms; answering ${t_ok} ms after SIGCONT"

echo "| attack | what held | figure |"
echo "|---|---|---|"
printf '%s\n' "${rows[@]}"
