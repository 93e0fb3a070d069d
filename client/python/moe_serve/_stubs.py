"""Loads the generated stubs (moe_serve/_gen, made by gen_stubs.sh)."""

from __future__ import annotations

import os
import subprocess

_HERE = os.path.dirname(os.path.abspath(__file__))


def _generate() -> None:
    # In a source checkout, generate the stubs on first import when protoc is
    # there; an installed package carries them already.
    script = os.path.join(_HERE, "..", "gen_stubs.sh")
    proto = os.path.join(_HERE, "..", "..", "..", "proto", "moe", "v1", "moe.proto")
    if not (os.path.exists(script) and os.path.exists(proto)):
        raise ImportError(
            "moe_serve: the gRPC stubs (moe_serve/_gen) are missing; run "
            "client/python/gen_stubs.sh")
    r = subprocess.run(["bash", script], capture_output=True, text=True)
    if r.returncode != 0:
        raise ImportError("moe_serve: client/python/gen_stubs.sh failed:\n"
                          + r.stdout + r.stderr)


if not os.path.exists(os.path.join(_HERE, "_gen", "moe_pb2_grpc.py")):
    _generate()

from ._gen import health_pb2, health_pb2_grpc, moe_pb2, moe_pb2_grpc  # noqa: E402

__all__ = ["moe_pb2", "moe_pb2_grpc", "health_pb2", "health_pb2_grpc"]
