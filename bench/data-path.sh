#!/usr/bin/env bash
# The host data path around the experts: a synthetic layer with tiny experts
# (H=2048, I=16, E=64, k=6) so that compute is small, served with P = 0, 1
# and 2 workers, N = 8, 512 and 4096 bf16 tokens one request at a time,
# against a memcpy and a gRPC echo of the same payload in the same run.
# Router and workers run with their default threads (all cores), as
# deployed: at one request at a time they take turns on the cores.
#
#   bench/data-path.sh [BUILD_DIR] [--device cpu|cuda] [--requests R]
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
build="$here/build"
device=cpu
requests=20
while (($#)); do
  case "$1" in
    --device) device="$2"; shift 2 ;;
    --requests) requests="$2"; shift 2 ;;
    *) build="$1"; shift ;;
  esac
done
dtype=f32
[[ "$device" == cuda* ]] && dtype=bf16  # the only expert dtype on a GPU
exec "$here/bench/service-latency.sh" "$build" --workers "0 1 2" \
  --tokens "8 512 4096" --dtype bf16 --requests "$requests" \
  --worker-threads 0 -- \
  --synthetic --hidden 2048 --inter 16 --experts 64 --top-k 6 --seed 1 \
  --max-batch-tokens 4096 --device "$device" --weight-dtype "$dtype"
