#!/usr/bin/env bash
# moe-bench of two builds, alternating, at DeepSeek-V2-Lite sizes: bf16, fp8,
# mxfp4 and nvfp4 at N=8, f32, bf16, fp8 and mxfp4 at N=512, each pair back
# to back, twice, so both builds see the same machine. Prints tokens/s and
# GFLOP/s per run (a build without a weight dtype says so and goes on: nvfp4
# is newer than most builds one compares against).
#   bench/moe-bench-ab.sh OLD_BUILD_DIR NEW_BUILD_DIR
set -euo pipefail
if (($# != 2)); then
  echo "usage: $0 OLD_BUILD_DIR NEW_BUILD_DIR" >&2
  exit 64
fi
old="$1/bench/moe-bench"
new="$2/bench/moe-bench"
common=(--synthetic --hidden 2048 --inter 1408 --experts 64 --top-k 6
  --shared-inter 2816 --skip-references)
run() { # LABEL BINARY TOKENS DTYPE REPS
  "$2" "${common[@]}" --tokens "$3" --weight-dtype "$4" --reps "$5" 2>&1 |
    tail -n 1 | python3 -c "import json, sys
d = json.loads(sys.stdin.read())
print('$1 N=%d %s: %.1f tokens/s, %.1f GFLOP/s' % (d['tokens'], d['weight_dtype'],
      d['tokens_per_s'], d['gflops']))" 2>/dev/null ||
    echo "$1 N=$3 $4: not supported by this build"
}
for _ in 1 2; do
  for cfg in "8 bf16 30" "8 fp8 30" "8 mxfp4 30" "8 nvfp4 30" \
    "512 f32 5" "512 bf16 5" \
    "512 fp8 5" "512 mxfp4 5"; do
    read -r tokens dtype reps <<<"$cfg"
    run old "$old" "$tokens" "$dtype" "$reps"
    run new "$new" "$tokens" "$dtype" "$reps"
  done
done
