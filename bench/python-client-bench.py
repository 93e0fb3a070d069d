"""Closed loop with the Python AsyncMoeClient: C coroutines, each sending its
next Forward of N random tokens when the last one answered; prints JSON.
    python3 bench/python-client-bench.py TARGET [-c 64] [--tokens 8] [-z 10] [--warmup 2]
"""

import argparse
import asyncio
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                "client", "python"))
from moe_serve import AsyncMoeClient  # noqa: E402


async def run(a):
    async with AsyncMoeClient(a.target, timeout=30) as client:
        info = await client.model_info()
        layer = info.moe_layers[0]
        x = np.random.default_rng(0).standard_normal((a.tokens, info.hidden)).astype(np.float32)
        lat, errors = [], 0
        measuring = False

        async def user():
            nonlocal errors
            while not stop:
                t0 = time.perf_counter()
                try:
                    await client.forward(layer, x)
                except Exception:  # noqa: BLE001 (counted, the loop goes on)
                    errors += 1
                    continue
                if measuring:
                    lat.append(time.perf_counter() - t0)

        stop = False
        tasks = [asyncio.create_task(user()) for _ in range(a.concurrency)]
        await asyncio.sleep(a.warmup)
        measuring, start = True, time.perf_counter()
        await asyncio.sleep(a.duration)
        measuring, elapsed = False, time.perf_counter() - start
        stop = True
        await asyncio.gather(*tasks)
    lat_ms = np.array(lat) * 1e3
    return {"requests": len(lat), "errors": errors,
            "requests_per_s": len(lat) / elapsed,
            "tokens_per_s": len(lat) * a.tokens / elapsed,
            "latency_ms": {"p50": float(np.percentile(lat_ms, 50)),
                           "p99": float(np.percentile(lat_ms, 99))}}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("target")
    ap.add_argument("-c", "--concurrency", type=int, default=64)
    ap.add_argument("--tokens", type=int, default=8)
    ap.add_argument("-z", "--duration", type=float, default=10)
    ap.add_argument("--warmup", type=float, default=2)
    print(json.dumps(asyncio.run(run(ap.parse_args()))))


if __name__ == "__main__":
    main()
