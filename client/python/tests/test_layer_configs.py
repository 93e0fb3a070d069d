"""A model whose MoE layers have their own top_k and expert widths (the
per-layer lists of a family file's `layer_lists`), served by a router with
2 workers from `--family-file` and called through MoeClient: each layer
answers by its own config, checked against a NumPy reference that first
reproduces the golden case of the other layer."""

import json
import os

import numpy as np
import pytest

from conftest import Cluster, load_golden, save_checkpoint, within

F32_TOL = (1e-4, 1e-3)  # tests/golden/README.md

# A made-up release: softmax top-k, no renormalisation, a sigmoid-gated
# shared expert, its own key and tensor names, widths and k per layer.
FAMILY = {
    "model_type": "acme_layers_moe",
    "architectures": ["AcmeLayersMoeForCausalLM"],
    "layer_prefix": "model.blocks.{L}.",
    "top_k_keys": ["experts_per_token"],
    "layer_lists": ["expert_width", "experts_per_token", "shared_width"],
    "moe": {
        "experts": {"key": "n_experts", "fallback": None},
        "inter": {"key": "expert_width", "fallback": None},
        "shared": {"rule": "width_key",
                   "key": {"key": "shared_width", "fallback": 0},
                   "gated": True},
        "route_norm": {"key": "renormalize", "fallback": False},
    },
    "names": {"per_expert": [
        {"role": "gate", "name": "{p}moe.router.weight"},
        {"role": "w1", "name": "{p}moe.ffn.{e}.wi_gate.weight"},
        {"role": "w3", "name": "{p}moe.ffn.{e}.wi_up.weight"},
        {"role": "w2", "name": "{p}moe.ffn.{e}.wo.weight"},
        {"role": "shared.w1", "name": "{p}moe.common.wi_gate.weight"},
        {"role": "shared.w3", "name": "{p}moe.common.wi_up.weight"},
        {"role": "shared.w2", "name": "{p}moe.common.wo.weight"},
        {"role": "shared.gate", "name": "{p}moe.common.gate.weight"},
    ]},
}


def silu(v):
    return v / (1.0 + np.exp(-v))


def reference(t, k):
    """y and the chosen experts of softmax top-k (not renormalised) with a
    gated SiLU shared expert scaled by sigmoid(x . shared.gate), in fp64."""
    x = t["x"].astype(np.float64)
    logits = x @ t["gate.weight"].astype(np.float64).T
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    idx = np.argsort(-p, axis=1, kind="stable")[:, :k]
    w = np.take_along_axis(p, idx, axis=1)
    w1, w3, w2 = (t[n].astype(np.float64) for n in
                  ("experts.w1", "experts.w3", "experts.w2"))
    y = np.zeros_like(x)
    for n in range(x.shape[0]):
        for j in range(k):
            e = idx[n, j]
            h = silu(w1[e] @ x[n]) * (w3[e] @ x[n])
            y[n] += w[n, j] * (w2[e] @ h)
    sw1, sw3, sw2, sg = (t[n].astype(np.float64) for n in
                         ("shared.w1", "shared.w3", "shared.w2", "shared.gate"))
    shared = (silu(x @ sw1.T) * (x @ sw3.T)) @ sw2.T
    y += shared / (1.0 + np.exp(-(x @ sg.T)))
    return y.astype(np.float32), idx


def random_layer(like, inter, shared, tokens, seed):
    """Weights of `like`'s hidden width and expert count at other widths."""
    rng = np.random.default_rng(seed)
    E, H = like["gate.weight"].shape

    def u(shape, scale):
        return rng.uniform(-scale, scale, shape).astype(np.float32)

    return {
        "x": u((tokens, H), 1.7),
        "gate.weight": u((E, H), 1.7 / np.sqrt(H)),
        "experts.w1": u((E, inter, H), 1.7 / np.sqrt(H)),
        "experts.w3": u((E, inter, H), 1.7 / np.sqrt(H)),
        "experts.w2": u((E, H, inter), 1.7 / np.sqrt(inter)),
        "shared.w1": u((shared, H), 1.7 / np.sqrt(H)),
        "shared.w3": u((shared, H), 1.7 / np.sqrt(H)),
        "shared.w2": u((H, shared), 1.7 / np.sqrt(shared)),
        "shared.gate": u((1, H), 1.7 / np.sqrt(H)),
    }


def checkpoint_tensors(layers):
    out = {}
    for layer, t in enumerate(layers):
        p = f"model.blocks.{layer}.moe."
        out[p + "router.weight"] = t["gate.weight"]
        for e in range(t["gate.weight"].shape[0]):
            out[p + f"ffn.{e}.wi_gate.weight"] = t["experts.w1"][e]
            out[p + f"ffn.{e}.wi_up.weight"] = t["experts.w3"][e]
            out[p + f"ffn.{e}.wo.weight"] = t["experts.w2"][e]
        out[p + "common.wi_gate.weight"] = t["shared.w1"]
        out[p + "common.wi_up.weight"] = t["shared.w3"]
        out[p + "common.wo.weight"] = t["shared.w2"]
        out[p + "common.gate.weight"] = t["shared.gate"]
    return out


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    golden, gc = load_golden("qwen2_moe_like.safetensors")
    assert gc["shared_gate"] and not gc["route_norm"]
    # Layer 0: one expert more per token, odd widths; layer 1: the golden case.
    k0, inter0, shared0 = gc["top_k"] + 1, gc["inter"] + 13, gc["shared_inter"] + 7
    l0 = random_layer(golden, inter0, shared0, tokens=19, seed=3)
    l0["y"], l0["top_idx"] = reference(l0, k0)
    d = tmp_path_factory.mktemp("layer_configs")
    cfg = {"model_type": FAMILY["model_type"],
           "architectures": FAMILY["architectures"],
           "hidden_size": gc["hidden"], "num_hidden_layers": 2,
           "n_experts": gc["experts"], "expert_width": [inter0, gc["inter"]],
           "experts_per_token": [k0, gc["top_k"]],
           "shared_width": [shared0, gc["shared_inter"]],
           "renormalize": False, "vocab_size": 32}
    save_checkpoint(str(d / "ckpt"), checkpoint_tensors([l0, golden]), cfg)
    with open(d / "family.json", "w") as f:
        json.dump(FAMILY, f, indent=2)
    c = Cluster(str(d / "run"), [f"--model={d / 'ckpt'}",
                                 f"--family-file={d / 'family.json'}"], workers=2)
    yield (l0, k0, inter0), (golden, gc), c
    c.stop()


def test_the_reference_reproduces_the_golden_case():
    t, c = load_golden("qwen2_moe_like.safetensors")
    y, idx = reference(t, c["top_k"])
    assert within(y, t["y"], *F32_TOL) <= 0
    assert [sorted(r) for r in idx.tolist()] == [sorted(r) for r in t["top_idx"].tolist()]


def test_model_info_lists_the_layer_of_its_own_config(served):
    (_, k0, inter0), (_, gc), c = served
    info = c.client.model_info()
    assert info.family == FAMILY["model_type"]
    assert (info.top_k, info.inter) == (k0, inter0)
    assert sorted(info.layer_config_overrides_json) == [1]
    own = json.loads(info.layer_config_overrides_json[1])
    assert (own["top_k"], own["inter"], own["shared_inter"]) == (
        gc["top_k"], gc["inter"], gc["shared_inter"])


@pytest.mark.parametrize("layer", [0, 1])
def test_each_layer_answers_by_its_own_config(served, layer):
    (l0, k0, _), (golden, gc), c = served
    t, k = (l0, k0) if layer == 0 else (golden, gc["top_k"])
    y = c.client.forward(layer, t["x"], routing=True)
    excess = within(y, t["y"], *F32_TOL)
    assert excess <= 0, f"layer {layer}: |y - y_ref| exceeds the tolerance by {excess:g}"
    ids = y.routing.expert_ids
    assert ids.shape == (t["x"].shape[0], k)
    for n in range(ids.shape[0]):
        assert sorted(ids[n]) == sorted(t["top_idx"][n].tolist()), f"token {n}"
