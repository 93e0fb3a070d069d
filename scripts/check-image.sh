#!/usr/bin/env bash
# Builds the CPU container image from the Dockerfile and runs it: a router
# and two workers as containers, one forward from the image's moe-cli, and
# the image's own HEALTHCHECK command. No image registry is needed: the
# Debian base the Dockerfile names (debian:bookworm, debian:bookworm-slim) is
# made here with debootstrap from Debian's package mirror and imported
# under those names.
#
#   scripts/check-image.sh            (as root; installs podman, runc,
#                                      debootstrap with apt-get if missing)
#
# Podman settings this machine needs: the runc runtime with the cgroupfs
# manager (crun refuses hybrid cgroup hierarchies), ulimits at or below the
# machine's hard limits, host networking, and the image in docker format (the
# OCI format drops HEALTHCHECK and SHELL). Exit 77 (skipped), with the
# reason, when podman cannot run a container here. Everything it made
# (containers, images, the base, its temporary directory) is removed on
# exit, also on failure or a signal. Env: MOE_IMAGE_KEEP_BASE=DIR reuses (or
# makes and keeps) the debootstrap tree in DIR; MOE_DEBIAN_MIRROR.
set -euo pipefail
cd "$(dirname "$0")/.."

skip() {
  echo "SKIP: $*"
  exit 77
}
log() { echo "[check-image $(date +%T)] $*"; }

[[ "$(id -u)" -eq 0 ]] || skip "needs root (podman with runc, debootstrap)"
# Podman 4.3 on Debian 12 networks containers with CNI, and a compose
# project's network resolves its service names (the workers dial
# router:50053) only through the dnsname CNI plugin. Nothing pulls that
# plugin in with --no-install-recommends, so it is asked for by its file.
DNSNAME_PLUGIN=/usr/lib/cni/dnsname
missing=()
for tool in podman runc debootstrap podman-compose; do
  command -v "$tool" >/dev/null || missing+=("$tool")
done
[[ -x "$DNSNAME_PLUGIN" ]] || missing+=("$DNSNAME_PLUGIN")
if ((${#missing[@]})); then
  command -v apt-get >/dev/null || skip "no ${missing[*]} and no apt-get"
  log "installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
    --no-install-recommends podman runc debootstrap uidmap podman-compose \
    golang-github-containernetworking-plugin-dnsname ||
    skip "could not install podman, runc, debootstrap, podman-compose and the dnsname CNI plugin"
fi

start_s=$SECONDS
TAG="moe-check-$$"
TMP="$(mktemp -d "/tmp/$TAG.XXXXXX")"
IMAGE="localhost/moe-serve:$TAG"
BASES=(docker.io/library/debian:bookworm docker.io/library/debian:bookworm-slim)
MIRROR="${MOE_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
# Hard limits of this machine, so that a container asks for no more.
NOFILE="$(ulimit -Hn)"
NPROC="$(ulimit -Hu)"
[[ "$NOFILE" == unlimited ]] && NOFILE=1048576
[[ "$NPROC" == unlimited ]] && NPROC=1048576
NOFILE=$((NOFILE < 65536 ? NOFILE : 65536))
NPROC=$((NPROC < 32768 ? NPROC : 32768))
# Every podman call: runc with cgroupfs, the image store of the machine.
PODMAN=(podman --runtime runc --cgroup-manager cgroupfs)
run_args() {
  RUN_ARGS=(--network host --ulimit "nofile=$NOFILE:$NOFILE"
    --ulimit "nproc=$NPROC:$NPROC")
}
run_args
CONTAINERS=()
MADE_BASES=()

cleanup() {
  local rc=$?
  set +e
  trap - EXIT INT TERM
  if [[ $rc -ne 0 && $rc -ne 77 ]]; then
    for c in "${CONTAINERS[@]}"; do
      echo "--- $c (last 15 lines)"
      "${PODMAN[@]}" logs --tail 15 "$c" 2>&1
    done
  fi
  for c in "${CONTAINERS[@]}"; do "${PODMAN[@]}" rm -f -t 2 "$c" >/dev/null 2>&1; done
  if [[ -n "${COMPOSE_UP:-}" ]]; then
    if [[ $rc -ne 0 && $rc -ne 77 ]]; then
      for s in router worker-0 worker-1; do
        echo "--- compose $s (last 15 lines)"
        "${PODMAN[@]}" logs --tail 15 "${TAG}_${s}_1" 2>&1
      done
    fi
    compose down -t 2 >/dev/null 2>&1
    # podman-compose 1.0 leaves the project's network behind.
    "${PODMAN[@]}" network rm -f "${TAG}_default" >/dev/null 2>&1
  fi
  "${PODMAN[@]}" rmi -f "$IMAGE" >/dev/null 2>&1
  for b in "${MADE_BASES[@]}"; do "${PODMAN[@]}" rmi -f "$b" >/dev/null 2>&1; done
  # Intermediate images of this build, if any were left (--layers=false
  # keeps none).
  "${PODMAN[@]}" image prune -f --filter "label=moe-check=$TAG" >/dev/null 2>&1
  rm -rf "$TMP"
  [[ -n "${FAIL_LINE:-}" ]] && echo "$FAIL_LINE"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Can podman run a container at all here? Asked with the smallest image
# at hand: the host's /bin/sh and its libraries.
probe_root="$TMP/probe"
mkdir -p "$probe_root/bin"
cp -L /bin/sh "$probe_root/bin/sh"
for lib in $(ldd /bin/sh | awk '/\// {print ($3 ~ /^\// ? $3 : $1)}'); do
  mkdir -p "$probe_root$(dirname "$lib")"
  cp -L "$lib" "$probe_root$lib"
done
if ! tar -C "$probe_root" -c . | "${PODMAN[@]}" import -q - "localhost/moe-probe:$TAG" \
  >"$TMP/probe.log" 2>&1; then
  skip "podman cannot import an image: $(tail -n 3 "$TMP/probe.log")"
fi
MADE_BASES+=("localhost/moe-probe:$TAG")
# runc may be refused a process limit the shell has (seen here: nproc
# 65536 refused under a hard limit of 96364, 32768 allowed): halve it until
# the probe runs.
until "${PODMAN[@]}" run --rm "${RUN_ARGS[@]}" "localhost/moe-probe:$TAG" \
  /bin/sh -c 'echo probe-ok' >"$TMP/probe.log" 2>&1 &&
  grep -q probe-ok "$TMP/probe.log"; do
  if grep -q "error setting rlimit" "$TMP/probe.log" && ((NPROC > 1024)); then
    NPROC=$((NPROC / 2))
    run_args
    continue
  fi
  skip "podman cannot run a container here: $(tail -n 3 "$TMP/probe.log")"
done
log "podman runs containers (runc, cgroupfs, nofile $NOFILE, nproc $NPROC)"

# The base: Debian bookworm from debootstrap, under the names the
# Dockerfile's FROM lines use (bookworm-slim gets the same tree).
# An image of that name not made by this script (it labels its own) is
# someone else's: leave it alone.
for b in "${BASES[@]}"; do
  if "${PODMAN[@]}" image exists "$b" &&
    [[ "$("${PODMAN[@]}" image inspect --format \
      '{{index .Labels "moe.check-image"}}' "$b")" != base ]]; then
    skip "an image $b that this script did not make exists; it would replace it"
  fi
done
rootfs="${MOE_IMAGE_KEEP_BASE:-$TMP/rootfs}"
if [[ ! -x "$rootfs/bin/bash" ]]; then
  log "debootstrap bookworm from $MIRROR"
  t0=$SECONDS
  debootstrap --variant=minbase bookworm "$rootfs" "$MIRROR" \
    >"$TMP/debootstrap.log" 2>&1 || {
    tail -n 20 "$TMP/debootstrap.log"
    echo "FAIL: debootstrap"
    exit 1
  }
  rm -rf "$rootfs/var/cache/apt/archives/"*.deb "$rootfs/var/lib/apt/lists/"*
  log "base made in $((SECONDS - t0)) s"
fi
tar -C "$rootfs" -c . | "${PODMAN[@]}" import -q \
  --change "LABEL moe.check-image=base" - "${BASES[0]}" >/dev/null
MADE_BASES+=("${BASES[0]}")
"${PODMAN[@]}" tag "${BASES[0]}" "${BASES[1]}"
MADE_BASES+=("${BASES[1]}")

# MOE_IMAGE_CCACHE_DIR: a ccache directory (the test command's own build
# fills it) that the image's build compiles through (Dockerfile, CCACHE_DIR).
cache_args=()
if [[ -n "${MOE_IMAGE_CCACHE_DIR:-}" && -d "$MOE_IMAGE_CCACHE_DIR" ]]; then
  cache_args=(--volume "$(cd "$MOE_IMAGE_CCACHE_DIR" && pwd):/ccache"
    --build-arg CCACHE_DIR=/ccache)
fi
log "building the CPU image (docker format${cache_args:+, through ccache})"
t0=$SECONDS
"${PODMAN[@]}" build --format docker --pull=never --network host \
  --layers=false --rm --force-rm "${cache_args[@]}" \
  --build-arg VARIANT=cpu --label "moe-check=$TAG" \
  --ulimit "nofile=$NOFILE:$NOFILE" --ulimit "nproc=$NPROC:$NPROC" \
  -t "$IMAGE" . >"$TMP/build.log" 2>&1 || {
  tail -n 40 "$TMP/build.log"
  echo "FAIL: podman build"
  exit 1
}
build_s=$((SECONDS - t0))
log "image built in $build_s s"
if ((${#cache_args[@]})); then
  grep -E "Hits|Misses|cache hit|cache miss" "$TMP/build.log" | head -n 6 || true
fi
healthcheck="$("${PODMAN[@]}" image inspect --format \
  '{{json .Config.Healthcheck}}' "$IMAGE")"
[[ "$healthcheck" == *moe-cli* ]] ||
  { echo "FAIL: the image has no HEALTHCHECK (got $healthcheck)"; exit 1; }

# A router and two workers on free loopback ports (host network).
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
PORT="$(free_port)"
HEALTH="$(free_port)"
# run_container NAME [PODMAN_RUN_FLAGS...] -- COMMAND...
run_container() {
  local name="$TAG-$1" flags=()
  shift
  while [[ "$1" != -- ]]; do
    flags+=("$1")
    shift
  done
  shift
  # Podman logs an error when it finds no systemd to run the health timer
  # on; the check below runs the HEALTHCHECK itself. Its stderr goes to a
  # log, shown on failure.
  "${PODMAN[@]}" run -d --name "$name" "${RUN_ARGS[@]}" "${flags[@]}" \
    "$IMAGE" "$@" >/dev/null 2>>"$TMP/podman-run.log" || {
    cat "$TMP/podman-run.log"
    echo "FAIL: podman run $name"
    exit 1
  }
  CONTAINERS+=("$name")
}
MODEL=(--synthetic --hidden 256 --inter 128 --experts 8 --top-k 2 --threads 1)
# The image's HEALTHCHECK reads MOE_HEALTH_PORT.
run_container router --env "MOE_HEALTH_PORT=$HEALTH" -- moe-router \
  --listen "127.0.0.1:$PORT" --num-workers 2 \
  --health-listen "127.0.0.1:$HEALTH" "${MODEL[@]}"
for w in 0 1; do
  run_container "worker$w" -- moe-worker --router "127.0.0.1:$PORT" --threads 1
done
cli() {
  "${PODMAN[@]}" run --rm "${RUN_ARGS[@]}" --health-cmd none "$IMAGE" \
    moe-cli "$@"
}
deadline=$((SECONDS + 90))
until out="$(cli forward --target "127.0.0.1:$PORT" --layer 0 --random 7 \
  --timeout-ms 5000 2>&1)"; do
  ((SECONDS < deadline)) || {
    echo "$out"
    echo "FAIL: no answer from the containers within 90 s"
    exit 1
  }
  sleep 1
done
echo "$out"
grep -q "7 tokens x 256 -> y" <<<"$out" || { echo "FAIL: unexpected answer"; exit 1; }
log "forward answered by a router and two workers in containers"

# The image's HEALTHCHECK command, as the engine runs it (in the router's
# container).
"${PODMAN[@]}" healthcheck run "$TAG-router" >"$TMP/health.log" 2>&1 || {
  cat "$TMP/health.log"
  echo "FAIL: the image's HEALTHCHECK failed in the router's container"
  exit 1
}
log "HEALTHCHECK passes (${healthcheck//\"/}) $(cat "$TMP/health.log")"

# The compose file as an operator starts it: podman-compose up with this
# image, on the project's own network (service names resolve), with the
# health checks the compose file declares.
cat >"$TMP/containers.conf" <<CONF
[containers]
default_ulimits = ["nofile=$NOFILE:$NOFILE", "nproc=$NPROC:$NPROC"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
CONF
compose() {
  CONTAINERS_CONF="$TMP/containers.conf" MOE_IMAGE="$IMAGE" \
    MOE_PUBLIC_PORT="$COMPOSE_PORT" MOE_METRICS_PORT="$COMPOSE_METRICS" \
    podman-compose -p "$TAG" -f deploy/compose/docker-compose.yaml "$@"
}
COMPOSE_PORT="$(free_port)"
COMPOSE_METRICS="$(free_port)"
log "compose: podman-compose up (deploy/compose/docker-compose.yaml)"
COMPOSE_UP=1
compose up -d >"$TMP/compose.log" 2>&1 || {
  tail -n 30 "$TMP/compose.log"
  echo "FAIL: podman-compose up"
  exit 1
}
in_compose() {
  local service="$1"
  shift
  "${PODMAN[@]}" exec "${TAG}_${service}_1" "$@"
}
deadline=$((SECONDS + 120))
until out="$(in_compose router moe-cli forward --target 127.0.0.1:50051 \
  --layer 1 --random 9 --timeout-ms 5000 2>&1)"; do
  ((SECONDS < deadline)) || {
    echo "$out"
    # Name the likely cause: a worker that cannot resolve or reach the
    # router logs why.
    cause=""
    for s in worker-0 worker-1; do
      line="$("${PODMAN[@]}" logs --tail 50 "${TAG}_${s}_1" 2>&1 |
        grep -E 'unreachable|resolution|refused' | tail -n 1)"
      [[ -n "$line" ]] && cause="$s: ${line:0:300}" && break
    done
    # The cleanup prints the containers' logs after this; it repeats this
    # line last.
    FAIL_LINE="FAIL: the compose layout answered no forward within 120 s${cause:+ (likely cause, $cause; service names resolve only with the dnsname CNI plugin at $DNSNAME_PLUGIN)}"
    echo "$FAIL_LINE"
    exit 1
  }
  sleep 2
done
echo "$out"
grep -q "9 tokens x 1024 -> y" <<<"$out" || { echo "FAIL: unexpected answer"; exit 1; }
for s in router worker-0 worker-1; do
  # The health check compose declares for the service, as the engine runs it.
  "${PODMAN[@]}" healthcheck run "${TAG}_${s}_1" >"$TMP/health.log" 2>&1 || {
    cat "$TMP/health.log"
    echo "FAIL: compose's health check failed in $s"
    exit 1
  }
  # Ready: the overall status of each probe port.
  in_compose "$s" moe-cli health --target 127.0.0.1:50052 --timeout-ms 3000 \
    >"$TMP/health.log" 2>&1 || {
    cat "$TMP/health.log"
    echo "FAIL: $s's health port is not SERVING"
    exit 1
  }
done
log "compose: router and two workers answer, health checks pass"

# The CUDA variant: built when NVIDIA's base images are in the local store
# (podman pull them, or load them from a tarball, beforehand); this check
# pulls nothing.
CUDA_BASES=(docker.io/nvidia/cuda:13.0.0-devel-ubuntu24.04
  docker.io/nvidia/cuda:13.0.0-runtime-ubuntu24.04)
if "${PODMAN[@]}" image exists "${CUDA_BASES[0]}" &&
  "${PODMAN[@]}" image exists "${CUDA_BASES[1]}"; then
  log "building the CUDA image"
  "${PODMAN[@]}" build --format docker --pull=never --network host \
    --layers=false --rm --force-rm --build-arg VARIANT=cuda \
    --build-arg BUILD_IMAGE="${CUDA_BASES[0]}" \
    --build-arg RUNTIME_IMAGE="${CUDA_BASES[1]}" --label "moe-check=$TAG" \
    --ulimit "nofile=$NOFILE:$NOFILE" --ulimit "nproc=$NPROC:$NPROC" \
    -t "$IMAGE-cuda" . >"$TMP/build-cuda.log" 2>&1 || {
    tail -n 40 "$TMP/build-cuda.log"
    echo "FAIL: podman build (CUDA variant)"
    exit 1
  }
  "${PODMAN[@]}" rmi -f "$IMAGE-cuda" >/dev/null 2>&1
  log "CUDA image built"
else
  log "CUDA image: NOT BUILT (${CUDA_BASES[*]} are not in the local image" \
    "store, and this machine reaches no image registry)"
fi
log "PASS (image built in $build_s s, $((SECONDS - start_s)) s in all)"
