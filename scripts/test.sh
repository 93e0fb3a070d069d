#!/usr/bin/env bash
# All tests: install what is needed, build from scratch, run every test (the
# Python client's too), test
# the release bundle, then the offline checks of the deployment files, the
# container image built and run with podman (skipped where podman cannot run
# containers), the locking checked by clang (-Wthread-safety) and the fuzzers
# (30 s each).
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install-deps.sh
build="${MOE_TEST_BUILD_DIR:-build-test}"
# A compiler cache that the container image's build reads (check-image.sh,
# Dockerfile's CCACHE_DIR): the same sources compiled with the same flags
# hash alike there, paths taken relative to the checkout, the compiler known
# by its content and the locale left out.
export CCACHE_DIR="${MOE_TEST_CCACHE_DIR:-$PWD/$build-ccache}"
export CCACHE_BASEDIR="$PWD" CCACHE_COMPILERCHECK=content CCACHE_SLOPPINESS=locale
mkdir -p "$CCACHE_DIR"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_CUDA=AUTO \
  -DCMAKE_CXX_COMPILER_LAUNCHER=ccache
cmake --build "$build" -j"$(nproc)"
ctest --test-dir "$build" --output-on-failure -j2
# The Python client and PyTorch integration against this build's binaries
# (client/python/tests: every golden case and every family the loader
# knows, served by router + 2 workers; under a minute).
bash scripts/python-test.sh "$build"
# The release bundle of this build, tested from a temporary directory with a
# scrubbed environment (scripts/bundle-test.sh: the unit tests and two
# integration tests, about a minute). The bundle is compressed as released
# (xz -6): a faster level leaves it over package.sh's 40 MiB bound.
bash scripts/package.sh "$build/moe-serve.tar.xz" --build "$build"
bash scripts/bundle-test.sh "$build/moe-serve.tar.xz"
bash scripts/check-deploy.sh
# The Kubernetes CPU layout started as an operator would, probes and
# Services simulated, a worker killed mid-run (about 70 s).
bash scripts/check-k8s.sh "$build"
MOE_IMAGE_CCACHE_DIR="$CCACHE_DIR" bash scripts/check-image.sh ||
  [[ $? -eq 77 ]] # 77: skipped, reason printed
bash scripts/check-thread-safety.sh
bash scripts/fuzz.sh
