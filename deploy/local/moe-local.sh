#!/usr/bin/env bash
# Starts a router and P expert workers on loopback, waits until the service
# is healthy, then either runs a command against it (--run) or serves until
# Ctrl-C. Everything started is stopped by pid on exit.
#
#   deploy/local/moe-local.sh [--workers P] [--port PORT] [--build-dir DIR]
#       [--worker-threads T] [--run 'COMMAND'] -- MODEL-AND-ROUTER-FLAGS...
#
# MODEL-AND-ROUTER-FLAGS go to moe-router, e.g. --model /models/olmoe or
# --synthetic --hidden 1024 --experts 32 --top-k 4. The command given to
# --run sees MOE_TARGET=127.0.0.1:PORT, MOE_BIN=<dir of the binaries> and
# MOE_PIDS="<router pid> <worker pids...>".
set -euo pipefail

workers=2
port=50051
build_dir="$(cd "$(dirname "$0")/../.." && pwd)/build"
worker_threads=1
run_cmd=""
ready_timeout=120
while (($#)); do
  case "$1" in
    --workers) workers="$2"; shift 2 ;;
    --port) port="$2"; shift 2 ;;
    --build-dir) build_dir="$2"; shift 2 ;;
    --worker-threads) worker_threads="$2"; shift 2 ;;
    --run) run_cmd="$2"; shift 2 ;;
    --ready-timeout) ready_timeout="$2"; shift 2 ;;
    --) shift; break ;;
    *) echo "moe-local: unknown option $1 (router flags go after --)" >&2; exit 64 ;;
  esac
done
router_args=("$@")

bin="$build_dir"
for b in server/moe-router worker/moe-worker client/moe-cli; do
  if [[ ! -x "$bin/$b" ]]; then
    echo "moe-local: $bin/$b not found; build first:" >&2
    echo "  bash scripts/install-deps.sh" >&2
    echo "  cmake -S . -B $build_dir -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_BUILD_TESTS=OFF" >&2
    echo "  cmake --build $build_dir --target moe-router moe-worker moe-cli" >&2
    exit 1
  fi
done

log_dir="$(mktemp -d "${TMPDIR:-/tmp}/moe-local.XXXXXX")"
pids=()
cleanup() {
  local code=$?
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  if ((code != 0)); then
    echo "moe-local: failed (exit $code); logs in $log_dir:" >&2
    tail -n 20 "$log_dir"/*.log >&2 || true
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

"$bin/server/moe-router" --listen "127.0.0.1:$port" --port-file "$log_dir/port" \
  --num-workers "$workers" "${router_args[@]}" >"$log_dir/router.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 $((ready_timeout * 10))); do
  [[ -s "$log_dir/port" ]] && break
  kill -0 "${pids[0]}" 2>/dev/null || { echo "moe-local: router exited" >&2; exit 1; }
  sleep 0.1
done
[[ -s "$log_dir/port" ]] || { echo "moe-local: router did not start" >&2; exit 1; }
port="$(cat "$log_dir/port")"
target="127.0.0.1:$port"

for ((i = 0; i < workers; i++)); do
  "$bin/worker/moe-worker" --router "$target" --threads "$worker_threads" \
    >"$log_dir/worker$i.log" 2>&1 &
  pids+=($!)
done

ready=0
for _ in $(seq 1 $((ready_timeout * 10))); do
  if "$bin/client/moe-cli" health --target "$target" --timeout-ms 1000 >/dev/null 2>&1; then
    ready=1
    break
  fi
  sleep 0.1
done
((ready)) || { echo "moe-local: service not healthy after ${ready_timeout}s" >&2; exit 1; }
echo "moe-local: router $target with $workers workers is serving (logs: $log_dir)"

export MOE_TARGET="$target" MOE_BIN="$bin" MOE_PIDS="${pids[*]}"
if [[ -n "$run_cmd" ]]; then
  bash -c "$run_cmd"
else
  echo "moe-local: Ctrl-C to stop"
  wait "${pids[0]}"
fi
