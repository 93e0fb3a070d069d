"""Golden cases as checkpoints with transformers v5's packed experts, served
by a router with 2 workers: qwen3_next_like as a Qwen3.5 MoE checkpoint
(qwen3_5_moe: keys under text_config, tensors under model.language_model.,
a vision tower and MTP tensors beside them), qwen3_moe_like and mixtral_like
in the packed layout of their families. y meets the fp32 tolerance and the
routing is exact."""


import numpy as np
import pytest

from conftest import Cluster, assert_serves_golden, load_golden, save_checkpoint

F32_TOL = (1e-4, 1e-3)  # tests/golden/README.md
CASES = [("qwen3_next_like.safetensors", "qwen3_5_moe"),
         ("qwen3_moe_like.safetensors", "qwen3_moe"),
         ("mixtral_like.safetensors", "mixtral")]


def write_packed_checkpoint(t, c, fam, directory):
    """Golden case (tensors t, config c) as MoE layer 0 of a one-layer
    checkpoint of `fam` with packed experts: gate_up_proj [E, 2I, H] (each
    expert's gate rows over its up rows), down_proj [E, H, I]."""
    text = {"hidden_size": c["hidden"], "num_hidden_layers": 1,
            "num_experts_per_tok": c["top_k"], "vocab_size": 32,
            "num_attention_heads": 4}
    if fam == "mixtral":
        assert c["route_norm"] and c["shared_inter"] == 0
        text.update(num_local_experts=c["experts"], intermediate_size=c["inter"])
    else:
        text.update(num_experts=c["experts"], moe_intermediate_size=c["inter"])
    if fam == "qwen3_moe":
        assert c["shared_inter"] == 0
        text.update(norm_topk_prob=c["route_norm"], decoder_sparse_step=1,
                    mlp_only_layers=[])
    arch = {"mixtral": "MixtralForCausalLM", "qwen3_moe": "Qwen3MoeForCausalLM",
            "qwen3_5_moe": "Qwen3_5MoeForConditionalGeneration"}[fam]
    if fam == "qwen3_5_moe":
        # Always renormalised, every layer MoE, a gated shared expert.
        assert c["route_norm"] and c["shared_gate"]
        text.update(model_type="qwen3_5_moe_text",
                    shared_expert_intermediate_size=c["shared_inter"])
        cfg = {"model_type": fam, "architectures": [arch], "text_config": text,
               "vision_config": {"hidden_size": 48}}
        lm = "model.language_model."
    else:
        cfg = dict(text, model_type=fam, architectures=[arch])
        lm = "model."
    m = lm + "layers.0.mlp."
    h = c["hidden"]
    out = {
        lm + "embed_tokens.weight": np.zeros((32, h), np.float32),
        m + "gate.weight": t["gate.weight"],
        m + "experts.gate_up_proj": np.ascontiguousarray(
            np.concatenate([t["experts.w1"], t["experts.w3"]], axis=1)),
        m + "experts.down_proj": np.ascontiguousarray(t["experts.w2"]),
    }
    if fam == "qwen3_5_moe":
        for role, hf in {"w1": "gate_proj", "w3": "up_proj", "w2": "down_proj"}.items():
            out[f"{m}shared_expert.{hf}.weight"] = t[f"shared.{role}"]
        out[m + "shared_expert_gate.weight"] = t["shared.gate"]
        # Never read: poisoned so that reading them by mistake shows.
        out["model.visual.patch_embed.proj.weight"] = np.full((h, 48), np.nan, np.float32)
        out["mtp.layers.0.mlp.experts.gate_up_proj"] = np.full_like(
            out[m + "experts.gate_up_proj"], np.nan)
    save_checkpoint(directory, out, cfg)


@pytest.fixture(scope="module", params=CASES, ids=lambda p: p[1])
def packed(request, tmp_path_factory):
    name, fam = request.param
    tensors, cfg = load_golden(name)
    d = tmp_path_factory.mktemp(fam + "_packed")
    write_packed_checkpoint(tensors, cfg, fam, str(d / "ckpt"))
    c = Cluster(str(d / "run"), [f"--model={d / 'ckpt'}"], workers=2)
    yield name, fam, tensors, cfg, c
    c.stop()


def test_packed_checkpoint_matches_the_golden_case(packed):
    name, fam, t, cfg, c = packed
    info = c.client.model_info()
    assert info.family == fam and list(info.moe_layers) == [0]
    y = assert_serves_golden(c.client, 0, t, F32_TOL, name)
    np.testing.assert_allclose(np.sort(y.routing.weights, axis=1),
                               np.sort(t["top_w"], axis=1), atol=1e-5)
