"""Generates the gRPC stubs (gen_stubs.sh, from ../../proto) when missing,
before setuptools packages moe_serve and moe_serve._gen."""

import os
import subprocess

from setuptools import setup

HERE = os.path.dirname(os.path.abspath(__file__))
if not os.path.exists(os.path.join(HERE, "moe_serve", "_gen", "moe_pb2_grpc.py")):
    subprocess.check_call(["bash", os.path.join(HERE, "gen_stubs.sh")])

setup()
