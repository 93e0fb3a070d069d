#!/usr/bin/env bash
# Compares the output bits of two builds of the service (e.g. before and
# after a refactor): for several synthetic layers (token choice with a
# gated shared expert, sigmoid with bias and groups, capacity drops, scores
# before experts, expert choice), a router with P = 0..3 CPU workers of each
# build answers the same seeded requests (N = 1, 37, 256, with routing), and
# the answer files must be byte-identical.
#
#   bench/bits-compare.sh OLD_BUILD_DIR NEW_BUILD_DIR [PORT]
set -euo pipefail
old="$1"
new="$2"
port="${3:-50071}"
here="$(cd "$(dirname "$0")/.." && pwd)"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT

layers=(
  '{"shared_gate":true,"route_norm":false}'
  '{"score_func":"sigmoid","n_groups":4,"topk_groups":2,"use_bias":true,"route_scale":2.5}'
  '{"capacity_factor":0.75,"score_before_experts":true}'
  '{"routing":"expert_choice"}'
)
fail=0
for li in "${!layers[@]}"; do
  opts="${layers[$li]}"
  for p in 0 1 2 3; do
    for side in old new; do
      dir="$old"
      [[ "$side" == new ]] && dir="$new"
      run="for n in 1 37 256; do \$MOE_BIN/client/moe-cli forward --target \$MOE_TARGET --layer 0 --random \$n --seed \$n --routing --output $out/${side}_${li}_${p}_\$n.safetensors >/dev/null 2>&1; done"
      "$here/deploy/local/moe-local.sh" --workers "$p" --port "$port" \
        --build-dir "$dir" --run "$run" -- --synthetic --hidden 96 \
        --inter 40 --experts 16 --top-k 4 --shared-inter 48 --seed 3 \
        --threads 1 --moe-options "$opts" >/dev/null 2>&1
    done
    for n in 1 37 256; do
      a="$out/old_${li}_${p}_$n.safetensors"
      b="$out/new_${li}_${p}_$n.safetensors"
      if [[ -s "$a" ]] && cmp -s "$a" "$b"; then
        echo "same  layer $li P=$p N=$n"
      else
        echo "DIFF  layer $li P=$p N=$n"
        fail=1
      fi
    done
  done
done
exit "$fail"
