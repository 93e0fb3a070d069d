#!/usr/bin/env bash
# Tests a release bundle (scripts/package.sh) the way a bare host would run
# it: extracted into a temporary directory, with a scrubbed environment
# (env -i: only PATH=/usr/bin:/bin, HOME, TMPDIR, MOE_BIN_DIR, MOE_GOLDEN_DIR
# and, for a CUDA build, LD_LIBRARY_PATH to the host's CUDA runtime), so no
# path leads back into the build tree.
#
#   bash scripts/bundle-test.sh BUNDLE.tar.xz
#
# 1. Inside that environment, ldd must resolve every library of every binary
#    and test either into the bundle's lib/ or to a host library (glibc,
#    libstdc++, libgcc_s, CUDA/NVIDIA); the run paths must be $ORIGIN ones.
# 2. Every test filter of scripts/gpu-check.sh matches at least one case.
# 3. Runs the unit test executables and two integration tests (of one, the
#    cases that start processes) from the bundle. CUDA cases skip cleanly on
#    a machine without a GPU.
set -euo pipefail

if (($# != 1)); then
  echo "usage: $0 BUNDLE.tar.xz" >&2
  exit 64
fi
tarball="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/x" "$tmp/home" "$tmp/tmp"
tar -xf "$tarball" -C "$tmp/x"  # gzip or xz, by its content
tops=("$tmp"/x/*)
if ((${#tops[@]} != 1)) || [[ ! -d "${tops[0]}" ]]; then
  echo "bundle-test: $1 must hold exactly one top directory" >&2
  exit 1
fi
b="$(readlink -f "${tops[0]}")"
echo "bundle-test: $(basename "$b") in $tmp"

# The host's CUDA runtime, as gpu-check.sh finds it: a CUDA build cannot start
# without libcudart and libnccl, even to skip its CUDA cases.
cuda_dir="" cudart=""
read -r -a cuda_libs <<<"$(sed -n 's/^cuda libraries: //p' "$b/MANIFEST")"
for l in "${cuda_libs[@]}"; do
  [[ "$l" == libcudart.so* ]] && cudart="$l"
done
if [[ -n "$cudart" ]]; then
  for d in /usr/local/cuda/targets/x86_64-linux/lib /usr/local/cuda/lib64 /usr/local/cuda/lib \
           /usr/local/cuda-*/targets/x86_64-linux/lib; do
    [[ -e "$d/$cudart" ]] && { cuda_dir="$d"; break; }
  done
  [[ -n "$cuda_dir" ]] || { echo "bundle-test: a CUDA build, but no $cudart on this host" >&2; exit 1; }
fi

run_env=(env -i PATH=/usr/bin:/bin HOME="$tmp/home" TMPDIR="$tmp/tmp" TEST_TMPDIR="$tmp/tmp"
         MOE_BIN_DIR="$b/bin" MOE_GOLDEN_DIR="$b/tests/golden")
[[ -n "$cuda_dir" ]] && run_env+=(LD_LIBRARY_PATH="$cuda_dir")

# --- 1. libraries ---------------------------------------------------------
host_lib() {
  case "$1" in
    libc.so.*|libm.so.*|libdl.so.*|libpthread.so.*|librt.so.*|ld-linux*|\
    libresolv.so.*|libutil.so.*|linux-vdso.so.*|libstdc++.so.*|libgcc_s.so.*|\
    libcuda.so*|libcudart.so*|libcublas*|libnccl.so*|libnvidia*) return 0 ;;
  esac
  return 1
}
bad=0 checked=0
for f in "$b"/bin/* "$b"/tests/* "$b"/lib/*; do
  [[ -f "$f" ]] || continue
  [[ -x "$f" || "$f" == "$b"/lib/* ]] || continue
  rp="$(readelf -d "$f" | sed -n 's/.*(RUNPATH).*\[\(.*\)\]/\1/p')"
  # shellcheck disable=SC2016  # literal $ORIGIN
  case "$rp" in
    '$ORIGIN'|'$ORIGIN/../lib') ;;
    *) echo "bundle-test: $f has run path '$rp'" >&2; bad=1 ;;
  esac
  while read -r soname arrow path _; do
    [[ "$soname" == *.so* ]] || continue
    [[ "$arrow" == "=>" ]] || path="$soname"
    [[ "$path" == /* || "$path" == not ]] || continue  # linux-vdso
    name="${soname##*/}"
    [[ "$path" == not ]] || path="$(readlink -f "$path")"
    if [[ "$path" == not ]]; then
      echo "bundle-test: ${f#"$b"/}: $name not found" >&2; bad=1
    elif [[ "$path" == "$b"/lib/* ]]; then
      :
    elif host_lib "$name"; then
      [[ "$path" == /lib* || "$path" == /usr/lib* || "$path" == /usr/local/cuda* ]] || {
        echo "bundle-test: ${f#"$b"/}: $name from unexpected $path" >&2; bad=1; }
    else
      echo "bundle-test: ${f#"$b"/}: $name resolves outside the bundle: $path" >&2; bad=1
    fi
  done < <("${run_env[@]}" ldd "$f" 2>&1)
  checked=$((checked + 1))
done
((bad == 0)) || { echo "bundle-test: library check failed" >&2; exit 1; }
echo "bundle-test: $checked files: every library from lib/ or the host (CUDA: ${cuda_dir:-none})"

# --- 2. the GPU check's filters ---------------------------------------------
# Every gtest filter of scripts/gpu-check.sh selects at least one case of
# its binary, and every case it excludes exists: a renamed test must not
# silently drop out of the only run that has a GPU. CUDA builds only.
if [[ -n "$cudart" ]]; then
  listed() {  # BINARY FILTER: the number of cases it selects
    "${run_env[@]}" "$b/tests/$1" --gtest_list_tests "--gtest_filter=$2" 2>/dev/null | grep -c '^  '
  }
  nfilters=0
  while IFS=$'\t' read -r bin filter; do
    [[ -x "$b/tests/$bin" ]] || { echo "bundle-test: gpu-check runs $bin, missing from the bundle" >&2; bad=1; continue; }
    pos="${filter%%-*}"
    if (($(listed "$bin" "$pos") == 0)); then
      echo "bundle-test: gpu-check filter '$pos' matches no case of $bin" >&2; bad=1
    fi
    if [[ "$filter" == *-* ]]; then
      IFS=: read -r -a negs <<<"${filter#*-}"
      for n in "${negs[@]}"; do
        (($(listed "$bin" "$n") > 0)) || { echo "bundle-test: gpu-check excludes '$n', no case of $bin" >&2; bad=1; }
      done
    fi
    nfilters=$((nfilters + 1))
  done < <(bash "$b/scripts/gpu-check.sh" --list-filters)
  ((bad == 0)) || { echo "bundle-test: gpu-check filter check failed" >&2; exit 1; }
  echo "bundle-test: $nfilters gpu-check filters each select at least one case"
fi

# --- 3. tests ---------------------------------------------------------------
# Every unit test executable, plus two integration tests: distributed_golden
# (the golden cases through router and workers started from bin/ via
# MOE_BIN_DIR) and service (the public API end to end). The other integration
# tests (failure, loadtest, security) take minutes each on 2 cores and
# exercise nothing the bundle can get wrong that these two do not; ctest has
# already run them from the build tree. Of distributed_golden, the cases
# that start processes from bin/ (every golden case by a router and 2 and 3
# workers, and moe-cli's forward) run; its long variations of the step
# (direct against all-to-all bits, packed dispatch, many slots, bf16 at
# every P: several minutes on 2 cores) test the step, not the bundle, and
# ctest has run them on the same build.
tests=(core_test kernels_cpu_test client_test proto_test engine_test kernels_cuda_test
       distributed_golden_test service_test)
declare -A filter=(
  [distributed_golden_test]='Workers/*P2_cpu:Workers/*P3_cpu:DistributedGolden.MoeCliForwardWritesTheGoldenOutput:DistributedGolden.HashLayer*')
failed=()
for t in "${tests[@]}"; do
  if [[ ! -x "$b/tests/$t" ]]; then
    [[ "$t" == kernels_cuda_test ]] && continue  # a build without CUDA
    echo "bundle-test: $t missing from the bundle" >&2; failed+=("$t"); continue
  fi
  echo "bundle-test: $t"
  start=$SECONDS
  # Run from the temporary home, so relative paths cannot reach the source.
  if (cd "$tmp/home" && "${run_env[@]}" "$b/tests/$t" --gtest_brief=1 \
        ${filter[$t]:+"--gtest_filter=${filter[$t]}"} >"$tmp/$t.log" 2>&1); then
    echo "bundle-test:   ok ($((SECONDS - start)) s; $(grep -E '^\[  (PASSED|SKIPPED) +\]' "$tmp/$t.log" | tr '\n' ' '))"
  else
    cat "$tmp/$t.log"
    failed+=("$t")
  fi
done
if ((${#failed[@]})); then
  echo "bundle-test: FAILED: ${failed[*]}" >&2
  exit 1
fi
echo "bundle-test: ok"
