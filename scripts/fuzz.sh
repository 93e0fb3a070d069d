#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan) and runs each for
# MOE_FUZZ_SECONDS (default 30). Fails on any crash or sanitizer report.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${MOE_FUZZ_SECONDS:-30}"
build="${MOE_FUZZ_BUILD_DIR:-build-fuzz}"

CC=clang CXX=clang++ cmake -S . -B "$build" -G Ninja -DMOE_FUZZ=ON \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" --target fuzz_safetensors fuzz_request_validator

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# Seeds: the golden files (tests/golden) and a minimal valid file.
mkdir -p "$work/safetensors" "$work/request_validator"
cp tests/golden/*.safetensors "$work/safetensors/"
printf '\x10\x00\x00\x00\x00\x00\x00\x00{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}' \
  >"$work/safetensors/minimal"
printf '\x00\x01\x02\x01\x00\x08\x00\x00\x00\x80\x3f\x00\x00\x00\x00' >"$work/request_validator/minimal"
# Inputs that once failed stay in the corpus.
cp tests/fuzz/regressions/request_validator/* "$work/request_validator/"

for target in safetensors request_validator; do
  echo "== fuzz_$target for ${seconds}s"
  status=0
  "$build/tests/fuzz/fuzz_$target" -max_total_time="$seconds" -timeout=10 \
    -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$work/" \
    "$work/$target" >"$work/$target.log" 2>&1 || status=$?
  # The summary lines; libFuzzer's own exit status decides (sanitizers are
  # built with -fno-sanitize-recover, so any report is a failing exit).
  grep -E "^(#[0-9]+.*DONE|Done|stat::number_of_executed_units|stat::peak_rss)" \
    "$work/$target.log" || true
  if ((status != 0)); then
    echo "fuzz_$target failed (exit $status):"
    grep -E -A30 "runtime error|==[0-9]+==ERROR" "$work/$target.log" | head -60
    # The input that failed, printed since the work directory goes away.
    for f in "$work"/crash-* "$work"/leak-* "$work"/timeout-*; do
      [[ -f "$f" ]] || continue
      echo "reproducer $(basename "$f") (base64):"
      base64 "$f" | head -20
    done
    exit 1
  fi
done
