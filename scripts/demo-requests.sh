#!/usr/bin/env bash
# Requests for the demo: run by deploy/local/moe-local.sh with MOE_TARGET set.
set -euo pipefail
cli="$MOE_BIN/client/moe-cli"
t=(--target "$MOE_TARGET")

echo "== model"
"$cli" info "${t[@]}"
for layer in 0 1; do
  for n in 1 17 256; do
    echo "== forward: layer $layer, $n tokens"
    "$cli" forward "${t[@]}" --layer "$layer" --random "$n" --seed "$n" --routing --timing
  done
done
echo "== a request for a layer the model does not have is refused, clearly"
out="$(mktemp -d)"
"$cli" forward "${t[@]}" --layer 5 --random 3 || echo "(moe-cli exit code $?: the gRPC status NOT_FOUND)"
echo "== 16 requests at once share steps"
for i in $(seq 1 16); do
  "$cli" forward "${t[@]}" --layer 0 --random 8 --seed "$i" --timing >"$out/$i.txt" &
done
wait
grep -h "timing" "$out"/*.txt |
  sed -E 's/.*step of ([0-9]+) tokens from ([0-9]+) requests.*/rode in a step of \1 tokens from \2 requests/' |
  sort | uniq -c
rm -rf "$out"
echo "== expert load of layer 0"
"$cli" stats "${t[@]}" --layer 0
