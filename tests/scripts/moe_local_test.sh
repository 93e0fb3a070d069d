#!/usr/bin/env bash
# deploy/local/moe-local.sh as the README uses it: --help exits 0; a bad
# option exits 64; started on loopback, it stops on SIGTERM and on SIGINT
# (Ctrl-C) with exit 0, one line saying so, no log dump and none of its
# processes left; with TLS, a client certificate for each worker and both
# token files, the service answers a client with the CA and token, and only
# such a client.
#
#   bash tests/scripts/moe_local_test.sh MOE_LOCAL_SH BUILD_DIR
set -uo pipefail
script="${1:?usage: $0 MOE_LOCAL_SH BUILD_DIR}"
build="${2:?usage: $0 MOE_LOCAL_SH BUILD_DIR}"
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
tmp="$(mktemp -d)"
# moe-local keeps its logs in a directory of its own under TMPDIR: here.
export TMPDIR="$tmp"
model=(--synthetic --hidden 64 --inter 32 --experts 4 --top-k 2)

# --help and usage errors: no process started.
out=$(timeout 20 bash "$script" --help 2>&1)
rc=$?
[[ $rc == 0 && $out == *--ready-timeout* && $out == *"default 1"* ]] ||
  fail "--help: exit $rc, or no --ready-timeout / worker-thread default: $out"
for args in "--bogus" "--workers" "--workers two" "--tls-cert $tmp/none.pem"; do
  # shellcheck disable=SC2086 # the cases are word lists
  out=$(timeout 20 bash "$script" $args 2>&1)
  rc=$?
  [[ $rc == 64 && $out == moe-local:* ]] || fail "$args: expected exit 64, got $rc: $out"
done

# Starts moe-local in the background with SIGNAL at its default (a
# background job of a script starts with SIGINT ignored, which a trap cannot
# undo), waits until it serves, stops it with SIGNAL and checks the stop.
stop_with() { # SIGNAL
  local sig=$1 log="$tmp/$1.out" pid kids rc
  env --default-signal=INT bash "$script" --build-dir "$build" --workers 2 --port 0 \
    -- "${model[@]}" >"$log" 2>&1 &
  pid=$!
  for _ in $(seq 1 600); do
    grep -q "is serving" "$log" && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if ! grep -q "is serving" "$log"; then
    fail "$sig: moe-local did not serve: $(cat "$log")"
    kill -KILL "$pid" 2>/dev/null
    return
  fi
  kids=$(pgrep -P "$pid" | tr '\n' ' ')
  kill -"$sig" "$pid"
  # Stopping takes well under a second when idle; 60 s bounds a hang.
  for _ in $(seq 1 600); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    fail "$sig: moe-local still running after 60 s"
    # shellcheck disable=SC2086 # a list of pids
    kill -KILL "$pid" $kids 2>/dev/null
  fi
  wait "$pid"
  rc=$?
  [[ $rc == 0 ]] || fail "$sig: exit $rc, want 0: $(cat "$log")"
  grep -q "^moe-local: stopped" "$log" || fail "$sig: no 'stopped' line: $(cat "$log")"
  ! grep -q "failed\|==>" "$log" || fail "$sig: logs dumped: $(cat "$log")"
  [[ -n $kids ]] || fail "$sig: no router or worker seen"
  for k in $kids; do
    if kill -0 "$k" 2>/dev/null; then
      fail "$sig: process $k left running"
      kill -KILL "$k" 2>/dev/null
    fi
  done
}
stop_with TERM
stop_with INT

# Ctrl-C on a terminal where moe-local is the session leader, with no shell
# around it: script(1) gives it a pty (bash -c execs the one command), and
# the ^C written there makes the line discipline send SIGINT to the whole
# foreground process group: moe-local, the router and the workers at once.
ctrl_c_on_a_terminal() {
  local log="$tmp/tty.out" fifo="$tmp/tty.in" pid leader kids
  if ! command -v script >/dev/null || ! command -v setsid >/dev/null; then
    echo "skip: Ctrl-C on a terminal (no script or setsid)"
    return
  fi
  mkfifo "$fifo"
  # SIGINT at its default, as a terminal's session starts it (this script's
  # background jobs would start with it ignored, see stop_with).
  env --default-signal=INT setsid -w script -qec "$script --build-dir $build --workers 2 --port 0 -- ${model[*]}" \
    /dev/null <"$fifo" >"$log" 2>&1 &
  pid=$!
  exec 7>"$fifo"
  for _ in $(seq 1 600); do
    grep -q "Ctrl-C or SIGTERM to stop" "$log" && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  leader=$(pgrep -n -f "^bash $script --build-dir $build" || pgrep -n -f "$script --build-dir $build")
  kids=$( [[ -n $leader ]] && pgrep -P "$leader" | tr '\n' ' ')
  if ! grep -q "Ctrl-C or SIGTERM to stop" "$log"; then
    fail "tty: moe-local did not serve: $(cat "$log")"
  else
    printf '\003' >&7
    for _ in $(seq 1 600); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
  fi
  exec 7>&-
  if kill -0 "$pid" 2>/dev/null; then
    fail "tty: moe-local still running 60 s after Ctrl-C: $(cat "$log")"
    # shellcheck disable=SC2086 # a list of pids
    kill -KILL $leader $kids "$pid" 2>/dev/null
  fi
  wait "$pid"
  # The terminal echoes the ^C before the line.
  grep -Eq '^(\^C)?moe-local: stopped' <(tr -d '\r' <"$log") ||
    fail "tty: no 'stopped' line after Ctrl-C: $(cat -v "$log")"
  [[ -n $kids ]] || fail "tty: no router or worker seen"
  for k in $kids; do
    if kill -0 "$k" 2>/dev/null; then
      fail "tty: process $k left running after Ctrl-C"
      kill -KILL "$k" 2>/dev/null
    fi
  done
}
ctrl_c_on_a_terminal

# TLS, mutual TLS for the workers and both token files.
openssl_quiet() { openssl "$@" >/dev/null 2>&1; }
leaf() { # NAME EXTENSIONS
  printf '%s\n' "$2" >"$tmp/$1.ext"
  openssl_quiet req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -subj "/CN=$1" -keyout "$tmp/$1.key" -out "$tmp/$1.csr" &&
    openssl_quiet x509 -req -in "$tmp/$1.csr" -CA "$tmp/ca.pem" -CAkey "$tmp/ca.key" \
      -CAcreateserial -days 2 -extfile "$tmp/$1.ext" -out "$tmp/$1.pem"
}
if openssl_quiet req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
  -days 2 -subj /CN=ca -keyout "$tmp/ca.key" -out "$tmp/ca.pem" &&
  leaf server "subjectAltName=IP:127.0.0.1
extendedKeyUsage=serverAuth" &&
  leaf worker "extendedKeyUsage=clientAuth"; then
  echo "worker-secret" >"$tmp/worker-token"
  echo "client-secret" >"$tmp/auth-token"
  # Inside --run: the call with CA and token succeeds; without the token it
  # is UNAUTHENTICATED (16); without TLS it does not connect (14).
  # shellcheck disable=SC2016 # expanded by the --run shell
  run='cli=$MOE_BIN/client/moe-cli
    $cli info --target "$MOE_TARGET" --tls-ca "$MOE_TLS_CA" \
      --auth-token-file "$MOE_AUTH_TOKEN_FILE" --timeout-ms 5000 || exit 10
    $cli info --target "$MOE_TARGET" --tls-ca "$MOE_TLS_CA" --timeout-ms 5000
    [[ $? == 16 ]] || exit 11
    $cli info --target "$MOE_TARGET" --timeout-ms 2000 >/dev/null 2>&1
    [[ $? == 14 ]] || exit 12'
  out=$(timeout 120 bash "$script" --build-dir "$build" --workers 2 --port 0 \
    --tls-cert "$tmp/server.pem" --tls-key "$tmp/server.key" --tls-ca "$tmp/ca.pem" \
    --worker-cert "$tmp/worker.pem" --worker-key "$tmp/worker.key" \
    --worker-token-file "$tmp/worker-token" --auth-token-file "$tmp/auth-token" \
    --run "$run" -- "${model[@]}" 2>&1)
  rc=$?
  [[ $rc == 0 && $out == *"workers: 2 (2 ready)"* ]] ||
    fail "TLS and tokens: exit $rc: $out"
else
  fail "openssl could not make the test certificates"
fi

rm -rf "$tmp"
if ((fails > 0)); then
  echo "moe_local_test: $fails failure(s)" >&2
  exit 1
fi
echo "moe_local_test: PASS"
