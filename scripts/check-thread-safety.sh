#!/usr/bin/env bash
# The compiler checks the locking: compiles the service's own sources
# (core, comm, engine, proto, server, worker; not the kernels, tests, tools
# or the CUDA backend) with clang's -Wthread-safety, so that a field marked
# ABSL_GUARDED_BY touched without its mutex, or a *Locked method called
# without it, fails the build. The analysis is the compiler's front end, so
# the sources are only parsed and checked (-fsyntax-only, MOE_SYNTAX_ONLY):
# no object is made, nothing is linked or run, and each run checks every
# source again.
set -euo pipefail
cd "$(dirname "$0")/.."
build="${MOE_TSA_BUILD_DIR:-build-thread-safety}"

CC=clang CXX=clang++ cmake -S . -B "$build" -G Ninja -DMOE_CUDA=OFF \
  -DMOE_BUILD_TESTS=OFF -DCMAKE_BUILD_TYPE=None -DMOE_SYNTAX_ONLY=ON \
  -DCMAKE_CXX_FLAGS="-Wthread-safety -Werror=thread-safety" >/dev/null

# Every object of those folders' targets, server/'s wings included (the
# protobuf messages' own generated code is left out: it has no locks, and
# it is the slowest).
mapfile -t objects < <(ninja -C "$build" -t targets all |
  grep -E '^(core|comm|engine|proto|server(/[a-z]+)?|worker)/CMakeFiles/[^:]*\.o:' |
  grep -v '/moe_proto\.dir/' | cut -d: -f1)
if ((${#objects[@]} == 0)); then
  echo "check-thread-safety: no objects found in $build" >&2
  exit 1
fi
echo "check-thread-safety: ${#objects[@]} sources with -Wthread-safety"
ninja -C "$build" "${objects[@]}"
