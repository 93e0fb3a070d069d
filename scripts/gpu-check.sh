#!/usr/bin/env bash
# Runs everything that needs a GPU from a release bundle (scripts/package.sh)
# and writes a report (README, "Running the GPU check"):
#
#   bash scripts/gpu-check.sh BUNDLE_DIR OUT_DIR
#   bash scripts/gpu-check.sh --list-filters   # "binary<TAB>filter" per gtest step
#
# Work is ordered by value, so that a budget or a crash costs the least
# useful steps first:
#   1. the CUDA unit tests (kernels, expert passes, engine), the engine's
#      golden cases on the GPU, the distributed golden cases at P=0 and 1
#      (the late-2026 cases too; Gemma 4 also once behind a CPU router
#      part: in-process in the engine's cases, as CUDA workers of a CPU
#      router at P = 1);
#   2. the distributed golden cases at P=2 and 3 on the GPU twice: with the
#      all-to-all path forced (MOE_TEST_DIRECT_STEP_TOKENS=0, read by
#      tests/testutil/local_cluster.cc: host-staged exchange, regroup with a
#      scatter, the workers' combine) and with direct steps;
#   3. the NCCL communicator;
#   4. compute-sanitizer (memcheck, racecheck, synccheck, initcheck on the
#      kernels; memcheck and initcheck on the engine's CUDA cases, the
#      latter after initcheck on a bare cuBLASLt GEMM's output, its control). API
#      errors are reported as usual: the one test that makes failing CUDA
#      calls on purpose is filtered out, nothing is muted;
#   5. the GPU benchmarks of README.md, then the PyTorch peer.
# Steps 1-4 are the correctness steps. Each step's result is PASS, FAIL
# (reason) or NOT RUN (reason); a gtest step passes only when every case its
# filter lists ran and passed (a filter that matches nothing, a skipped case
# or fewer cases run than listed is a FAIL).
#
# Exit status: 0 only when every correctness step ran and passed and no
# other step failed; 1 otherwise (no GPU, no compute-sanitizer and a spent
# budget included). OUT_DIR gets summary.txt (step, result, seconds),
# report.json, versions.txt (driver, CUDA runtime, cuBLAS, cuBLASLt, NCCL)
# and one log per step.
#
# Environment: MOE_GPU_CHECK_BUDGET_S (1500): the whole run's budget; steps
# that would start after it are NOT RUN. MOE_GPU_CHECK_ONLY (a bash regex):
# run only the steps whose name matches; the others are NOT RUN, so a run
# split over several calls fails until each part passes.
# MOE_GPU_CHECK_STEP_LIMIT_S: the longest any one step may run (default: each
# step's own timeout), so that a hung step on a short device lease costs at
# most this much.
# MOE_GPU_CHECK_LIB_DIRS (colon list): where to look for the CUDA libraries
# instead of the usual CUDA directories. MOE_GPU_CHECK_SANITIZER: the
# compute-sanitizer to use (set and empty: none). The last two exist for the
# dry run (tests/scripts/gpu_check_dry_run_test.sh).
set -uo pipefail

# --- the steps ----------------------------------------------------------------
# NAME|CLASS|TIMEOUT_S|ENV|BINARY|FILTER. CLASS: test, or san:TOOL (the
# binary under compute-sanitizer). ENV: one VAR=VALUE or empty.
cuda_unit='CudaEngineTest.*:CudaExpertsTest.*:CudaFp8ExpertsTest.*:CublasApi.*:LtMatmulTest.*'
# initcheck's control: a cuBLASLt GEMM's output read by one of our kernels.
# If initcheck reports it, the tool does not see cuBLAS's writes on this GPU
# and initcheck-engine's reports of reads after a GEMM are the tool's.
initcheck_control='LtMatmulTest.GemmOutputReadByAKernelMatchesTheHost'
# The cases that make failing CUDA calls on purpose (an invalid device, a
# launch of 2^31 blocks): compute-sanitizer reports those as API errors.
deliberate_api_errors='CudaKernelTest.StaleErrorDoesNotFailTheNextLaunch'
deliberate_engine_api_errors='CudaEngineTest.FiveHundredStepsInARowAllSucceed'
dg='DistributedGoldenTest.EveryCaseMatches'
gtest_steps=(
  "cuda-kernels|test|240||kernels_cuda_test|*"
  "cuda-engine-unit|test|300||engine_test|$cuda_unit"
  "cuda-engine-golden|test|300||engine_test|Golden/GoldenEngineTest.*_cuda:Golden/GoldenEngineTest.*_cuda_fp8"
  "cuda-dist-golden-P0-P1|test|400||distributed_golden_test|Workers/$dg/P0_cuda:Workers/$dg/P1_cuda:Fp8Workers/$dg/*"
  "cuda-dist-golden-P2-P3-alltoall|test|400|MOE_TEST_DIRECT_STEP_TOKENS=0|distributed_golden_test|Workers/$dg/P2_cuda:Workers/$dg/P3_cuda"
  "cuda-dist-golden-P2-P3-direct|test|400|MOE_TEST_DIRECT_STEP_TOKENS=64|distributed_golden_test|Workers/$dg/P2_cuda:Workers/$dg/P3_cuda"
  "nccl|test|180||comm_nccl_test|NcclCommunicator.*"
  "memcheck-kernels|san:memcheck|240||kernels_cuda_test|*-$deliberate_api_errors"
  "racecheck-kernels|san:racecheck|240||kernels_cuda_test|*-$deliberate_api_errors"
  "synccheck-kernels|san:synccheck|240||kernels_cuda_test|*-$deliberate_api_errors"
  "initcheck-kernels|san:initcheck|240||kernels_cuda_test|*-$deliberate_api_errors"
  "memcheck-engine|san:memcheck|300||engine_test|$cuda_unit-$deliberate_engine_api_errors"
  "initcheck-control|san:initcheck|120||engine_test|$initcheck_control"
  "initcheck-engine|san:initcheck|300||engine_test|$cuda_unit-$deliberate_engine_api_errors"
)

if [[ "${1:-}" == --list-filters ]]; then
  for s in "${gtest_steps[@]}"; do
    IFS='|' read -r _ _ _ _ bin filter <<<"$s"
    printf '%s\t%s\n' "$bin" "$filter"
  done
  exit 0
fi
if (($# != 2)); then
  echo "usage: $0 BUNDLE_DIR OUT_DIR | $0 --list-filters" >&2
  exit 64
fi
bundle="$(cd "$1" && pwd)" || exit 64
mkdir -p "$2/logs" || exit 1
out="$(cd "$2" && pwd)"
budget_s="${MOE_GPU_CHECK_BUDGET_S:-1500}"
only="${MOE_GPU_CHECK_ONLY:-}"
step_cap_s="${MOE_GPU_CHECK_STEP_LIMIT_S:-0}"
start_s=$SECONDS

# --- the report ------------------------------------------------------------
steps_json=() table=()
failed=0         # some step failed
missing_ok=0     # some correctness step did not run or did not pass

json_str() {  # JSON string literal of $1
  local s="$1"
  s="${s//\\/\\\\}"; s="${s//\"/\\\"}"
  s="${s//$'\n'/\\n}"; s="${s//$'\t'/\\t}"; s="${s//$'\r'/}"
  printf '"%s"' "$s"
}

# record NAME CORRECTNESS(0/1) RESULT(PASS|FAIL|NOT RUN) REASON SECONDS CMD [RESULT_JSON]
record() {
  local entry
  entry="{\"name\":$(json_str "$1"),\"correctness\":$( (($2)) && echo true || echo false),\"result\":$(json_str "$3"),\"reason\":$(json_str "$4"),\"seconds\":$5,\"command\":$(json_str "$6")"
  [[ -n "${7:-}" ]] && entry+=",\"metrics\":$7"
  steps_json+=("$entry}")
  table+=("$(printf '%-34s %-8s %6s  %s' "$1" "$3" "$5" "$4")")
  echo "gpu-check: $1: $3${4:+ ($4)}, ${5}s"
  [[ "$3" == FAIL ]] && failed=1
  (($2)) && [[ "$3" != PASS ]] && missing_ok=1
  return 0
}

# The reason a step may not start (empty: it may).
no_gpu=""
blocked() {  # NAME
  if [[ -n "$only" && ! "$1" =~ $only ]]; then
    echo "not selected by MOE_GPU_CHECK_ONLY=$only"
  elif [[ -n "$no_gpu" ]]; then
    echo "$no_gpu"
  elif ((SECONDS - start_s > budget_s - 10)); then
    echo "time budget of ${budget_s}s spent"
  fi
}

# run_step NAME TIMEOUT_S CMD...: CMD's output in logs/NAME.log; sets
# step_log, step_rc, step_s.
step_log="" step_rc=0 step_s=0
run_step() {
  local name="$1" limit="$2"; shift 2
  local left=$((budget_s - (SECONDS - start_s)))
  ((limit > left)) && limit=$left
  ((step_cap_s > 0 && limit > step_cap_s)) && limit=$step_cap_s
  ((limit < 1)) && limit=1
  step_log="$out/logs/$name.log"
  echo "gpu-check: running $name (timeout ${limit}s): $*"
  local t0=$SECONDS
  timeout -k 10 "$limit" "$@" >"$step_log" 2>&1
  step_rc=$?
  step_s=$((SECONDS - t0))
}

exit_reason() {
  case "$step_rc" in
    124|137) echo "timed out" ;;
    *) echo "exit $step_rc: $(grep -v '^\s*$' "$step_log" | tail -n 1 | cut -c1-160)" ;;
  esac
}

# --- the GPU and the versions ------------------------------------------------
versions="$out/versions.txt"
: >"$versions"
ngpus=0
if ! command -v nvidia-smi >/dev/null; then
  no_gpu="no nvidia-smi (no NVIDIA driver on this host)"
else
  nvidia-smi >"$out/nvidia-smi.txt" 2>&1
  ngpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
  if ((ngpus == 0)); then
    no_gpu="nvidia-smi finds no GPU: $(grep -v '^\s*$' "$out/nvidia-smi.txt" | tail -n 1 | cut -c1-120)"
  else
    nvidia-smi -L | tee -a "$versions"
    echo "driver: $(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -n 1)" >>"$versions"
    echo "driver CUDA: $(sed -n 's/.*CUDA Version: *\([0-9.]*\).*/\1/p' "$out/nvidia-smi.txt" | head -n 1)" >>"$versions"
  fi
fi

# The host's CUDA libraries: the sonames the bundle needs (MANIFEST, from
# package.sh), else CUDA 13's; cuBLAS is dlopen'ed beside cuBLASLt
# (engine/cuda/cublas_api.cc), with the same major version.
cuda_libs="$(sed -n 's/^cuda libraries: //p' "$bundle/MANIFEST" 2>/dev/null)"
[[ -n "$cuda_libs" ]] || cuda_libs="libcudart.so.13 libcublasLt.so.13 libnccl.so.2"
for lib in $cuda_libs; do
  if [[ "$lib" == libcublasLt.so.* && " $cuda_libs " != *" libcublas.so."* ]]; then
    cuda_libs+=" libcublas.so.${lib#libcublasLt.so.}"
  fi
done
if [[ -n "${MOE_GPU_CHECK_LIB_DIRS:-}" ]]; then
  IFS=: read -r -a search <<<"$MOE_GPU_CHECK_LIB_DIRS"
else
  search=(/usr/local/cuda/targets/x86_64-linux/lib /usr/local/cuda/lib64 /usr/local/cuda/lib)
  while IFS= read -r d; do [[ -d "$d" ]] && search+=("$d"); done < <(
    printf '%s\n' /usr/local/cuda-*/targets/x86_64-linux/lib | sort -rV)
  search+=(/usr/lib/x86_64-linux-gnu /lib/x86_64-linux-gnu)
fi
ld_dirs=() missing=()
for lib in $cuda_libs; do
  hit=""
  for d in "${search[@]}"; do
    if [[ -e "$d/$lib" ]]; then hit="$d/$lib"; break; fi
  done
  if [[ -z "$hit" ]]; then
    missing+=("$lib")
    echo "$lib: MISSING (searched ${search[*]})" >>"$versions"
    continue
  fi
  # The version is the resolved file's name past ".so." (libnccl.so.2 ->
  # libnccl.so.2.27.7): what the loader will map, not just where.
  real="$(readlink -f "$hit")"
  ver="${real##*/}"; ver="${ver#*.so.}"
  # A library installed as its bare soname (pip wheels): NCCL names its
  # version inside.
  if [[ "$ver" != *.* && "$lib" == libnccl.so* ]]; then
    inner="$(grep -aom1 'NCCL version [0-9][0-9.a-z+]*' "$real" 2>/dev/null | head -n 1)"
    [[ -n "$inner" ]] && ver="${inner#NCCL version }"
  fi
  echo "$lib: version $ver ($hit -> $real)" >>"$versions"
  d="$(dirname "$hit")"
  # The loader's default directories stay off LD_LIBRARY_PATH: putting them
  # first would override the bundle's own lib/.
  case "$d" in /usr/lib/x86_64-linux-gnu|/lib/x86_64-linux-gnu) continue ;; esac
  [[ " ${ld_dirs[*]} " == *" $d "* ]] || ld_dirs+=("$d")
done
LD_LIBRARY_PATH="$(IFS=:; echo "${ld_dirs[*]}")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export LD_LIBRARY_PATH
echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH" >>"$versions"
cat "$versions"
if ((${#missing[@]})); then
  record cuda-libs 1 FAIL "missing ${missing[*]}" 0 "search ${search[*]}"
  [[ -n "$no_gpu" ]] || no_gpu="CUDA libraries missing: ${missing[*]}"
else
  record cuda-libs 1 PASS "" 0 "search ${search[*]}"
fi

# Every bundled executable's libraries resolve (glibc, libstdc++ and the CUDA
# libraries from the host, the rest from lib/).
unresolved="$( (cd "$bundle" && for f in bin/* tests/*; do
  [[ -f "$f" && -x "$f" ]] && ldd "$f" 2>&1 | sed -n "s|^\s*\(.*not found.*\)|$f: \1|p"
done) | sort -u)"
if [[ -z "$unresolved" ]]; then
  record host-libs 1 PASS "" 0 "ldd bin/* tests/*"
else
  printf '%s\n' "$unresolved" >"$out/logs/host-libs.log"
  record host-libs 1 FAIL "$(head -n 3 <<<"$unresolved" | tr '\n' ';')" 0 "ldd bin/* tests/*"
fi

export MOE_BIN_DIR="$bundle/bin" MOE_GOLDEN_DIR="$bundle/tests/golden"
export TEST_TMPDIR="${TMPDIR:-/tmp}"

sanitizer="${MOE_GPU_CHECK_SANITIZER-}"
if [[ -z "${MOE_GPU_CHECK_SANITIZER+set}" ]]; then
  sanitizer="$(command -v compute-sanitizer || true)"
  for c in /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda*/bin/compute-sanitizer \
           /usr/local/cuda*/compute-sanitizer/compute-sanitizer; do
    [[ -z "$sanitizer" && -x "$c" ]] && sanitizer="$c"
  done
fi
[[ -n "$sanitizer" ]] && echo "compute-sanitizer: $("$sanitizer" --version 2>/dev/null | tail -n 1)" >>"$versions"

# --- gtest steps -----------------------------------------------------------------
# A gtest step's outcome from its log: every listed case ran and passed.
gtest_result() {  # NAME LISTED CMD
  local ran passed skipped
  ran=$(sed -n 's/^\[==========\] \([0-9]*\) tests\? from .* ran\..*/\1/p' "$step_log" | tail -n 1)
  passed=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) tests\?\..*/\1/p' "$step_log" | tail -n 1)
  skipped=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) tests\?.*/\1/p' "$step_log" | tail -n 1)
  local why=""
  if ((step_rc != 0)); then
    why="$(exit_reason)"
    local first
    first="$(sed -n 's/^\[  FAILED  \] \([^ ,0-9][^ ,]*\).*/\1/p' "$step_log" | head -n 1)"
    [[ -n "$first" ]] && why+="; first failed case $first"
  elif ((${skipped:-0} > 0)); then
    why="${skipped} case(s) skipped on a GPU host: $(grep -m1 -A1 'Skipped$' "$step_log" | tail -n 1 | cut -c1-120)"
  elif [[ "${ran:-0}" != "$2" || "${passed:-0}" != "$2" ]]; then
    why="$2 case(s) listed, ${ran:-0} ran, ${passed:-0} passed"
  fi
  if [[ -n "$why" ]]; then
    record "$1" 1 FAIL "$why (log: logs/$1.log)" "$step_s" "$3"
  else
    record "$1" 1 PASS "$2 case(s)" "$step_s" "$3"
  fi
}

for s in "${gtest_steps[@]}"; do
  IFS='|' read -r name class limit env bin filter <<<"$s"
  cmd=("$bundle/tests/$bin" "--gtest_filter=$filter" --gtest_brief=1)
  [[ "$class" == san:* ]] && cmd=("${sanitizer:-compute-sanitizer}" --tool "${class#san:}" --error-exitcode 1 "${cmd[@]}")
  [[ -n "$env" ]] && cmd=(env "$env" "${cmd[@]}")
  why="$(blocked "$name")"
  [[ -z "$why" && ! -x "$bundle/tests/$bin" ]] && why="tests/$bin not in the bundle"
  [[ -z "$why" && "$class" == san:* && -z "$sanitizer" ]] && why="no compute-sanitizer on this host"
  if [[ -n "$why" ]]; then record "$name" 1 "NOT RUN" "$why" 0 "${cmd[*]}"; continue; fi
  if ! list="$("$bundle/tests/$bin" --gtest_list_tests "--gtest_filter=$filter" 2>&1)"; then
    record "$name" 1 FAIL "cannot list the cases of tests/$bin: $(tail -n 1 <<<"$list" | cut -c1-160)" 0 "${cmd[*]}"
    continue
  fi
  listed=$(grep -c '^  ' <<<"$list")
  if ((listed == 0)); then
    record "$name" 1 FAIL "filter $filter matches no case of tests/$bin" 0 "${cmd[*]}"
    continue
  fi
  run_step "$name" "$limit" "${cmd[@]}"
  # racecheck ends with "RACECHECK SUMMARY: 0 hazards displayed (0 errors,
  # 0 warnings)", the other tools with "ERROR SUMMARY: 0 errors".
  if [[ "$class" == san:* ]] && ((step_rc == 0)) &&
     ! grep -Eq 'ERROR SUMMARY: 0 errors|RACECHECK SUMMARY: 0 hazards displayed \(0 errors' "$step_log"; then
    step_rc=1
    echo "gpu-check: no 'ERROR SUMMARY: 0 errors' from compute-sanitizer" >>"$step_log"
  fi
  gtest_result "$name" "$listed" "${cmd[*]}"
done

# --- benchmarks and the PyTorch peer (reported; a failure fails the check) -------
last_json() { grep '^{.*}$' "$1" | tail -n 1; }
layer=(--synthetic --hidden 2048 --inter 1408 --experts 64 --top-k 6 --shared-inter 2816)
benches=()
for n in 8 128 512 4096; do
  benches+=("bench-layer-N$n|--device cuda ${layer[*]} --tokens $n")
done
benches+=("bench-experts-only|--device cuda --experts-only --hidden 7168 --inter 2048 --experts 32 --tokens 4096")
# FP8 experts (block-scaled FP8 >= 1.5x the bf16 grouped GEMM at this shape;
# fp8_speedup_vs_bf16 in its JSON). sm_90 only: elsewhere it fails, naming
# the device.
benches+=("bench-experts-only-fp8|--device cuda --experts-only --weight-dtype fp8 --hidden 7168 --inter 2048 --experts 32 --tokens 4096")
# The expert pass at the layer's sizes, per-expert loop against the grouped
# GEMM (and graph replay at decode sizes): rows = N x top-k for N = 8, 128
# and 4096.
for r in 48 768 24576; do
  benches+=("bench-experts-paths-R$r|--device cuda --experts-only --hidden 2048 --inter 1408 --experts 64 --tokens $r")
done
benches+=("bench-collective|--collective --gpus 2 --hidden 7168 --experts 256 --top-k 8 --tokens 4096")
for b in "${benches[@]}"; do
  name="${b%%|*}"
  read -r -a args <<<"${b#*|}"
  cmd=("$bundle/bin/moe-bench" "${args[@]}")
  why="$(blocked "$name")"
  [[ -z "$why" && "$name" == bench-collective ]] && ((ngpus < 2)) && why="needs 2 GPUs, this host has $ngpus"
  if [[ -n "$why" ]]; then record "$name" 0 "NOT RUN" "$why" 0 "${cmd[*]}"; continue; fi
  run_step "$name" 120 "${cmd[@]}"
  if ((step_rc == 0)); then
    record "$name" 0 PASS "" "$step_s" "${cmd[*]}" "$(last_json "$step_log")"
  else
    record "$name" 0 FAIL "$(exit_reason) (log: logs/$name.log)" "$step_s" "${cmd[*]}"
  fi
done

peer="$bundle/bench/peers/torch_moe.py"
py="$(command -v python3 || true)"
torch_cuda=""
[[ -n "$py" ]] && torch_cuda="$("$py" -c 'import torch; print(int(torch.cuda.is_available()))' 2>/dev/null)"
peer_runs=("peer-golden|--device cuda --dtype f32 --weights $bundle/tests/golden/deepseek_v3_like.safetensors"
           "peer-layer-N512|--device cuda --random ${layer[*]:1} --tokens 512"
           "peer-layer-N4096|--device cuda --random ${layer[*]:1} --tokens 4096")
for p in "${peer_runs[@]}"; do
  name="${p%%|*}"
  read -r -a args <<<"${p#*|}"
  cmd=("${py:-python3}" "$peer" "${args[@]}")
  why="$(blocked "$name")"
  [[ -z "$why" && ! -f "$peer" ]] && why="no bench/peers/torch_moe.py in the bundle"
  [[ -z "$why" && -z "$py" ]] && why="no python3"
  [[ -z "$why" && "$torch_cuda" != 1 ]] && why="python3 has no torch with CUDA"
  if [[ -n "$why" ]]; then record "$name" 0 "NOT RUN" "$why" 0 "${cmd[*]}"; continue; fi
  run_step "$name" 120 "${cmd[@]}"
  if ((step_rc == 0)); then
    record "$name" 0 PASS "" "$step_s" "${cmd[*]}" "$(last_json "$step_log")"
  else
    record "$name" 0 FAIL "$(exit_reason) (log: logs/$name.log)" "$step_s" "${cmd[*]}"
  fi
done

# --- report --------------------------------------------------------------------
total_s=$((SECONDS - start_s))
status=0
((failed || missing_ok)) && status=1
verdict="ok: every correctness step ran and passed"
((missing_ok)) && verdict="FAILED: a correctness step did not run or did not pass"
((failed && !missing_ok)) && verdict="FAILED: a step failed"
{
  printf '{"bundle":%s,"host":%s,"gpus":%d,"seconds":%d,"ok":%s,"versions":%s,"steps":[\n' \
    "$(json_str "$(basename "$bundle")")" "$(json_str "$(uname -n)")" "$ngpus" "$total_s" \
    "$( ((status)) && echo false || echo true)" "$(json_str "$(cat "$versions")")"
  for i in "${!steps_json[@]}"; do
    sep=","; ((i == ${#steps_json[@]} - 1)) && sep=""
    printf '  %s%s\n' "${steps_json[$i]}" "$sep"
  done
  printf ']}\n'
} >"$out/report.json"
{
  echo "gpu-check of $(basename "$bundle") on $(uname -n), $(date -u +%Y-%m-%dT%H:%M:%SZ), ${total_s}s"
  [[ -n "$no_gpu" ]] && echo "no GPU: $no_gpu"
  printf '%-34s %-8s %6s  %s\n' step result seconds detail
  printf "%s\n" "${table[@]}"
  echo "result: $verdict"
} >"$out/summary.txt"
cat "$out/summary.txt"
echo "gpu-check: report in $out/report.json"
exit "$status"
