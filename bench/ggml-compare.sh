#!/usr/bin/env bash
# The MXFP4 yardstick: our CPU MoE layer (moe-bench --synthetic) against
# llama.cpp's ggml building the same MoE FFN (bench/peers/ggml_moe.cc), back
# to back, DeepSeek-V2-Lite sizes (H=2048, I=1408, E=64, k=6, shared 2816),
# 2 threads, in tokens/s; one table per N with ours mxfp4 / ggml MXFP4.
#
#   bench/ggml-compare.sh LLAMA_CPP_DIR BUILD_DIR
#
# LLAMA_CPP_DIR: a llama.cpp checkout (its ggml/ is used) or a standalone
# ggml one. BUILD_DIR: our build, holding bench/moe-bench. ggml is built
# (CPU backend only, GGML_NATIVE, OpenMP, no BLAS) into GGML_BUILD_DIR
# (default BUILD_DIR/ggml-peer, reused when there) and the peer linked
# against it statically. Environment: TOKENS ("8 512"), REPS_DECODE (20,
# for N <= 64), REPS_PREFILL (3), THREADS (2), SHARED_INTER (2816; 0 leaves
# the shared expert out of both sides, to compare the routed experts alone),
# LLAMA_CPP_COMMIT (printed when the checkout has no .git, e.g. one made
# with git archive).
# Not part of the tests: it needs a llama.cpp checkout and runs minutes.
set -euo pipefail
shopt -s inherit_errexit  # a failing run inside \$(...) stops the script

if [[ $# -ne 2 ]]; then
  echo "usage: $0 LLAMA_CPP_DIR BUILD_DIR" >&2
  exit 2
fi
shared_inter=${SHARED_INTER:-2816}
[[ $shared_inter =~ ^[0-9]+$ ]] || { echo "$0: SHARED_INTER must be a whole number" >&2; exit 2; }
llama=$(cd "$1" && pwd)
build=$(cd "$2" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
ours="$build/bench/moe-bench"
[[ -x $ours ]] || { echo "$0: $ours not found: build the moe-bench target" >&2; exit 2; }
if [[ -f $llama/ggml/CMakeLists.txt ]]; then
  ggml_src="$llama/ggml"
elif [[ -f $llama/src/ggml-cpu/CMakeLists.txt ]]; then
  ggml_src="$llama"
else
  echo "$0: $llama holds neither ggml/ (llama.cpp) nor src/ggml-cpu (ggml)" >&2
  exit 2
fi
ggml_build="${GGML_BUILD_DIR:-$build/ggml-peer}"
tokens="${TOKENS:-8 512}"
threads="${THREADS:-2}"
commit=$(git -C "$llama" rev-parse HEAD 2>/dev/null || echo "${LLAMA_CPP_COMMIT:-unknown}")
synced=""
if [[ -f $llama/scripts/sync-llama.last ]]; then
  synced=" (ggml synced from llama.cpp $(head -c 12 "$llama/scripts/sync-llama.last"))"
fi

launcher=()
if command -v ccache > /dev/null; then
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
log="$ggml_build.log"
if [[ ! -f $ggml_build/build.ninja ]] &&
  ! cmake -S "$ggml_src" -B "$ggml_build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DGGML_NATIVE=ON -DGGML_OPENMP=ON -DGGML_BLAS=OFF -DGGML_CUDA=OFF \
    -DGGML_VULKAN=OFF -DGGML_METAL=OFF -DGGML_BUILD_TESTS=OFF \
    -DGGML_BUILD_EXAMPLES=OFF -DBUILD_SHARED_LIBS=OFF "${launcher[@]}" > "$log" 2>&1; then
  tail -30 "$log" >&2
  exit 1
fi
if ! cmake --build "$ggml_build" -j2 --target ggml ggml-cpu > "$log" 2>&1; then
  tail -30 "$log" >&2
  exit 1
fi
lib() { find "$ggml_build" -name "lib$1.a" -print -quit; }
peer="$ggml_build/ggml_moe"
c++ -O2 -std=c++17 -march=native -I"$ggml_src/include" "$here/peers/ggml_moe.cc" \
  "$(lib ggml)" "$(lib ggml-cpu)" "$(lib ggml-base)" -fopenmp -lpthread -ldl -lm -o "$peer"

layer=(--hidden 2048 --inter 1408 --experts 64 --top-k 6 --shared-inter "$shared_inter")
reps_for() { if [[ $1 -le 64 ]]; then echo "${REPS_DECODE:-20}"; else echo "${REPS_PREFILL:-3}"; fi; }
# moe-bench's JSON line -> tokens/s. Each run's own lines go to stderr as they are, its tokens/s to stdout.
ours_tps() {
  local out
  out=$("$ours" --synthetic "${layer[@]}" --tokens "$1" --weight-dtype "$2" --reps "$3" \
    --threads "$threads" --skip-references)
  echo "$out" >&2
  sed -n 's/.*"tokens_per_s":\([0-9.eE+-]*\).*/\1/p' <<< "$out" | awk '{ printf "%.1f", $1 }'
}
# The peer's key=value line -> tokens/s. Shared expert as ours keeps it:
# our synthetic layer's is fp32 under mxfp4 (its storage), else the dtype.
ggml_tps() {
  local shared=$2
  if [[ $2 == mxfp4 ]]; then shared=f32; fi
  local out
  out=$("$peer" "${layer[@]}" --tokens "$1" --type "$2" --shared-type "$shared" --reps "$3" \
    --threads "$threads")
  echo "$out" >&2
  sed -n 's/.* tokens_per_s=\([0-9.]*\).*/\1/p' <<< "$out" | awk '{ printf "%.1f", $1 }'
}

echo "llama.cpp/ggml: $llama at $commit$synced; $(nproc) cores, threads $threads" >&2
declare -A tps
for n in $tokens; do
  r=$(reps_for "$n")
  for pair in bf16:bf16 fp8:q8_0 -:q4_0 mxfp4:mxfp4; do
    o=${pair%%:*} g=${pair##*:}
    [[ $o == - ]] || tps[ours,$o,$n]=$(ours_tps "$n" "$o" "$r")
    tps[ggml,$g,$n]=$(ggml_tps "$n" "$g" "$r")
  done
done

echo
echo "MoE FFN, DeepSeek-V2-Lite sizes (shared expert $shared_inter), $threads threads, tokens/s (median step);"
echo "ggml: $commit$synced"
echo
echo "| N | ours bf16 | ggml bf16 | ours fp8 | ggml Q8_0 | ggml Q4_0 | ours mxfp4 | ggml MXFP4 | mxfp4 ours/ggml |"
echo "|---|---|---|---|---|---|---|---|---|"
for n in $tokens; do
  ratio=$(awk -v a="${tps[ours,mxfp4,$n]}" -v b="${tps[ggml,mxfp4,$n]}" \
    'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }')
  echo "| $n | ${tps[ours,bf16,$n]} | ${tps[ggml,bf16,$n]} | ${tps[ours,fp8,$n]} |" \
    "${tps[ggml,q8_0,$n]} | ${tps[ggml,q4_0,$n]} | ${tps[ours,mxfp4,$n]} |" \
    "${tps[ggml,mxfp4,$n]} | $ratio |"
done
