"""Golden cases as checkpoints of the families the loader reads by
description (a family-table entry, no code of their own): glm45_like as
GLM-5 (glm_moe_dsa, MoE layers from mlp_layer_types, a DSA indexer tensor
and the MTP layer beside them) and minimax_m2_like as MiMo-V2-Flash
(mimo_v2_flash: DeepSeek-V3's gate, no shared expert, moe_layer_freq a
per-layer list, model.mtp.* beside it), served by a router with 2 workers.
Layer 0 is dense, layer 1 holds the case. y meets the fp32 tolerance and the
routing is exact."""


import numpy as np
import pytest

from conftest import Cluster, assert_serves_golden, load_golden, save_checkpoint

F32_TOL = (1e-4, 1e-3)  # tests/golden/README.md
CASES = [("glm45_like.safetensors", "glm_moe_dsa"),
         ("minimax_m2_like.safetensors", "mimo_v2_flash")]


def write_checkpoint(t, c, fam, directory):
    """Golden case (tensors t, config c) as MoE layer 1 of a two-layer
    checkpoint of `fam`, layer 0 a dense MLP."""
    h = c["hidden"]
    cfg = {"model_type": fam, "hidden_size": h, "num_hidden_layers": 2,
           "num_experts_per_tok": c["top_k"], "vocab_size": 32,
           "num_attention_heads": 4, "n_routed_experts": c["experts"],
           "moe_intermediate_size": c["inter"], "intermediate_size": 2 * h,
           "norm_topk_prob": c["route_norm"], "n_group": 1, "topk_group": 1,
           "first_k_dense_replace": 1, "num_nextn_predict_layers": 1}
    assert c["score_func"] == "sigmoid" and c["use_bias"] and c["n_groups"] <= 1
    if fam == "glm_moe_dsa":
        cfg.update(architectures=["GlmMoeDsaForCausalLM"],
                   n_shared_experts=c["shared_inter"] // c["inter"],
                   routed_scaling_factor=c["route_scale"],
                   mlp_layer_types=["dense", "sparse"], index_topk=2048)
    else:
        # No shared expert and no scale, both said by null.
        assert c["shared_inter"] == 0 and c["route_scale"] == 1.0
        cfg.update(architectures=["MiMoV2FlashForCausalLM"],
                   n_shared_experts=None, routed_scaling_factor=None,
                   scoring_func="sigmoid", topk_method="noaux_tc",
                   moe_layer_freq=[0, 1])
    names = {"w1": "gate_proj", "w3": "up_proj", "w2": "down_proj"}

    def moe(m, nan=False):
        out = {m + "gate.weight": t["gate.weight"],
               m + "gate.e_score_correction_bias": t["gate.expert_bias"]}
        for e in range(c["experts"]):
            for role, hf in names.items():
                out[f"{m}experts.{e}.{hf}.weight"] = t[f"experts.{role}"][e]
        if c["shared_inter"] > 0:
            for role, hf in names.items():
                out[f"{m}shared_experts.{hf}.weight"] = t[f"shared.{role}"]
        if nan:
            out = {k: np.full_like(v, np.nan) for k, v in out.items()}
        return out

    rng = np.random.default_rng(3)
    out = {"model.embed_tokens.weight": np.zeros((32, h), np.float32),
           "model.layers.0.self_attn.q_proj.weight": np.zeros((h, h), np.float32)}
    for hf in names.values():
        shape = (h, 2 * h) if hf == "down_proj" else (2 * h, h)
        out[f"model.layers.0.mlp.{hf}.weight"] = rng.standard_normal(shape).astype(np.float32)
    out.update(moe("model.layers.1.mlp."))
    # Never read: poisoned so that reading them by mistake shows.
    if fam == "glm_moe_dsa":
        out["model.layers.1.self_attn.indexer.wk.weight"] = np.full((h, h), np.nan, np.float32)
        out.update(moe("model.layers.2.mlp.", nan=True))  # the MTP layer
    else:
        out.update(moe("model.mtp.layers.0.mlp.", nan=True))
    save_checkpoint(directory, out, cfg)


@pytest.fixture(scope="module", params=CASES, ids=lambda p: p[1])
def described(request, tmp_path_factory):
    name, fam = request.param
    tensors, cfg = load_golden(name)
    d = tmp_path_factory.mktemp(fam)
    write_checkpoint(tensors, cfg, fam, str(d / "ckpt"))
    c = Cluster(str(d / "run"), [f"--model={d / 'ckpt'}"], workers=2)
    yield name, fam, tensors, c
    c.stop()


def test_described_family_matches_the_golden_case(described):
    name, fam, t, c = described
    info = c.client.model_info()
    assert info.family == fam and list(info.moe_layers) == [1]
    y = assert_serves_golden(c.client, 1, t, F32_TOL, name)
    np.testing.assert_allclose(np.sort(y.routing.weights, axis=1),
                               np.sort(t["top_w"], axis=1), atol=1e-5)
