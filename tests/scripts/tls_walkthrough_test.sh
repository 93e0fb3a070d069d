#!/usr/bin/env bash
# The README's TLS walk-through, run as written: its code block is read from
# README.md (so the manual and this test cannot drift apart), the openssl
# commands make a CA, a server certificate with its subjectAltName and a
# worker's client certificate, then the router (TLS, mutual TLS for
# workers, a bearer token), a worker and moe-cli run with the block's flags
# on free loopback ports. Then the refusals a user meets: no token, no CA.
#
#   bash tests/scripts/tls_walkthrough_test.sh README.md MOE_ROUTER MOE_WORKER MOE_CLI
set -uo pipefail
readme="${1:?usage: $0 README.md MOE_ROUTER MOE_WORKER MOE_CLI}"
router_bin="$2" worker_bin="$3" cli_bin="$4"
tmp="$(mktemp -d)"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*" >&2
  for f in "$tmp"/*.log; do [[ -f $f ]] && { echo "--- $f"; tail -n 20 "$f"; }; done
  exit 1
}
free_port() {
  /usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
public="$(free_port)" workers="$(free_port)"

# The block after "A walk-through", continuation lines joined.
block="$(awk '/^A walk-through/ { found = 1 }
  found && /^```sh$/ { inside = 1; next }
  inside && /^```$/ { exit }
  inside { print }' "$readme" | sed -e ':a' -e '/\\$/N; s/\\\n//; ta')"
[[ -n "$block" ]] || fail "no walk-through block in $readme"
grep -q '^openssl x509 ' <<<"$block" || fail "the block makes no certificate"

cd "$tmp" || exit 1
ran=0
while IFS= read -r line; do
  [[ -z "$line" || "$line" == \#* ]] && continue
  line="${line//127.0.0.1:50051/127.0.0.1:$public}"
  line="${line//127.0.0.1:50053/127.0.0.1:$workers}"
  read -r -a words <<<"${line% &}"
  case "${words[0]}" in
    moe-router)
      "$router_bin" "${words[@]:1}" >router.log 2>&1 &
      pids+=($!) ;;
    moe-worker)
      "$worker_bin" "${words[@]:1}" --threads 1 >worker.log 2>&1 &
      pids+=($!) ;;
    moe-cli)
      # As a user runs it: once, no retries (the block waits for health
      # itself before it asks anything else).
      timeout 90 "$cli_bin" "${words[@]:1}" >cli.log 2>&1 ||
        fail "'$line' failed: $(cat cli.log)"
      cat cli.log ;;
    *)
      bash -c "$line" >>openssl.log 2>&1 || fail "'$line' failed" ;;
  esac
  ran=$((ran + 1))
done <<<"$block"
((ran >= 10)) || fail "only $ran commands in the block"
grep -q "hidden\|H=" cli.log || fail "moe-cli info printed no model: $(cat cli.log)"
grep -q "DNS:moe-router, DNS:localhost, IP Address:127.0.0.1" \
  <(openssl x509 -in server.pem -noout -ext subjectAltName) ||
  fail "server.pem lacks the subjectAltName the block asks for"
echo "walk-through: $ran commands ran, moe-cli info answered over TLS with a token"

# What a user meets when a piece is missing: no token, then no CA.
if "$cli_bin" info --target "127.0.0.1:$public" --tls-ca ca.pem \
  --timeout-ms 3000 >cli.log 2>&1; then
  fail "a call without the token was answered"
fi
grep -qi "unauthenticated\|token" cli.log || fail "no token: $(cat cli.log)"
if "$cli_bin" info --target "127.0.0.1:$public" --auth-token-file api-token \
  --timeout-ms 3000 >cli.log 2>&1; then
  fail "a plaintext call to the TLS port was answered"
fi
echo "refused without the token and without TLS, as expected"
echo "tls walk-through: PASS"
