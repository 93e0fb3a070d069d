"""examples/remote_model: a small random Mixtral and Qwen3-MoE checkpoint,
run locally and with its MoE blocks served by a router with 2 workers."""

import os
import re
import subprocess
import sys

import pytest
import torch

from conftest import REPO, within

sys.path.insert(0, os.path.join(REPO, "examples", "remote_model"))
from make_checkpoint import write  # noqa: E402
from model import MoeForCausalLM, moe_layers  # noqa: E402
from moe_serve.torch import RemoteMoE, find_moe_blocks, replace_moe_blocks  # noqa: E402


@pytest.mark.parametrize("family", ["mixtral", "qwen3_moe"])
def test_remote_model_matches_local(family, tmp_path, cluster_factory):
    ckpt = str(tmp_path / family)
    cfg = write(family, ckpt, seed=7)
    c = cluster_factory([f"--model={ckpt}"], workers=2)
    info = c.client.model_info()
    assert info.family == family and list(info.moe_layers) == moe_layers(cfg)

    model = MoeForCausalLM.from_pretrained(ckpt)
    prompt = torch.tensor([[3, 14, 15, 92, 65, 35, 89, 79]])
    with torch.no_grad():
        h_local, _ = model(prompt)
    tokens_local = model.generate(prompt, 16)

    swapped = replace_moe_blocks(model, c.client)
    assert swapped == moe_layers(cfg)
    assert not find_moe_blocks(model)
    assert sum(isinstance(m, RemoteMoE) for m in model.modules()) == len(swapped)
    c.client.expert_stats(swapped[0], reset=True)
    with torch.no_grad():
        h_remote, _ = model(prompt)
    assert c.client.expert_stats(swapped[0]).tokens == prompt.numel()
    excess = within(h_remote.numpy(), h_local.numpy(), 1e-4, 1e-3)
    assert excess <= 0, f"final hidden states differ beyond the golden tolerance by {excess}"
    tokens_remote = model.generate(prompt, 16)
    assert tokens_remote.tolist() == tokens_local.tolist()
    # Not a constant sequence: the check has teeth.
    assert len(set(tokens_local[0, 8:].tolist())) > 3


def _max_diff(out: str, what: str) -> float:
    """The figure after `what = ` in run.py's output; the line must also say
    the tokens are identical."""
    m = re.search(re.escape(what) + r" = (\S+); tokens (\w+)", out)
    assert m, f"no '{what}' line in:\n{out}"
    assert m.group(2) == "identical", f"{what}: tokens {m.group(2)}\n{out}"
    return float(m.group(1))


@pytest.mark.parametrize("family", ["mixtral", "qwen3_moe"])
def test_example_replays_routing_and_sends_gate_logits(family, tmp_path, cluster_factory):
    """examples/remote_model/run.py as its README runs it: the replayed run
    answers the recorded one's bits, the run with local gates the local
    model's within the golden tolerance."""
    ckpt = str(tmp_path / family)
    write(family, ckpt, seed=11)
    c = cluster_factory([f"--model={ckpt}"], workers=2)
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "client", "python"))
    run = subprocess.run([sys.executable, os.path.join(REPO, "examples", "remote_model",
                                                       "run.py"),
                          "--model", ckpt, "--target", c.target, "--tokens", "8"],
                         capture_output=True, text=True, timeout=300, env=env)
    assert run.returncode == 0, run.stdout + run.stderr
    assert _max_diff(run.stdout, "replay: max |replayed - recorded|") == 0.0
    # |h| is O(1) here: the golden atol bounds the difference.
    assert _max_diff(run.stdout, "local gate: max |gate sent - local|") <= 1e-4
    assert _max_diff(run.stdout, "final hidden states: max |remote - local|") <= 1e-4


def test_remote_moe_sends_gate_logits_and_replays(tmp_path, cluster_factory):
    ckpt = str(tmp_path / "mixtral")
    cfg = write("mixtral", ckpt, seed=5)
    c = cluster_factory([f"--model={ckpt}"], workers=2)
    model = MoeForCausalLM.from_pretrained(ckpt)
    block = model.model.layers[1].block_sparse_moe
    x = torch.randn(6, cfg["hidden_size"], generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        y_local = block(x)
    served = RemoteMoE(c.client, 1, gate=block.gate)
    y = served(x)
    assert within(y.numpy(), y_local.numpy(), 1e-4, 1e-3) <= 0
    # The logits come from the gate given here, not the service's: a gate
    # of zeros (every expert tied) answers something else.
    tied = RemoteMoE(c.client, 1, gate=torch.zeros_like(block.gate.weight))
    assert within(tied(x).numpy(), y_local.numpy(), 1e-4, 1e-3) > 0
    # Recorded routing replayed answers the same bits; a routing of the
    # caller's own (ids moved) answers another y.
    served.recorded = []
    y_rec = served(x)
    routing = served.recorded[0]
    assert routing.expert_ids.shape == (6, cfg["num_experts_per_tok"])
    served.recorded, served.replay = None, iter([routing])
    assert torch.equal(served(x), y_rec)
    moved = ((routing.expert_ids + 1) % cfg["num_local_experts"], routing.weights)
    assert not torch.allclose(served(x, routing=moved), y_rec)
    # Shared experts apart: Mixtral has none, so all of y is routed.
    apart = RemoteMoE(c.client, 1, shared="separate")
    assert torch.equal(apart(x), RemoteMoE(c.client, 1)(x))
    assert torch.count_nonzero(apart.last_shared_output) == 0
