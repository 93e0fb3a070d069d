#!/usr/bin/env bash
# Installs the Debian packages that building, testing and running the service
# need. Idempotent: packages already present are left alone, so a second run
# only pays for `dpkg -s`.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git
  libgrpc++-dev libgrpc-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libspdlog-dev libfmt-dev libabsl-dev libgtest-dev libgmock-dev libbenchmark-dev
  libgloo-dev libopenblas-dev libopenblas-openmp-dev prometheus-cpp-dev nlohmann-json3-dev libssl-dev
  curl procps patchelf
)
# Extra tools for the full test command (linters, fuzzers, manifest checks).
# node/npm and kubectl are looked for as commands by scripts/check-deploy.sh,
# which installs Debian's only when none is there.
if [[ "${MOE_DEPS_TOOLS:-1}" == 1 ]]; then
  # libomp-dev: OpenMP for scripts/check-thread-safety.sh's clang build;
  # ccache: the test command's compiler cache, which the container image's
  # build shares (scripts/test.sh, scripts/check-image.sh).
  packages+=(clang libclang-rt-14-dev libomp-dev yamllint shellcheck openssl python3
    ccache)
  # The Python client's tests (python3-torch: its PyTorch integration).
  packages+=(python3-grpcio python3-protobuf python3-numpy python3-pytest
    python3-torch python3-yaml python3-markdown-it)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

sudo_cmd=()
if [[ $(id -u) -ne 0 ]]; then sudo_cmd=(sudo); fi
echo "install-deps: installing ${missing[*]}"
"${sudo_cmd[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq \
  --no-install-recommends "${missing[@]}"
