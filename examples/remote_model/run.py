"""Runs a checkpoint locally, then with its MoE blocks served remotely.

    moe-router --model DIR --num-workers 2 --listen 127.0.0.1:50051 &
    moe-worker --router 127.0.0.1:50051 & moe-worker --router 127.0.0.1:50051 &
    python3 examples/remote_model/run.py --model DIR --target 127.0.0.1:50051
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model import MoeForCausalLM  # noqa: E402
from moe_serve import MoeClient  # noqa: E402
from moe_serve.torch import replace_moe_blocks  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True, help="Hugging Face checkpoint directory")
    ap.add_argument("--target", help="router address; without it only the local run")
    ap.add_argument("--tokens", type=int, default=16, help="tokens to decode greedily")
    ap.add_argument("--prompt", default="1,2,3,4,5,6,7,8")
    a = ap.parse_args()
    prompt = torch.tensor([[int(t) for t in a.prompt.split(",")]])

    model = MoeForCausalLM.from_pretrained(a.model)
    with torch.no_grad():
        h_local, _ = model(prompt)
    out_local = model.generate(prompt, a.tokens)
    print("local :", out_local[0, prompt.shape[1]:].tolist())
    if not a.target:
        return

    layers = replace_moe_blocks(model, MoeClient(a.target, timeout=60))
    with torch.no_grad():
        h_remote, _ = model(prompt)
    out_remote = model.generate(prompt, a.tokens)
    print("remote:", out_remote[0, prompt.shape[1]:].tolist(), f"(MoE layers {layers})")
    diff = (h_remote - h_local).abs().max().item()
    print(f"final hidden states: max |remote - local| = {diff:.3g}; tokens "
          + ("identical" if torch.equal(out_local, out_remote) else "DIFFER"))


if __name__ == "__main__":
    main()
