#!/usr/bin/env bash
# Makes a relocatable release tarball for bare hosts (a GPU host with only a
# driver: the binaries, the libraries they load, the tests and the GPU check;
# README, "Running the GPU check"):
#
#   bash scripts/package.sh OUT.tar.xz [--build DIR]   (or OUT.tar.gz)
#
# Without --build it configures and builds Release (-DMOE_CUDA=AUTO) into
# build-release; with --build it packages that existing build. The tarball
# holds one directory moe-serve-<version>-<git hash>/ with bin/ (the five
# binaries), tests/ (every test executable and the golden cases), lib/ (the
# shared libraries a bare host lacks), scripts/gpu-check.sh, bench/peers/ and
# a MANIFEST. Binaries and tests find lib/ through an $ORIGIN run path; CUDA
# libraries (libcudart, libcublasLt, libnccl) come from the host: gpu-check.sh
# puts their directories on LD_LIBRARY_PATH.
set -euo pipefail
src="$(cd "$(dirname "$0")/.." && pwd)"

usage() { echo "usage: $0 OUT.tar.xz|OUT.tar.gz [--build DIR]" >&2; exit 64; }
out="" build=""
while (($#)); do
  case "$1" in
    --build) (($# >= 2)) || usage; build="$2"; shift 2 ;;
    -h|--help) usage ;;
    -*) usage ;;
    *) [[ -z "$out" ]] || usage; out="$1"; shift ;;
  esac
done
[[ -n "$out" ]] || usage

for tool in patchelf ldd strip tar; do
  command -v "$tool" >/dev/null || {
    echo "package: $tool not found (bash scripts/install-deps.sh)" >&2; exit 1; }
done

if [[ -z "$build" ]]; then
  build="$src/build-release"
  cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_CUDA=AUTO
  cmake --build "$build" -j"$(nproc)"
fi
build="$(cd "$build" && pwd)"

version="$(sed -n 's/^project([a-z_]* VERSION \([0-9.]*\).*/\1/p' "$src/CMakeLists.txt")"
hash="$(git -C "$src" rev-parse --short HEAD 2>/dev/null || true)"
name="moe-serve-${version:-0}${hash:+-$hash}"

stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
top="$stage/$name"
mkdir -p "$top/bin" "$top/tests" "$top/lib" "$top/scripts"

bins=(server/moe-router worker/moe-worker client/moe-cli client/moe-loadtest
      bench/moe-bench)
for b in "${bins[@]}"; do
  [[ -x "$build/$b" ]] || { echo "package: $build/$b missing" >&2; exit 1; }
  cp "$build/$b" "$top/bin/"
done
# Every test executable of the build (gtest binaries directly under tests/).
ntests=0
for t in "$build"/tests/*; do
  [[ -f "$t" && -x "$t" ]] || continue
  cp "$t" "$top/tests/"
  ntests=$((ntests + 1))
done
((ntests > 0)) || { echo "package: no test executables in $build/tests" >&2; exit 1; }

# Golden cases: tests/golden once they live in the tree, else ../shared/golden.
golden="$src/tests/golden"
[[ -d "$golden" ]] || golden="$src/../shared/golden"
[[ -d "$golden" ]] || { echo "package: no golden cases (tests/golden or ../shared/golden)" >&2; exit 1; }
mkdir -p "$top/tests/golden"
cp "$golden"/*.safetensors "$top/tests/golden/"
[[ -f "$golden/README.md" ]] && cp "$golden/README.md" "$top/tests/golden/"

[[ -f "$src/scripts/gpu-check.sh" ]] && cp "$src/scripts/gpu-check.sh" "$top/scripts/"
if [[ -d "$src/bench/peers" ]]; then
  mkdir -p "$top/bench"
  cp -r "$src/bench/peers" "$top/bench/"
fi

# Which libraries to bundle. Not bundled:
#  - glibc and the loader (libc, libm, libdl, libpthread, librt, ld-linux,
#    libresolv, libutil): they must match the host's kernel interface and each
#    other; the bundle needs glibc >= the version recorded in MANIFEST.
#  - libstdc++ and libgcc_s: every glibc >= 2.34 distribution ships them in its
#    base system (apt itself needs them), and newer ones are backward
#    compatible. A bundled Debian 12 copy would be *older* than the host's
#    (Ubuntu 24.04: GCC 14), and only one libstdc++ can be loaded per process:
#    a host library loaded into ours (NCCL, cuBLASLt, the driver) that needs a
#    newer GLIBCXX would then fail to load. MANIFEST records the newest
#    GLIBCXX/GCC symbol versions the bundle needs; gpu-check.sh checks them.
#  - CUDA and NVIDIA libraries (libcuda, libcudart, libcublas*, libnccl,
#    libnvidia*): they must match the host's driver; gpu-check.sh finds them.
# Bundled: everything else, including libgomp, libgfortran and libquadmath
# (OpenBLAS's runtime, absent from a bare host; nothing from the host loads
# them into our processes, so Debian 12's copies are safe).
is_host_lib() {
  case "$1" in
    libc.so.*|libm.so.*|libdl.so.*|libpthread.so.*|librt.so.*|ld-linux*|\
    libresolv.so.*|libutil.so.*|linux-vdso.so.*|\
    libstdc++.so.*|libgcc_s.so.*|\
    libcuda.so*|libcudart.so*|libcublas*|libnccl.so*|libnvidia*) return 0 ;;
  esac
  return 1
}

declare -A libs=() cuda_libs=()
for f in "$top"/bin/* "$top"/tests/*; do
  [[ -f "$f" && -x "$f" ]] || continue
  # Lines "libX.so.N => /path (0x...)"; "not found" for CUDA libraries on
  # hosts without them is fine as long as they are host libraries.
  while read -r soname _ path _; do
    [[ "$soname" == *.so* ]] || continue
    soname="${soname##*/}"
    case "$soname" in libcudart.so*|libnccl.so*) cuda_libs["$soname"]=1 ;; esac
    is_host_lib "$soname" && continue
    if [[ "$path" != /* ]]; then
      echo "package: $f needs $soname, which does not resolve here" >&2; exit 1
    fi
    libs["$soname"]="$path"
  done < <(ldd "$f")
done
# cuBLASLt and cuBLAS are dlopen'ed (engine/cuda/cublaslt_api.cc,
# cublas_api.cc: the grouped expert GEMM): their major version is the
# toolkit's, as libcudart's.
for soname in "${!cuda_libs[@]}"; do
  if [[ "$soname" == libcudart.so.* ]]; then
    cuda_libs["libcublasLt.so.${soname#libcudart.so.}"]=1
    cuda_libs["libcublas.so.${soname#libcudart.so.}"]=1
  fi
done
for soname in "${!libs[@]}"; do
  cp -L "${libs[$soname]}" "$top/lib/$soname"
done

# Debug symbols out (size), then $ORIGIN run paths.
for f in "$top"/bin/* "$top"/tests/* "$top"/lib/*; do
  [[ -f "$f" && -x "$f" || "$f" == */lib/* ]] || continue
  chmod u+w "$f"
  strip --strip-unneeded "$f"
done
# shellcheck disable=SC2016  # $ORIGIN is for the loader, not the shell
for f in "$top"/bin/* "$top"/tests/*; do
  [[ -f "$f" && -x "$f" ]] || continue
  patchelf --set-rpath '$ORIGIN/../lib' "$f"
done
# shellcheck disable=SC2016
for f in "$top"/lib/*; do
  patchelf --set-rpath '$ORIGIN' "$f"
done

needs() {  # newest symbol version with this prefix over the bundle
  for f in "$top"/bin/* "$top"/tests/* "$top"/lib/*; do
    [[ -f "$f" && -x "$f" || "$f" == */lib/* ]] || continue
    readelf -V --wide "$f" 2>/dev/null | grep -o "Name: $1[0-9.]*" | sed 's/Name: //'
  done | sort -uV | tail -n 1
}
{
  echo "name: $name"
  echo "source: ${hash:-unknown} ($(git -C "$src" log -1 --format=%cI 2>/dev/null || echo '?'))"
  echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(sed -n 's/^PRETTY_NAME=//p' /etc/os-release | tr -d '"')"
  echo "cuda: $([[ -f "$top/tests/kernels_cuda_test" ]] && echo yes || echo no)"
  echo "needs glibc: $(needs GLIBC_2)"
  echo "needs libstdc++: $(needs GLIBCXX_)"
  echo "needs libgcc_s: $(needs GCC_)"
  echo "cuda libraries: $(printf '%s\n' "${!cuda_libs[@]}" | sort | tr '\n' ' ' | sed 's/ $//')"
  echo "host libraries (not bundled): glibc, libstdc++, libgcc_s, libcuda, libcudart, libcublasLt, libcublas, libnccl"
  echo
  echo "bin:"; find "$top/bin" -mindepth 1 -maxdepth 1 -printf '  %f\n' | sort
  echo "tests:"; find "$top/tests" -mindepth 1 -maxdepth 1 -printf '  %f\n' | sort
  echo "lib:"; find "$top/lib" -mindepth 1 -maxdepth 1 -printf '  %f\n' | sort
} > "$top/MANIFEST"
cat > "$top/README" <<'EOF'
moe-serve release bundle. Built on Debian 12; runs on x86_64 Linux with
glibc, libstdc++ and libgcc_s at least as new as MANIFEST says. CUDA
libraries (libcudart, libcublasLt, libcublas, libnccl) and the driver come from the host.

  scripts/gpu-check.sh . OUT_DIR    # every GPU test, sanitizers, benchmarks;
                                    # writes OUT_DIR/report.json, summary.txt
  bin/moe-router --help             # the service (README.md of the source)

Tests run from here with MOE_BIN_DIR=$PWD/bin MOE_GOLDEN_DIR=$PWD/tests/golden.
EOF

mkdir -p "$(dirname "$out")"
# xz (OUT.tar.xz) is about half of gzip's size for these binaries: what a
# GPU host is sent. OUT.tar.gz still works.
case "$out" in
  *.tar.xz) XZ_OPT="${XZ_OPT:--T0 -6}" tar -C "$stage" -cJf "$out" "$name" ;;
  *) tar -C "$stage" -czf "$out" "$name" ;;
esac
size=$(stat -c %s "$out")
echo "package: $out ($name, $((size / 1024 / 1024)) MiB, ${#libs[@]} bundled libraries, $ntests test executables)"
if ((size > 40 * 1024 * 1024)); then
  echo "package: $out is over 40 MiB" >&2
  exit 1
fi
