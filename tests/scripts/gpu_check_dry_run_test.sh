#!/usr/bin/env bash
# The dry run of scripts/gpu-check.sh on a CPU: a fake bundle whose test
# binaries, moe-bench, nvidia-smi, compute-sanitizer and CUDA libraries are
# stubs, driven into each outcome. Checks that the plan shows every step
# with its estimate and limit within the 420 s budget, that every step is
# reported as it went (PASS, FAIL, NOT RUN with its reason), in the order
# of value, that the verdict is written after every step (a run killed
# mid-way still says what passed and what never ran), that the known
# initcheck reports on cuBLAS outputs are waived by name only when the
# control shows the tool blind to cuBLAS's writes, that the all-to-all run
# forces --direct-step-tokens=0, that the versions are recorded, that the
# benchmarks run only in the extra part, and that the check exits non-zero
# unless every correctness step ran and passed.
#
#   bash tests/scripts/gpu_check_dry_run_test.sh [SCRIPTS_DIR]
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
check="${1:-$here/../../scripts}/gpu-check.sh"
tmp="$(mktemp -d)"
[[ -n "${KEEP_TMP:-}" ]] || trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }

# --- the stubs ------------------------------------------------------------
stub="$tmp/stub" b="$tmp/bundle"
mkdir -p "$stub/bin" "$stub/cases" "$stub/lib" "$b/bin" "$b/tests"
cat >"$stub/gtest.sh" <<'STUB'
# A gtest binary: cases from $STUB_DIR/cases/NAME, one Suite.Test a line.
# STUB_FAIL, STUB_SKIP, STUB_DROP (globs): cases that fail, skip, or are
# listed but never run; STUB_SLEEP: seconds per run.
bin="$(basename "$1")"; shift
list=0 filter='*'
for a in "$@"; do
  case "$a" in
    --gtest_list_tests) list=1 ;;
    --gtest_filter=*) filter="${a#--gtest_filter=}" ;;
  esac
done
pos="${filter%%-*}" neg=""
[[ "$filter" == *-* ]] && neg="${filter#*-}"
[[ -n "$pos" ]] || pos='*'
any() {  # NAME PATTERNS(colon list)
  local p
  IFS=: read -r -a ps <<<"$2"
  for p in "${ps[@]}"; do
    # shellcheck disable=SC2053  # a glob, as gtest's
    [[ -n "$p" && "$1" == $p ]] && return 0
  done
  return 1
}
sel=()
while read -r c; do
  [[ -n "$c" ]] || continue
  any "$c" "$pos" && ! any "$c" "$neg" && sel+=("$c")
done <"$STUB_DIR/cases/$bin"
if ((list)); then
  suite=""
  for c in "${sel[@]}"; do
    s="${c%%.*}"
    [[ "$s" == "$suite" ]] || { echo "$s."; suite="$s"; }
    echo "  ${c#*.}"
  done
  exit 0
fi
echo "$bin|$filter|direct=${MOE_TEST_DIRECT_STEP_TOKENS-unset}" >>"$STUB_DIR/calls"
sleep "${STUB_SLEEP:-0}"
# STUB_KILL_CHECK=BINARY: that binary's run kills the check itself (its
# parent is timeout, whose parent is the check), as a lease's end does.
if [[ -n "${STUB_KILL_CHECK:-}" && "$bin" == "$STUB_KILL_CHECK" ]]; then
  read -r _ _ _ check_pid _ </proc/$PPID/stat
  kill -KILL "$check_pid"
  exit 1
fi
ran=0 passed=0 skipped=() failed=()
for c in "${sel[@]}"; do
  [[ -n "${STUB_DROP:-}" && "$c" == $STUB_DROP ]] && continue
  ran=$((ran + 1))
  if [[ -n "${STUB_FAIL:-}" && "$c" == $STUB_FAIL ]]; then failed+=("$c")
  elif [[ -n "${STUB_SKIP:-}" && "$c" == $STUB_SKIP ]]; then
    echo "stub: no device"; echo "[  SKIPPED ] $c (0 ms)"; skipped+=("$c")
  else passed=$((passed + 1)); fi
done
echo "[==========] $ran tests from 1 test suite ran. (0 ms total)"
echo "[  PASSED  ] $passed tests."
((${#skipped[@]})) && echo "[  SKIPPED ] ${#skipped[@]} tests, listed below:"
if ((${#failed[@]})); then
  echo "[  FAILED  ] ${#failed[@]} tests, listed below:"
  for c in "${failed[@]}"; do echo "[  FAILED  ] $c"; done
  exit 1
fi
exit 0
STUB
cases() {  # BINARY CASES...
  printf '%s\n' "${@:2}" >"$stub/cases/$1"
  printf '#!/usr/bin/env bash\nexec bash "$STUB_DIR/gtest.sh" "$0" "$@"\n' >"$b/tests/$1"
  chmod +x "$b/tests/$1"
}
dg=DistributedGoldenTest.EveryCaseMatches
cases kernels_cuda_test CudaKernelTest.RoutingMatchesTheCpuPath \
  CudaKernelTest.StaleErrorDoesNotFailTheNextLaunch CudaFp8KernelTest.SiluMulQuantises
cases engine_test CudaEngineTest.OddSizes CudaExpertsTest.GroupedAndLoop \
  CudaFp8ExpertsTest.Matches CublasApi.Opens GraphCache.CapturesOnTheSecondSighting \
  LtMatmulTest.GemmOutputReadByAKernelMatchesTheHost \
  CudaRouterCallerTest.CallerLogits CudaPaddedPassTest.Pads CudaManyExpertsTest.Worker384 \
  CudaLoadTest.AllOrNothing \
  Golden/GoldenEngineTest.MatchesReference/mixtral_like_cpu_f32 \
  Golden/GoldenEngineTest.MatchesReference/mixtral_like_cuda \
  Golden/GoldenEngineTest.MatchesReference/mixtral_like_cuda_fp8 \
  Golden/GoldenEngineTest.MatchesReference/gemma4_like_cuda \
  Golden4Bit/CudaGolden4BitTest.MatchesTheCpuAtTheSameDtype/gemma4_like_cuda_mxfp4 \
  Golden4Bit/CudaGolden4BitTest.MatchesTheCpuAtTheSameDtype/mixtral_like_cuda_nvfp4
cases distributed_golden_test "Workers/$dg/P0_cpu" "Workers/$dg/P0_cuda" \
  "Workers/$dg/P1_cuda" "Workers/$dg/P2_cuda" "Workers/$dg/P3_cuda" \
  "Fp8Workers/$dg/P0_cuda_fp8" "Fp8Workers/$dg/P1_cuda_fp8" \
  DistributedGolden.DirectStepsGiveTheAllToAllBits
cases comm_nccl_test NcclCommunicator.WarmsUpThenMovesRows
cat >"$b/bin/moe-bench" <<'STUB'
#!/usr/bin/env bash
echo "moe-bench|$*" >>"$STUB_DIR/calls"
[[ -n "${STUB_BENCH_FAIL:-}" ]] && { echo "bench: out of memory"; exit 2; }
echo '{"stub":true}'
STUB
cat >"$stub/bin/nvidia-smi" <<'STUB'
#!/usr/bin/env bash
case "${1:-}" in
  -L) echo "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-00000000-fake)" ;;
  --query-gpu=driver_version) echo "580.95.05" ;;
  *) echo "| NVIDIA-SMI 580.95.05   Driver Version: 580.95.05   CUDA Version: 13.0 |" ;;
esac
STUB
cat >"$stub/compute-sanitizer" <<'STUB'
#!/usr/bin/env bash
# STUB_SAN_ERRORS: errors every run reports. STUB_CUBLAS_BLIND=1: initcheck
# misses cuBLAS's writes: it reports the control and, in the engine's unit
# cases, every read of a GEMM output by SiluMulBf16Kernel unless that
# kernel is excluded.
[[ "${1:-}" == --version ]] && { echo "Version 2025.3.0"; exit 0; }
tool="" excluded=""
while [[ "$1" == --* ]]; do
  [[ "$1" == --tool ]] && tool="$2"
  [[ "$1" == --kernel-name-exclude ]] && excluded+=" ${2#kns=}"
  shift 2
done
echo "sanitizer:$tool${excluded:+ excluding$excluded}" >>"$STUB_DIR/calls"
"$@"; rc=$?
errors=${STUB_SAN_ERRORS:-0}
if [[ "$tool" == initcheck && "${STUB_CUBLAS_BLIND:-}" == 1 && "$*" == *engine_test* ]]; then
  if [[ "$*" == *LtMatmulTest.GemmOutputReadByAKernel* ]]; then
    echo "========= Uninitialized __global__ memory read of size 2 bytes"
    echo "=========     at ConvertKernel(const unsigned short *, long, float *)"
    errors=$((errors + 1))
  elif [[ " $excluded " != *" SiluMulBf16Kernel "* ]]; then
    echo "========= Uninitialized __global__ memory read of size 2 bytes"
    echo "=========     at SiluMulBf16Kernel(const unsigned short *, long, long, unsigned short *)"
    errors=$((errors + 740000))
  fi
fi
echo "========= ERROR SUMMARY: $errors errors"
((rc == 0 && errors > 0)) && rc=1
exit "$rc"
STUB
chmod +x "$b/bin/moe-bench" "$stub/bin/nvidia-smi" "$stub/compute-sanitizer"
for l in libcudart.so.13.0.96 libcublasLt.so.13.1.0.3 libcublas.so.13.1.0.3 libnccl.so.2.27.7; do
  : >"$stub/lib/$l"
  v="${l#*.so.}"
  ln -s "$l" "$stub/lib/${l%%.so.*}.so.${v%%.*}"  # the soname
done
echo "cuda libraries: libcudart.so.13 libcublasLt.so.13 libnccl.so.2" >"$b/MANIFEST"

# run NAME [VAR=VALUE...]: the check with the stubs; sets rc and $o (its OUT_DIR).
rc=0 o=""
run() {
  o="$tmp/out-$1"; shift
  rm -f "$stub/calls"
  env -i PATH="$stub/bin:/usr/bin:/bin" HOME="$tmp" TMPDIR="$tmp" STUB_DIR="$stub" \
    MOE_GPU_CHECK_LIB_DIRS="$stub/lib" MOE_GPU_CHECK_SANITIZER="$stub/compute-sanitizer" \
    "$@" bash "$check" "$b" "$o" >"$tmp/last.log" 2>&1
  rc=$?
}
# result STEP: its result column in summary.txt (PASS, FAIL, NOT RUN).
result() { awk -v s="$1" '$1 == s { print ($2 == "NOT" ? "NOT RUN" : $2) }' "$o/summary.txt"; }
expect() {  # SCENARIO STEP RESULT [DETAIL_SUBSTRING]
  local got; got="$(result "$2")"
  [[ "$got" == "$3" ]] || fail "$1: $2 is '$got', expected '$3'"
  if [[ -n "${4:-}" ]] && ! grep -E "^$2 " "$o/summary.txt" | grep -qF "$4"; then
    fail "$1: $2's detail lacks '$4': $(grep -E "^$2 " "$o/summary.txt")"
  fi
}
expect_rc() { [[ "$rc" == "$2" ]] || { fail "$1: exit $rc, expected $2"; tail -n 30 "$tmp/last.log" >&2; }; }

correctness=(cuda-libs host-libs cuda-kernels cuda-engine-unit cuda-engine-golden nccl
  memcheck-kernels racecheck-kernels synccheck-kernels initcheck-kernels memcheck-engine
  initcheck-control initcheck-engine memcheck-golden-late cuda-dist-golden-P0-P1
  cuda-dist-golden-fp8-P1 cuda-dist-golden-P2-alltoall cuda-dist-golden-P3-direct)
sanitizers=(memcheck-kernels racecheck-kernels synccheck-kernels initcheck-kernels
  memcheck-engine initcheck-control initcheck-engine memcheck-golden-late)

# 0. The plan: every step with its estimate and limit, the correctness part
# within 420 s, the extra part apart.
plan="$(bash "$check" --plan)"
echo "$plan"
for s in "${correctness[@]:2}"; do
  grep -Eq "^$s +[0-9]+ +[0-9]+$" <<<"$plan" || fail "plan: no estimate and limit for $s"
done
planned_s="$(sed -n 's/^planned: \([0-9]*\)s of the 420s budget (correctness part)$/\1/p' <<<"$plan")"
[[ -n "$planned_s" ]] && ((planned_s <= 420)) || fail "plan: correctness part planned at '${planned_s}'s, over 420 s"
grep -q '^bench-' <<<"$plan" && fail "plan: a benchmark in the correctness part"
extra_plan="$(bash "$check" --plan extra)"
grep -q '^bench-layer-N8 ' <<<"$extra_plan" || fail "plan: no benchmarks in the extra part"
grep -q '^cuda-dist-golden-P3-alltoall ' <<<"$extra_plan" || fail "plan: P3 all-to-all not in the extra part"

# 1. Everything there and passing: every correctness step PASS, exit 0, the
# verdict PASSED; no benchmark in this part; initcheck-engine unwaived as the
# control is clean.
run pass
expect_rc pass 0
for s in "${correctness[@]}"; do expect pass "$s" PASS; done
grep -q '^bench-' "$o/summary.txt" && fail "pass: a benchmark ran in the correctness part"
grep -q '^result: PASSED' "$o/summary.txt" || fail "pass: summary does not say PASSED"
expect pass cuda-engine-golden PASS "5 case(s)"
expect pass memcheck-golden-late PASS "2 case(s)"
expect pass memcheck-kernels PASS "2 case(s)"  # the deliberate API errors filtered out
expect pass initcheck-control PASS "runs without waivers"
grep -q 'excluding' "$stub/calls" && fail "pass: a kernel was excluded while the control was clean"
grep -q '^libnccl.so.2: version 2.27.7' "$o/versions.txt" || fail "pass: no NCCL version in versions.txt"
grep -q '^libcublasLt.so.13: version 13.1.0.3' "$o/versions.txt" || fail "pass: no cuBLASLt version"
grep -q '^libcublas.so.13: version 13.1.0.3' "$o/versions.txt" || fail "pass: no cuBLAS version"
grep -q '^libcudart.so.13: version 13.0.96' "$o/versions.txt" || fail "pass: no CUDA runtime version"
grep -q '^driver: 580.95.05' "$o/versions.txt" || fail "pass: no driver version"
python3 -m json.tool "$o/report.json" >/dev/null || fail "pass: report.json is not JSON"
python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); sys.exit(0 if r["final"] and r["ok"] else 1)' "$o/report.json" ||
  fail "pass: report.json is not final and ok"
# The order of value, and the all-to-all path forced for P2.
order="$(grep -v '^sanitizer:' "$stub/calls" | cut -d'|' -f1,3 | uniq | tr '\n' ' ')"
want="kernels_cuda_test|direct=unset engine_test|direct=unset comm_nccl_test|direct=unset "
want+="kernels_cuda_test|direct=unset engine_test|direct=unset distributed_golden_test|direct=unset "
want+="distributed_golden_test|direct=0 distributed_golden_test|direct=64 "
[[ "$order" == "$want" ]] || fail "pass: order of the runs is '$order'"
grep -q '^distributed_golden_test|Workers/[^|]*P2_cuda|direct=0$' "$stub/calls" ||
  fail "pass: P2 cuda never ran with the all-to-all path forced"

# 2. The extra part: the benchmarks, the peer and the distributed variants
# left out of the correctness part.
run extra MOE_GPU_CHECK_PART=extra
expect_rc extra 0
expect extra bench-layer-N8 PASS
expect extra bench-collective "NOT RUN" "needs 2 GPUs"
expect extra peer-golden "NOT RUN"
expect extra cuda-dist-golden-P3-alltoall PASS
grep -q '^distributed_golden_test|Workers/[^|]*P3_cuda|direct=0$' "$stub/calls" ||
  fail "extra: P3 cuda never ran with the all-to-all path forced"
grep -q '^cuda-kernels ' "$o/summary.txt" && fail "extra: the correctness steps ran again"

# 3. A wrong answer at P=3: its step FAILs naming the case; exit 1.
run fail STUB_FAIL='*P3_cuda'
expect_rc fail 1
expect fail cuda-dist-golden-P3-direct FAIL "first failed case Workers/$dg/P3_cuda"
expect fail cuda-dist-golden-P2-alltoall PASS
expect fail nccl PASS
grep -q '^result: FAILED' "$o/summary.txt" || fail "fail: summary does not say FAILED"

# 4. initcheck blind to cuBLAS's writes: the control is reported, so the
# engine's initcheck runs with the waived kernels excluded by name, and the
# run still PASSES; the waivers and their reasons are written out.
run blind STUB_CUBLAS_BLIND=1
expect_rc blind 0
expect blind initcheck-control PASS "waivers apply"
expect blind initcheck-engine PASS "waived in initcheck-engine by name: SiluMulBf16Kernel"
grep -q '^sanitizer:initcheck excluding SiluMulBf16Kernel ' "$stub/calls" ||
  fail "blind: initcheck-engine did not exclude SiluMulBf16Kernel"
grep -q '^waived: SiluMulBf16Kernel: reads the gate-up rows' "$o/waivers.txt" 2>/dev/null ||
  fail "blind: waivers.txt does not give SiluMulBf16Kernel's reason"
grep -q '^result: PASSED' "$o/summary.txt" || fail "blind: summary does not say PASSED"

# 5. No compute-sanitizer: the sanitizer steps are NOT RUN, the check fails.
run nosan MOE_GPU_CHECK_SANITIZER=
expect_rc nosan 1
for s in "${sanitizers[@]}"; do expect nosan "$s" "NOT RUN" "no compute-sanitizer"; done
expect nosan nccl PASS

# 6. A sanitizer report fails its step (not waived: the control is clean).
run sanerr STUB_SAN_ERRORS=3
expect_rc sanerr 1
expect sanerr memcheck-kernels FAIL
expect sanerr initcheck-engine FAIL
expect sanerr cuda-kernels PASS

# 7. A CUDA case skipped on a GPU host is a failure.
run skip STUB_SKIP='CudaEngineTest.OddSizes'
expect_rc skip 1
expect skip cuda-engine-unit FAIL "skipped on a GPU host"

# 8. Fewer cases ran than the filter lists (a crash mid-run that exits 0).
run drop STUB_DROP='CublasApi.*'
expect_rc drop 1
expect drop cuda-engine-unit FAIL "9 case(s) listed, 8 ran"

# 9. No GPU: every gtest step NOT RUN, the check fails.
run nogpu PATH=/usr/bin:/bin
expect_rc nogpu 1
for s in "${correctness[@]:2}"; do expect nogpu "$s" "NOT RUN" "no nvidia-smi"; done

# 10. A step that would outlast the budget is stopped at its end (its limit
# is what the budget has left), and the rest are NOT RUN; the check fails.
run budget MOE_GPU_CHECK_BUDGET_S=15 STUB_SLEEP=30
expect_rc budget 1
expect budget cuda-kernels FAIL "timed out"
for s in "${correctness[@]:3}"; do expect budget "$s" "NOT RUN" "time budget of 15s spent"; done

# 11. Killed mid-way (a lease ending): the verdict written after each step
# says what passed, and every step not reached is NOT RUN.
run killed STUB_KILL_CHECK=comm_nccl_test
[[ -f "$o/summary.txt" ]] || fail "killed: no summary.txt"
expect killed cuda-kernels PASS
expect killed cuda-engine-golden PASS
expect killed cuda-dist-golden-P3-direct "NOT RUN" "not reached"
grep -q '^result: INCOMPLETE' "$o/summary.txt" || fail "killed: summary does not say INCOMPLETE"
python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); sys.exit(0 if not r["final"] and not r["ok"] else 1)' "$o/report.json" ||
  fail "killed: report.json is not a partial, failing verdict"

# 12. A filter that matches no case, a binary missing from the bundle.
printf 'NcclCommunicatorRenamed.Works\n' >"$stub/cases/comm_nccl_test"
mv "$b/tests/distributed_golden_test" "$tmp/dgt"
run filters
expect_rc filters 1
expect filters nccl FAIL "matches no case of tests/comm_nccl_test"
expect filters cuda-dist-golden-P0-P1 "NOT RUN" "not in the bundle"
expect filters cuda-kernels PASS
mv "$tmp/dgt" "$b/tests/distributed_golden_test"
printf 'NcclCommunicator.WarmsUpThenMovesRows\n' >"$stub/cases/comm_nccl_test"

# 13. Only some steps selected: the others NOT RUN, the check fails; a failed
# benchmark fails the extra part.
run only MOE_GPU_CHECK_ONLY='^(cuda-kernels)$'
expect_rc only 1
expect only cuda-kernels PASS
expect only nccl "NOT RUN" "not selected"
run onlyx MOE_GPU_CHECK_PART=extra MOE_GPU_CHECK_ONLY='^bench-layer-N8$' STUB_BENCH_FAIL=1
expect_rc onlyx 1
expect onlyx bench-layer-N8 FAIL "exit 2"

# 14. --list-filters names every gtest step's binary and filter.
n="$(bash "$check" --list-filters | wc -l)"
((n == 19)) || fail "--list-filters printed $n lines, expected 19"

if ((fails)); then
  echo "gpu_check_dry_run_test: $fails check(s) failed" >&2
  exit 1
fi
echo "gpu_check_dry_run_test: ok (15 scenarios)"
