#!/usr/bin/env bash
# A router and two workers on three "hosts": network namespaces joined by a
# bridge, each with its own address in 10.213.0.0/24 (which exists only
# inside these namespaces). The bridge lives in a fourth, hub namespace, so
# nothing is added to the host's own network namespace.
#
#   netns.sh BUILD_DIR form                  the group forms without
#                                            --collective-host; answers are
#                                            those of an in-process router
#   netns.sh BUILD_DIR partition-idle [S]    worker 1's link down S s (4)
#                                            while idle; correct answers
#                                            within 5 s of the heal
#   netns.sh BUILD_DIR partition-busy [S]    the same while requests flow:
#                                            they fail (UNAVAILABLE) within
#                                            the step timeout during the
#                                            partition and succeed within 5 s
#                                            after the heal
#   netns.sh BUILD_DIR partition-router [S]  the router's link down S s (6):
#                                            both workers register again
#                                            and answers are correct within
#                                            5 s of the heal
#   netns.sh BUILD_DIR partition-regroup [S] worker 1's link down S s (10),
#                                            longer than the router's
#                                            --regroup-after-ms (2000) while
#                                            requests flow: worker 0 alone
#                                            serves before the heal, worker 1
#                                            rejoins after it
#
# Prints one "trial:" line per partition (fail and recovery times, ms).
# Exit 77 (skipped) without root, `ip` or network namespaces. Everything it
# made (namespaces, and with them the bridge and veths; processes, by pid;
# its temporary directory) is removed on exit, also on failure or a signal.
set -euo pipefail

if [[ $# -lt 2 ]]; then
  echo "usage: $0 BUILD_DIR form|partition-idle|partition-busy|partition-router|partition-regroup [SECONDS]" >&2
  exit 64
fi
if [[ "$(id -u)" -ne 0 ]]; then
  echo "SKIP: needs root (network namespaces)"
  exit 77
fi
if ! command -v ip >/dev/null; then
  echo "SKIP: needs ip (iproute2)"
  exit 77
fi
BUILD="$(cd "$1" && pwd)"
SCENARIO="$2"
case "$SCENARIO" in
  partition-router) PARTITION_S="${3:-6}" ;;
  partition-regroup) PARTITION_S="${3:-10}" ;;
  *) PARTITION_S="${3:-4}" ;;
esac
ROUTER_BIN="$BUILD/server/moe-router"
WORKER_BIN="$BUILD/worker/moe-worker"
CLI_BIN="$BUILD/client/moe-cli"
for b in "$ROUTER_BIN" "$WORKER_BIN" "$CLI_BIN"; do
  [[ -x "$b" ]] || {
    echo "missing $b (build moe-router moe-worker moe-cli)" >&2
    exit 1
  }
done

STEP_TIMEOUT_MS=2000
SUBNET=10.213.0
TAG="moe-mh$$"
HUB="$TAG-hub"
NODES=("$TAG-r" "$TAG-w0" "$TAG-w1")  # router, worker 0, worker 1
MODEL=(--synthetic --hidden 256 --inter 128 --experts 8 --top-k 2
  --shared-inter 128 --layers 1 --seed 42 --threads 1)
NSES=()
PIDS=()
TMP="$(mktemp -d "/tmp/$TAG.XXXXXX")"

cleanup() {
  local rc=$?
  set +e
  trap - EXIT INT TERM
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null; done
  for _ in $(seq 30); do
    local alive=0
    for pid in "${PIDS[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    [[ $alive -eq 0 ]] && break
    sleep 0.1
  done
  for pid in "${PIDS[@]}"; do kill -KILL "$pid" 2>/dev/null; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null; done
  if [[ $rc -ne 0 && $rc -ne 77 ]]; then
    for f in "$TMP"/*.log; do
      [[ -f "$f" ]] || continue
      echo "--- $(basename "$f") (last 12 lines)"
      tail -n 12 "$f"
    done
  fi
  # Deleting a namespace deletes its interfaces: the veths and the bridge.
  for ns in "${NSES[@]}"; do ip netns del "$ns" 2>/dev/null; done
  rm -rf "$TMP"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

now_ms() { date +%s%3N; }
log() { echo "[$(date +%T.%3N)] $*"; }
die() {
  log "FAIL: $*"
  exit 1
}

add_ns() {
  ip netns add "$1"
  NSES+=("$1")
  ip -n "$1" link set lo up
}

setup_network() {
  if ! add_ns "$HUB" 2>"$TMP/netns.err"; then
    echo "SKIP: cannot create network namespaces: $(cat "$TMP/netns.err")"
    exit 77
  fi
  ip -n "$HUB" link add br0 type bridge
  ip -n "$HUB" link set br0 up
  local i
  for i in "${!NODES[@]}"; do
    add_ns "${NODES[$i]}"
    ip -n "$HUB" link add "p$i" type veth peer name eth0 netns "${NODES[$i]}"
    ip -n "$HUB" link set "p$i" master br0 up
    ip -n "${NODES[$i]}" addr add "$SUBNET.$((i + 1))/24" dev eth0
    ip -n "${NODES[$i]}" link set eth0 up
  done
}

# start NAME NS ARGV...: runs ARGV in NS (ip netns exec execs it: the pid is
# the program's), output in $TMP/NAME.log.
start() {
  local name="$1" ns="$2"
  shift 2
  ip netns exec "$ns" "$@" >"$TMP/$name.log" 2>&1 &
  PIDS+=($!)
}

ROUTER_IP="$SUBNET.1"
ROUTER_PID=
ROUTER_EXTRA=()  # more router flags, per scenario
start_cluster() {
  # Registration is closed by a worker token (the router insists).
  od -An -tx1 -N16 /dev/urandom | tr -d ' \n' >"$TMP/worker-token"
  start router "${NODES[0]}" "$ROUTER_BIN" --listen "0.0.0.0:50051" \
    --num-workers 2 --step-timeout-ms "$STEP_TIMEOUT_MS" \
    --worker-token-file "$TMP/worker-token" "${ROUTER_EXTRA[@]}" "${MODEL[@]}"
  ROUTER_PID="${PIDS[-1]}"
  # The reference: the same model with every expert in-process.
  start reference "${NODES[0]}" "$ROUTER_BIN" --listen "127.0.0.1:50052" \
    --num-workers 0 "${MODEL[@]}"
  start worker0 "${NODES[1]}" "$WORKER_BIN" --router "$ROUTER_IP:50051" \
    --threads 1 --worker-token-file "$TMP/worker-token"
  start worker1 "${NODES[2]}" "$WORKER_BIN" --router "$ROUTER_IP:50051" \
    --threads 1 --worker-token-file "$TMP/worker-token"
}

# forward PORT SEED TIMEOUT_MS: one request from the router's namespace;
# prints moe-cli's output, returns its exit code (the gRPC status code).
forward() {
  ip netns exec "${NODES[0]}" "$CLI_BIN" forward --target "127.0.0.1:$1" \
    --layer 0 --random 5 --seed "$2" --routing --timeout-ms "$3" 2>&1
}

# The answer's fingerprint: the rms of y and the first token's routing.
fingerprint() { sed -nE 's/.* rms ([0-9.]+),.*/\1/p; s/^routing: //p' | tr '\n' ' '; }

declare -A REF
reference() {
  if [[ -z "${REF[$1]:-}" ]]; then
    REF[$1]="$(forward 50052 "$1" 10000 | fingerprint)"
  fi
  echo "${REF[$1]}"
}

# same FP1 FP2: equal routing, rms within 1e-5 relative.
same() {
  local a b
  read -ra a <<<"$1"
  read -ra b <<<"$2"
  [[ ${#a[@]} -gt 1 && "${a[*]:1}" == "${b[*]:1}" ]] || return 1
  awk -v x="${a[0]}" -v y="${b[0]}" \
    'BEGIN { d = x - y; if (d < 0) d = -d; exit !(d <= 1e-5 * (y > 1 ? y : 1)) }'
}

# check SEED: the cluster's answer equals the reference's.
check() {
  local out fp ref
  out="$(forward 50051 "$1" 5000)" || die "seed $1: $out"
  fp="$(fingerprint <<<"$out")"
  ref="$(reference "$1")"
  same "$fp" "$ref" || die "seed $1: answer '$fp', reference '$ref'"
}

wait_ready() {
  local deadline=$(($(now_ms) + 60000))
  until forward 50051 1 2000 >/dev/null; do
    [[ $(now_ms) -lt $deadline ]] || die "no worker group within 60 s"
    kill -0 "$ROUTER_PID" 2>/dev/null || die "the router exited"
    sleep 0.2
  done
}

form() {
  setup_network
  start_cluster
  wait_ready
  local seed
  for seed in 1 2 3; do check "$seed"; done
  local w
  for w in 0 1; do
    grep -q "collective transport on $SUBNET.$((w + 2)) " "$TMP/worker$w.log" ||
      die "worker $w does not advertise $SUBNET.$((w + 2))"
  done
  grep -q "registered from ipv4:$SUBNET." "$TMP/router.log" ||
    die "no registration from $SUBNET.0/24"
  log "group formed across namespaces; answers match the in-process reference"
  # A worker that advertises loopback from another host is refused, by name
  # of the flag, and the group goes on.
  start liar "${NODES[1]}" "$WORKER_BIN" --router "$ROUTER_IP:50051" \
    --threads 1 --worker-token-file "$TMP/worker-token" \
    --collective-host 127.0.0.1
  local deadline=$(($(now_ms) + 10000))
  until grep -q "loopback collective address 127.0.0.1.*--collective-host" \
    "$TMP/router.log"; do
    [[ $(now_ms) -lt $deadline ]] || die "loopback registration not refused"
    sleep 0.2
  done
  grep -q "refused this worker.*--collective-host" "$TMP/liar.log" ||
    die "the refused worker does not say why"
  check 4
  log "a loopback --collective-host from another namespace is refused"
}

# partition [PORT]: the hub's end of a node's link down (p0: the router,
# p1: worker 0, p2: worker 1, the default); heal [PORT]: up again.
partition() { ip -n "$HUB" link set "${1:-p2}" down; }
heal() { ip -n "$HUB" link set "${1:-p2}" up; }

# Idle: nothing is sent during the partition. Fail time: when worker 1
# notices its dead stream (keepalive); recovery: first correct answer.
partition_idle() {
  setup_network
  start_cluster
  wait_ready
  check 1
  local gone0 t0 t_fail=-1 t_heal t_ok out
  gone0="$(grep -c "unreachable or gone" "$TMP/worker1.log" || true)"
  t0=$(now_ms)
  partition
  log "worker 1 partitioned for $PARTITION_S s"
  while [[ $(now_ms) -lt $((t0 + PARTITION_S * 1000)) ]]; do
    if [[ $t_fail -lt 0 && "$(grep -c "unreachable or gone" \
      "$TMP/worker1.log" || true)" -gt $gone0 ]]; then
      t_fail=$(($(now_ms) - t0))
    fi
    sleep 0.1
  done
  heal
  t_heal=$(now_ms)
  log "healed"
  until out="$(forward 50051 2 2000)"; do
    [[ $(now_ms) -lt $((t_heal + 5000)) ]] ||
      die "no answer within 5 s of the heal"
    sleep 0.1
  done
  t_ok=$(($(now_ms) - t_heal))
  same "$(fingerprint <<<"$out")" "$(reference 2)" || die "wrong answer"
  echo "trial: scenario=partition-idle partition_s=$PARTITION_S" \
    "worker_noticed_ms=$t_fail recovery_ms=$t_ok"
  [[ $t_fail -ge 0 ]] || die "worker 1 did not notice the dead stream"
  [[ $t_ok -le 5000 ]] || die "first answer $t_ok ms after the heal"
}

# Busy: a client sends one request after another (timeout: step timeout
# + 1 s). Fail time: first failure after the partition; recovery: first
# success after the heal (its end), both in ms.
partition_busy() {
  setup_network
  start_cluster
  wait_ready
  check 1
  local ref
  ref="$(reference 1)"
  (
    while [[ ! -f "$TMP/stop" ]]; do
      s=$(now_ms)
      rc=0
      out="$(forward 50051 1 $((STEP_TIMEOUT_MS + 1000)))" || rc=$?
      echo "$s $(now_ms) $rc $(fingerprint <<<"$out")" >>"$TMP/requests"
    done
  ) &
  PIDS+=($!)
  sleep 1
  local t_part t_heal
  t_part=$(now_ms)
  partition
  log "worker 1 partitioned for $PARTITION_S s while requests flow"
  sleep "$PARTITION_S"
  heal
  t_heal=$(now_ms)
  log "healed"
  sleep 6
  touch "$TMP/stop"
  wait "${PIDS[-1]}"
  local s e rc fp t_fail=-1 t_ok=-1 during=0 failed=0 slowest=0
  while read -r s e rc fp; do
    if [[ $rc -eq 0 ]]; then
      same "$fp" "$ref" || die "wrong answer: '$fp', reference '$ref'"
    fi
    if [[ $s -ge $t_part && $e -le $t_heal ]]; then
      during=$((during + 1))
      [[ $((e - s)) -gt $slowest ]] && slowest=$((e - s))
      if [[ $rc -ne 0 ]]; then
        failed=$((failed + 1))
        [[ $rc -eq 14 ]] || die "request during the partition: code $rc, not UNAVAILABLE (14)"
      fi
    fi
    if [[ $rc -ne 0 && $e -ge $t_part && $t_fail -lt 0 ]]; then
      t_fail=$((e - t_part))
    fi
    if [[ $rc -eq 0 && $e -ge $t_heal && $t_ok -lt 0 ]]; then
      t_ok=$((e - t_heal))
    fi
  done <"$TMP/requests"
  echo "trial: scenario=partition-busy partition_s=$PARTITION_S" \
    "fail_ms=$t_fail recovery_ms=$t_ok requests_during=$during" \
    "failed_during=$failed slowest_during_ms=$slowest"
  [[ $failed -gt 0 ]] || die "no request failed during the partition"
  [[ $slowest -le $((STEP_TIMEOUT_MS + 1000)) ]] ||
    die "a request during the partition took $slowest ms"
  [[ $t_ok -ge 0 && $t_ok -le 5000 ]] ||
    die "no answer within 5 s of the heal (recovery $t_ok ms)"
}

# requests_loop: one request after another from the router's namespace
# (timeout: step timeout + 1 s) until $TMP/stop exists; one line per request
# in $TMP/requests: start_ms end_ms code fingerprint. Its pid is PIDS[-1].
requests_loop() {
  (
    while [[ ! -f "$TMP/stop" ]]; do
      s=$(now_ms)
      rc=0
      out="$(forward 50051 1 $((STEP_TIMEOUT_MS + 1000)))" || rc=$?
      echo "$s $(now_ms) $rc $(fingerprint <<<"$out")" >>"$TMP/requests"
    done
  ) &
  PIDS+=($!)
}

# The router's host cut off: both workers lose their streams (keepalive,
# heartbeats); after the heal both register again and answers are correct
# within 5 s. Register time: from the heal until the router has logged both
# new registrations.
partition_router() {
  setup_network
  start_cluster
  wait_ready
  check 1
  local regs0 t0 t_heal t_ok=-1 t_reg=-1 out
  regs0="$(grep -c "registered from" "$TMP/router.log" || true)"
  t0=$(now_ms)
  partition p0
  log "the router partitioned for $PARTITION_S s"
  sleep "$PARTITION_S"
  heal p0
  t_heal=$(now_ms)
  log "healed"
  while [[ $t_ok -lt 0 || $t_reg -lt 0 ]]; do
    [[ $(now_ms) -lt $((t_heal + 10000)) ]] || break
    if [[ $t_reg -lt 0 && "$(grep -c "registered from" "$TMP/router.log" ||
      true)" -ge $((regs0 + 2)) ]]; then
      t_reg=$(($(now_ms) - t_heal))
    fi
    if [[ $t_ok -lt 0 ]] && out="$(forward 50051 2 2000)"; then
      same "$(fingerprint <<<"$out")" "$(reference 2)" || die "wrong answer"
      t_ok=$(($(now_ms) - t_heal))
    fi
    sleep 0.1
  done
  echo "trial: scenario=partition-router partition_s=$PARTITION_S" \
    "reregistered_ms=$t_reg recovery_ms=$t_ok"
  [[ $t_reg -ge 0 ]] || die "the workers did not register again within 10 s"
  [[ $t_ok -ge 0 && $t_ok -le 5000 ]] ||
    die "no answer within 5 s of the heal (recovery $t_ok ms)"
  check 3
}

# A worker's host cut off for longer than --regroup-after-ms while requests
# flow: the router drops it (heartbeats), the other worker forms a group of
# one and answers before the heal; after the heal the cut worker registers
# again and the group is back to two.
partition_regroup() {
  ROUTER_EXTRA=(--regroup-after-ms 2000)
  setup_network
  start_cluster
  wait_ready
  check 1
  local ref
  ref="$(reference 1)"
  requests_loop
  sleep 1
  local t_part t_heal t_full=-1 info
  t_part=$(now_ms)
  partition
  log "worker 1 partitioned for $PARTITION_S s while requests flow"
  sleep "$PARTITION_S"
  heal
  t_heal=$(now_ms)
  log "healed"
  while [[ $(now_ms) -lt $((t_heal + 20000)) ]]; do
    info="$(ip netns exec "${NODES[0]}" "$CLI_BIN" info \
      --target 127.0.0.1:50051 2>&1)" || true
    if grep -q "workers: 2 (2 ready), ready: yes" <<<"$info" &&
      ! grep -q "degraded" <<<"$info"; then
      t_full=$(($(now_ms) - t_heal))
      break
    fi
    sleep 0.2
  done
  sleep 1
  touch "$TMP/stop"
  wait "${PIDS[-1]}"
  local s e rc fp t_fail=-1 t_served=-1 t_after=-1 failed=0
  while read -r s e rc fp; do
    if [[ $rc -eq 0 ]]; then
      same "$fp" "$ref" || die "wrong answer: '$fp', reference '$ref'"
    elif [[ $rc -ne 14 ]]; then
      die "a request failed with code $rc, not UNAVAILABLE (14)"
    fi
    [[ $rc -ne 0 && $e -ge $t_part ]] && failed=$((failed + 1))
    if [[ $rc -ne 0 && $e -ge $t_part && $t_fail -lt 0 ]]; then
      t_fail=$((e - t_part))
    fi
    # Served by the group of one: started after the first failure, ended
    # before the heal.
    if [[ $rc -eq 0 && $t_fail -ge 0 && $e -lt $t_heal && $t_served -lt 0 ]]; then
      t_served=$((e - t_part))
    fi
    if [[ $rc -eq 0 && $e -ge $t_heal && $t_after -lt 0 ]]; then
      t_after=$((e - t_heal))
    fi
  done <"$TMP/requests"
  echo "trial: scenario=partition-regroup partition_s=$PARTITION_S" \
    "fail_ms=$t_fail served_alone_ms=$t_served full_again_ms=$t_full" \
    "first_after_heal_ms=$t_after failed=$failed"
  [[ $t_fail -ge 0 ]] || die "no request failed when worker 1 was cut off"
  [[ $t_served -ge 0 ]] ||
    die "worker 0 did not serve alone before the heal"
  [[ $t_full -ge 0 ]] || die "worker 1 did not rejoin within 20 s of the heal"
  [[ $t_after -ge 0 && $t_after -le 5000 ]] ||
    die "no answer within 5 s of the heal ($t_after ms)"
  grep -q "DEGRADED (1 of 2 configured workers" "$TMP/router.log" ||
    die "the router did not log the group of one"
  check 3
}

case "$SCENARIO" in
  form) form ;;
  partition-idle) partition_idle ;;
  partition-busy) partition_busy ;;
  partition-router) partition_router ;;
  partition-regroup) partition_regroup ;;
  *)
    echo "unknown scenario $SCENARIO" >&2
    exit 64
    ;;
esac
log "PASS $SCENARIO"
