"""Runs a checkpoint locally, then with its MoE blocks served remotely:
as the service routes, replaying the routing it recorded, and with the
gates run here (their logits sent to the service).

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
from moe_serve.torch import remote_blocks, replace_moe_blocks  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True, help="Hugging Face checkpoint directory")
    ap.add_argument("--target", help="router address; without it only the local run")
    ap.add_argument("--tokens", type=int, default=16, help="tokens to decode greedily")
    ap.add_argument("--prompt", default="1,2,3,4,5,6,7,8")
    a = ap.parse_args()
    prompt = torch.tensor([[int(t) for t in a.prompt.split(",")]])

    model = MoeForCausalLM.from_pretrained(a.model)
    h_local, out_local = run(model, prompt, a.tokens)
    print("local :", out_local[0, prompt.shape[1]:].tolist())
    if not a.target:
        return

    client = MoeClient(a.target, timeout=60)
    layers = replace_moe_blocks(model, client)
    h_remote, out_remote = run(model, prompt, a.tokens)
    print("remote:", out_remote[0, prompt.shape[1]:].tolist(), f"(MoE layers {layers})")
    report("final hidden states: max |remote - local|", h_remote, h_local,
           out_remote, out_local)

    # Routing replay: record the routing of every MoE call of a run, then run
    # again sending it back; the service skips its gates and must answer the
    # same bits.
    blocks = remote_blocks(model)
    for b in blocks:
        b.recorded = []
    h_recorded, out_recorded = run(model, prompt, a.tokens)
    for b in blocks:
        b.replay, b.recorded = iter(b.recorded), None
    h_replayed, out_replayed = run(model, prompt, a.tokens)
    report("replay: max |replayed - recorded|", h_replayed, h_recorded,
           out_replayed, out_recorded)

    # The gates on this side (as an attention worker would run them): their
    # logits are sent, the service scores them instead of computing x·Wᵀ.
    gated = MoeForCausalLM.from_pretrained(a.model)
    replace_moe_blocks(gated, client, local_gate=True)
    h_gated, out_gated = run(gated, prompt, a.tokens)
    report("local gate: max |gate sent - local|", h_gated, h_local, out_gated, out_local)


def run(model, prompt, tokens):
    """(final hidden states of the prompt, greedy tokens after it)."""
    with torch.no_grad():
        h, _ = model(prompt)
    return h, model.generate(prompt, tokens)


def report(what, h, h_ref, out, out_ref):
    diff = (h - h_ref).abs().max().item()
    print(f"{what} = {diff:.3g}; tokens "
          + ("identical" if torch.equal(out, out_ref) else "DIFFER"))


if __name__ == "__main__":
    main()
