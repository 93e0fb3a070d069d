#!/usr/bin/env bash
# examples/remote_model/make_checkpoint.py writes every family and form it
# lists (the loader's own list, through moe-make-checkpoint), and the
# service loads each one: a router serving the directory answers info and
# a forward on the checkpoint's MoE layer.
#
#   bash tests/scripts/make_checkpoint_test.sh REPO BUILD_DIR
set -uo pipefail
repo="${1:?usage: $0 REPO BUILD_DIR}" build="${2:?usage: $0 REPO BUILD_DIR}"
tmp="$(mktemp -d)"
router_pid=""
cleanup() {
  [[ -z $router_pid ]] || { kill "$router_pid" 2>/dev/null; wait "$router_pid" 2>/dev/null; }
  rm -rf "$tmp"
}
trap cleanup EXIT
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
tool=(env MOE_BIN="$build" python3 "$repo/examples/remote_model/make_checkpoint.py")

mapfile -t forms < <("${tool[@]}" --list)
((${#forms[@]} >= 20)) || { echo "FAIL: only ${#forms[@]} families listed: ${forms[*]}" >&2; exit 1; }
for family in mixtral qwen3_moe gpt_oss deepseek_v4 nemotron_h; do
  printf '%s\n' "${forms[@]}" | grep -qx "$family" || fail "--list lacks $family"
done
printf '%s\n' "${forms[@]}" | grep -qx "gpt_oss --released" || fail "--list lacks gpt_oss's release"

n=0
for form in "${forms[@]}"; do
  read -r -a words <<<"$form"
  dir="$tmp/ckpt$n" n=$((n + 1))
  if ! "${tool[@]}" "${words[0]}" "$dir" "${words[@]:1}" >"$tmp/write.log" 2>&1; then
    fail "$form: not written: $(cat "$tmp/write.log")"
    continue
  fi
  # A Mistral-native form writes params.json and no config.json.
  if [[ " ${words[*]:1} " == *" --mistral "* ]]; then
    [[ -s "$dir/params.json" && ! -e "$dir/config.json" ]] ||
      { fail "$form: not params.json alone"; continue; }
  else
    grep -q "\"model_type\"" "$dir/config.json" 2>/dev/null || { fail "$form: no config.json"; continue; }
  fi
  rm -f "$tmp/port"
  "$build/server/moe-router" --model "$dir" --num-workers 0 --threads 1 \
    --listen 127.0.0.1:0 --port-file "$tmp/port" >"$tmp/router.log" 2>&1 &
  router_pid=$!
  for _ in $(seq 1 300); do
    [[ -s "$tmp/port" ]] && break
    kill -0 "$router_pid" 2>/dev/null || break
    sleep 0.1
  done
  if [[ ! -s "$tmp/port" ]]; then
    fail "$form: the router did not serve it: $(tail -n 5 "$tmp/router.log")"
  else
    target="127.0.0.1:$(cat "$tmp/port")"
    cli=("$build/client/moe-cli" --target "$target" --timeout-ms 60000)
    if ! "${cli[@]}" health --wait 60s >/dev/null 2>&1 ||
      ! "${cli[@]}" info >"$tmp/info.log" 2>&1; then
      fail "$form: no answer: $(cat "$tmp/info.log" 2>/dev/null) $(tail -n 5 "$tmp/router.log")"
    else
      layer=$(sed -n 's/^moe layers: \[\([0-9]*\).*/\1/p' "$tmp/info.log")
      ids=()
      grep -q "^hash-routed layers.*\[$layer[],]" "$tmp/info.log" && ids=(--token-ids random)
      # A layer with vision experts needs each row's type: a text, an
      # image and a video row.
      grep -q "^vision experts of layer $layer " "$tmp/info.log" && ids+=(--token-types "0,1,2")
      if ! "${cli[@]}" forward --layer "$layer" --random 3 "${ids[@]}" >"$tmp/fwd.log" 2>&1; then
        fail "$form: forward on layer $layer: $(cat "$tmp/fwd.log")"
      else
        echo "ok: $form ($(sed -n 's/^model: //p' "$tmp/info.log"))"
      fi
    fi
  fi
  kill "$router_pid" 2>/dev/null
  wait "$router_pid" 2>/dev/null
  router_pid=""
  rm -rf "$dir"
done
((failures == 0)) || { echo "make_checkpoint: $failures of ${#forms[@]} failed" >&2; exit 1; }
echo "make_checkpoint: all ${#forms[@]} families and forms written and served: PASS"
