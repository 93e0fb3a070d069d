# syntax=docker/dockerfile:1
# moe-serve images: moe-router, moe-worker, moe-cli, moe-loadtest, moe-bench.
#   CPU (default):  docker build -t moe-serve:cpu .
#   CUDA:           docker build --build-arg VARIANT=cuda \
#                     --build-arg BUILD_IMAGE=nvidia/cuda:13.0.0-devel-ubuntu24.04 \
#                     --build-arg RUNTIME_IMAGE=nvidia/cuda:13.0.0-runtime-ubuntu24.04 \
#                     -t moe-serve:cuda .
# The CPU variant builds on Debian bookworm and runs on bookworm-slim; the
# CUDA variant builds on NVIDIA's devel image and runs on its runtime image.
# The bases are image arguments, not stages picked by a variable: buildah
# (1.28, Debian's) skips a stage named only through a global ARG's default
# ("runtime-cpu: image not known"), so this form builds the same with
# BuildKit, buildah and podman (scripts/check-image.sh builds it).

ARG VARIANT=cpu
ARG BUILD_IMAGE=debian:bookworm
ARG RUNTIME_IMAGE=debian:bookworm-slim

# hadolint ignore=DL3006
FROM ${BUILD_IMAGE} AS build
ARG VARIANT
# Unset for users. Set (with that directory mounted, podman build --volume
# DIR:/ccache --build-arg CCACHE_DIR=/ccache), the build compiles through
# ccache there, paths taken relative to /src, the compiler known by its
# content and the locale left out of the hash (the build's shell has none),
# so that a cache filled by a build of the same sources in
# <checkout>/<build dir> with the same settings answers it
# (scripts/check-image.sh shares the test command's cache so).
ARG CCACHE_DIR=
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
WORKDIR /src
COPY scripts/install-deps.sh scripts/install-deps.sh
RUN MOE_DEPS_TOOLS=0 bash scripts/install-deps.sh \
 && if [[ -n "${CCACHE_DIR}" ]]; then \
      apt-get install -y --no-install-recommends ccache; fi \
 && rm -rf /var/lib/apt/lists/*
COPY . .
# Binaries, then every shared library they load except glibc and the CUDA
# driver (the runtime base provides those): the runtime stage then needs
# no package list of its own.
RUN launcher=(); if [[ -n "${CCACHE_DIR}" ]]; then \
      launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); \
      export CCACHE_BASEDIR=/src CCACHE_COMPILERCHECK=content \
        CCACHE_SLOPPINESS=locale; fi \
 && cmake -S . -B /src/build -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DMOE_BUILD_TESTS=OFF -DMOE_CUDA="$([[ "${VARIANT}" == cuda ]] && echo ON || echo OFF)" \
      "${launcher[@]}" \
 && cmake --build /src/build --target moe-router moe-worker moe-cli moe-loadtest moe-bench \
 && if [[ -n "${CCACHE_DIR}" ]]; then ccache --show-stats; fi \
 && mkdir -p /out/bin /out/lib \
 && cp /src/build/server/moe-router /src/build/worker/moe-worker \
       /src/build/client/moe-cli /src/build/client/moe-loadtest \
       /src/build/bench/moe-bench /out/bin/ \
 && ldd /out/bin/* | awk '/=> \// {print $3}' | sort -u \
    | grep -vE '/(libc|libm|libpthread|libdl|librt|libcuda|ld-linux[^/]*)\.so' \
    | xargs -r cp -L -t /out/lib/

# hadolint ignore=DL3006
FROM ${RUNTIME_IMAGE}
COPY --from=build /out/bin/ /usr/local/bin/
COPY --from=build /out/lib/ /usr/local/lib/moe/
ENV LD_LIBRARY_PATH=/usr/local/lib/moe \
    MOE_HEALTH_PORT=50052
RUN useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin moe
USER 10001
# 50051 public gRPC, 50052 plaintext health, 50053 worker registration,
# 9090 router metrics, 9091 worker metrics.
EXPOSE 50051 50052 50053 9090 9091
# Router and workers both serve plaintext health on MOE_HEALTH_PORT
# (--health-listen); "liveness" answers SERVING while the process runs.
HEALTHCHECK --interval=15s --timeout=5s --start-period=120s --retries=3 \
  CMD ["/bin/sh", "-c", "moe-cli health --target 127.0.0.1:${MOE_HEALTH_PORT} --service liveness --timeout-ms 3000"]
CMD ["moe-router", "--help"]
