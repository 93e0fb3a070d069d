#!/usr/bin/env bash
# moe-gemm-bench's command line, as docs/benchmarks.md uses it: every
# --format (and the generic kernels) times a tiny expert at decode-sized row
# counts and prints its figures; bad flags exit 64 naming the flag. The times
# themselves are not checked (tests assert no speed), only that there are.
#
#   bash tests/scripts/gemm_bench_smoke_test.sh MOE_GEMM_BENCH
set -uo pipefail
bench="${1:?usage: $0 MOE_GEMM_BENCH}"
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }

# One run: exit 0, a line naming the format, ISA and rows, a positive time.
run() { # FORMAT ROWS ISA
  local out rc
  out=$(timeout 60 "$bench" --format "$1" --rows "$2" --isa "$3" \
    --hidden 64 --inter 40 --experts 2 --reps 3 2>&1)
  rc=$?
  if ((rc != 0)); then
    fail "$*: exit status $rc: $out"
    return
  fi
  [[ $out == *"format=$1 "* && $out == *" rows=$2 "* ]] ||
    fail "$*: the line does not name the format and rows: $out"
  [[ $3 == auto || $out == *" isa=$3 "* ]] || fail "$*: ran another ISA: $out"
  local ns
  ns=$(sed -n 's/.*best_ns_per_32_weights=\([0-9.]*\).*/\1/p' <<<"$out")
  awk -v v="$ns" 'BEGIN { exit !(v > 0) }' ||
    fail "$*: no positive best_ns_per_32_weights: $out"
}
for format in mxfp4 fp8 bf16 f32; do
  for rows in 1 2 3 8; do run "$format" "$rows" auto; done
  run "$format" 2 generic
done

# Bad flags: exit 64 (a usage error), the flag named.
refused() { # FLAG ARGS...
  local flag=$1 out rc
  shift
  out=$(timeout 60 "$bench" "$@" 2>&1)
  rc=$?
  [[ $rc == 64 && $out == *"$flag"* ]] ||
    fail "$*: expected exit 64 naming $flag, got $rc: $out"
}
refused --format --format int4
refused --rows --rows 0
refused --isa --isa sse9

if ((fails > 0)); then
  echo "gemm_bench_smoke_test: $fails failure(s)" >&2
  exit 1
fi
echo "gemm_bench_smoke_test: PASS"
