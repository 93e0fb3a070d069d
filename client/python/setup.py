"""moe-serve: the Python client and PyTorch integration of the moe.v1 service.

Installable offline with Debian's setuptools: `pip install --no-deps
client/python` (there is deliberately no pyproject.toml build-system table,
which would make pip fetch setuptools into an isolated build environment).
Generates the gRPC stubs (gen_stubs.sh, from ../../proto) when missing,
before setuptools packages moe_serve and moe_serve._gen."""

import os
import subprocess

from setuptools import setup

HERE = os.path.dirname(os.path.abspath(__file__))
if not os.path.exists(os.path.join(HERE, "moe_serve", "_gen", "moe_pb2_grpc.py")):
    subprocess.check_call(["bash", os.path.join(HERE, "gen_stubs.sh")])

setup(
    name="moe-serve",
    version="0.1.0",
    description=("Python client and PyTorch integration of the distributed "
                 "MoE layer service (moe.v1)"),
    python_requires=">=3.9",
    # Debian: python3-grpcio python3-protobuf python3-numpy; torch optional.
    install_requires=["grpcio", "protobuf", "numpy"],
    extras_require={"torch": ["torch"], "test": ["pytest"]},
    packages=["moe_serve", "moe_serve._gen"],
)
