#!/usr/bin/env bash
# Starts a router and P expert workers on loopback, waits until the service
# is healthy, then either runs a command against it (--run) or serves until
# Ctrl-C or SIGTERM. Everything started is stopped by pid on exit: the router
# first (it drains the requests in flight, which need the workers), then the
# workers. A stop by Ctrl-C or SIGTERM is quiet (one line, exit 0); a
# failure prints the tail of every log. See usage() or --help.
set -euo pipefail

usage() {
  cat <<'EOF'
usage: deploy/local/moe-local.sh [OPTIONS] [-- ROUTER-FLAGS...]

Starts moe-router and P moe-worker processes on 127.0.0.1, waits until the
service is healthy, then serves until Ctrl-C or SIGTERM (either stops it
and exits 0), or runs COMMAND against it (--run) and stops.

  --workers P            expert workers (default 2)
  --port PORT            the router's public port (default 50051; 0: any
                         free port)
  --build-dir DIR        where the binaries were built (default: build/ of
                         this checkout)
  --worker-threads T     compute threads per worker (default 1, so that the
                         workers share the machine; 0: all cores each)
  --ready-timeout S      seconds to wait for the router to listen, and again
                         for the service to turn healthy (default 120)
  --run 'COMMAND'        run COMMAND with bash once healthy, then stop;
                         exits with COMMAND's status
  -h, --help             print this and exit

TLS and tokens (the router's and workers' flags of the same names):
  --tls-cert PEM --tls-key PEM
                         the router's certificate: TLS on its ports
  --tls-ca PEM           the CA that signed it: the workers and the health
                         check verify the router with it (needs --tls-cert)
  --tls-server-name NAME the name to verify instead of 127.0.0.1
  --worker-cert PEM --worker-key PEM
                         mutual TLS: each worker presents this certificate
                         (signed by --tls-ca) on a worker port of its own,
                         where the router requires one
  --worker-token-file F  the token file of the router and of every worker
  --auth-token-file F    the router's bearer tokens on the public API

ROUTER-FLAGS go to moe-router: --model DIR, or a synthetic model such as
--synthetic --hidden 1024 --experts 32 --top-k 4. COMMAND sees
MOE_TARGET=127.0.0.1:PORT, MOE_BIN (the binaries' directory), MOE_PIDS
("ROUTER-PID WORKER-PIDS..."), and MOE_TLS_CA, MOE_TLS_SERVER_NAME and
MOE_AUTH_TOKEN_FILE (empty unless given).

Exit status: 0 when stopped by Ctrl-C or SIGTERM or when COMMAND succeeds;
COMMAND's status when it fails; 64 for a usage error; 1 when the service
does not start (the logs' tails are printed).
EOF
}

usage_error() {
  echo "moe-local: $* (see deploy/local/moe-local.sh --help)" >&2
  exit 64
}

workers=2
port=50051
build_dir="$(cd "$(dirname "$0")/../.." && pwd)/build"
worker_threads=1
run_cmd=""
ready_timeout=120
tls_cert="" tls_key="" tls_ca="" tls_server_name=""
worker_cert="" worker_key="" worker_token_file="" auth_token_file=""
while (($#)); do
  case "$1" in
    -h | --help) usage; exit 0 ;;
    --) shift; break ;;
    --workers | --port | --build-dir | --worker-threads | --run | \
      --ready-timeout | --tls-cert | --tls-key | --tls-ca | --tls-server-name | \
      --worker-cert | --worker-key | --worker-token-file | --auth-token-file)
      (($# >= 2)) || usage_error "$1 needs a value"
      ;;&
    --workers) workers="$2" ;;
    --port) port="$2" ;;
    --build-dir) build_dir="$2" ;;
    --worker-threads) worker_threads="$2" ;;
    --run) run_cmd="$2" ;;
    --ready-timeout) ready_timeout="$2" ;;
    --tls-cert) tls_cert="$2" ;;
    --tls-key) tls_key="$2" ;;
    --tls-ca) tls_ca="$2" ;;
    --tls-server-name) tls_server_name="$2" ;;
    --worker-cert) worker_cert="$2" ;;
    --worker-key) worker_key="$2" ;;
    --worker-token-file) worker_token_file="$2" ;;
    --auth-token-file) auth_token_file="$2" ;;
    *) usage_error "unknown option $1; router flags go after --" ;;
  esac
  shift 2
done
router_args=("$@")

for n in workers port worker_threads ready_timeout; do
  [[ ${!n} =~ ^[0-9]+$ ]] || usage_error "--${n//_/-} must be a whole number, got '${!n}'"
done
((port <= 65535)) || usage_error "--port must be at most 65535, got $port"
((ready_timeout >= 1)) || usage_error "--ready-timeout must be at least 1"
# The workers can only reach a TLS router knowing its CA, and a router
# requiring worker certificates needs its own certificate as well.
if [[ -n $tls_cert || -n $tls_key || -n $tls_ca ]] &&
  [[ -z $tls_cert || -z $tls_key || -z $tls_ca ]]; then
  usage_error "--tls-cert, --tls-key and --tls-ca go together"
fi
if [[ -n $worker_cert || -n $worker_key ]] &&
  [[ -z $worker_cert || -z $worker_key || -z $tls_ca ]]; then
  usage_error "--worker-cert and --worker-key go together, with --tls-ca"
fi
[[ -z $tls_server_name || -n $tls_ca ]] || usage_error "--tls-server-name needs --tls-ca"
for f in "$tls_cert" "$tls_key" "$tls_ca" "$worker_cert" "$worker_key" \
  "$worker_token_file" "$auth_token_file"; do
  [[ -z $f || -r $f ]] || usage_error "cannot read $f"
done

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

# What each process takes for TLS and tokens: the router serves with its
# certificate; workers and the health check verify it with the CA.
router_security=() worker_security=() client_security=()
if [[ -n $tls_cert ]]; then
  router_security+=(--tls-cert "$tls_cert" --tls-key "$tls_key")
  worker_security+=(--tls-ca "$tls_ca")
  client_security+=(--tls-ca "$tls_ca")
fi
if [[ -n $tls_server_name ]]; then
  worker_security+=(--tls-server-name "$tls_server_name")
  client_security+=(--tls-server-name "$tls_server_name")
fi
if [[ -n $worker_cert ]]; then
  # The router's --tls-ca (client certificates required) applies to a
  # worker port apart from the public one.
  router_security+=(--tls-ca "$tls_ca" --worker-listen 127.0.0.1:0
    --worker-port-file "$log_dir/worker-port")
  worker_security+=(--tls-cert "$worker_cert" --tls-key "$worker_key")
fi
if [[ -n $worker_token_file ]]; then
  router_security+=(--worker-token-file "$worker_token_file")
  worker_security+=(--worker-token-file "$worker_token_file")
fi
[[ -z $auth_token_file ]] || router_security+=(--auth-token-file "$auth_token_file")

pids=()
stopping=0 # set by Ctrl-C or SIGTERM: the stop asked for
force=0    # set by a second one while stopping: kill at once

# Sends SIGTERM to PID, waits up to SECONDS for it to exit, then kills it.
stop_pid() {
  local pid=$1 tenths=$(($2 * 10))
  kill -TERM "$pid" 2>/dev/null || true
  while kill -0 "$pid" 2>/dev/null && ((tenths > 0 && !force)); do
    sleep 0.1
    tenths=$((tenths - 1))
  done
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}

cleanup() {
  local code=$?
  trap 'force=1' INT TERM
  if ((${#pids[@]} > 0)); then
    # The router drains first (30 s at most by default), then the workers go.
    stop_pid "${pids[0]}" 40
    for pid in "${pids[@]:1}"; do kill -TERM "$pid" 2>/dev/null || true; done
    for pid in "${pids[@]:1}"; do stop_pid "$pid" 10; done
  fi
  if ((stopping)); then
    echo "moe-local: stopped (logs: $log_dir)"
  elif ((code != 0)); then
    echo "moe-local: failed (exit $code); logs in $log_dir:" >&2
    tail -n 20 "$log_dir"/*.log >&2 || true
  fi
}
trap cleanup EXIT
trap 'stopping=1; exit 0' INT TERM

# The router and the workers run in a session of their own (setsid, same
# pid: a background child leads no group, so setsid execs in place): a
# Ctrl-C on the terminal then reaches this script alone, whose trap stops
# them in order, rather than them too, each on its own, racing the trap.
detach=()
command -v setsid >/dev/null 2>&1 && detach=(setsid)

"${detach[@]}" "$bin/server/moe-router" --listen "127.0.0.1:$port" --port-file "$log_dir/port" \
  --num-workers "$workers" "${router_security[@]}" "${router_args[@]}" >"$log_dir/router.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 $((ready_timeout * 10))); do
  [[ -s "$log_dir/port" ]] && break
  kill -0 "${pids[0]}" 2>/dev/null || { echo "moe-local: router exited" >&2; exit 1; }
  sleep 0.1
done
[[ -s "$log_dir/port" ]] || { echo "moe-local: router did not start" >&2; exit 1; }
port="$(cat "$log_dir/port")"
target="127.0.0.1:$port"
worker_target="$target"
[[ -z $worker_cert ]] || worker_target="127.0.0.1:$(cat "$log_dir/worker-port")"

for ((i = 0; i < workers; i++)); do
  "${detach[@]}" "$bin/worker/moe-worker" --router "$worker_target" --threads "$worker_threads" \
    "${worker_security[@]}" >"$log_dir/worker$i.log" 2>&1 &
  pids+=($!)
done

ready=0
for _ in $(seq 1 $((ready_timeout * 10))); do
  if "$bin/client/moe-cli" health --target "$target" --timeout-ms 1000 \
    "${client_security[@]}" >/dev/null 2>&1; then
    ready=1
    break
  fi
  sleep 0.1
done
((ready)) || { echo "moe-local: service not healthy after ${ready_timeout}s" >&2; exit 1; }
echo "moe-local: router $target with $workers workers is serving (logs: $log_dir)"

export MOE_TARGET="$target" MOE_BIN="$bin" MOE_PIDS="${pids[*]}" \
  MOE_TLS_CA="$tls_ca" MOE_TLS_SERVER_NAME="$tls_server_name" \
  MOE_AUTH_TOKEN_FILE="$auth_token_file"
if [[ -n "$run_cmd" ]]; then
  bash -c "$run_cmd"
else
  echo "moe-local: Ctrl-C or SIGTERM to stop"
  wait "${pids[0]}"
fi
