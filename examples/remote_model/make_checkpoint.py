"""Writes a small random Hugging Face checkpoint of a supported family.

    python3 examples/remote_model/make_checkpoint.py mixtral /tmp/tiny-mixtral
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model import MoeForCausalLM  # noqa: E402
from moe_serve.safetensors_lite import save  # noqa: E402

CONFIGS = {
    "mixtral": dict(model_type="mixtral", hidden_size=64, num_hidden_layers=3,
                    num_attention_heads=4, num_key_value_heads=2, vocab_size=96,
                    intermediate_size=32, num_local_experts=8, num_experts_per_tok=2,
                    rms_norm_eps=1e-5, rope_theta=1e6, tie_word_embeddings=False),
    "qwen3_moe": dict(model_type="qwen3_moe", hidden_size=64, num_hidden_layers=3,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                      vocab_size=96, intermediate_size=128, moe_intermediate_size=32,
                      num_experts=16, num_experts_per_tok=4, norm_topk_prob=True,
                      decoder_sparse_step=1, mlp_only_layers=[0], rms_norm_eps=1e-6,
                      rope_theta=1e6, tie_word_embeddings=False),
}


def write(family: str, directory: str, seed: int = 0) -> dict:
    cfg = dict(CONFIGS[family])
    torch.manual_seed(seed)
    model = MoeForCausalLM(cfg)
    rng = np.random.default_rng(seed)
    tensors = {}
    for name, p in model.state_dict().items():
        shape = tuple(p.shape)
        if name.endswith("norm.weight"):
            v = 1.0 + 0.1 * rng.standard_normal(shape)
        else:  # fan-in scaling keeps activations O(1) through the layers
            v = rng.standard_normal(shape) / np.sqrt(shape[-1])
        tensors[name] = v.astype(np.float32)
    os.makedirs(directory, exist_ok=True)
    save(os.path.join(directory, "model.safetensors"), tensors, {"format": "pt"})
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    return cfg


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in CONFIGS:
        sys.exit(f"usage: {sys.argv[0]} {{{','.join(CONFIGS)}}} DIR")
    write(sys.argv[1], sys.argv[2])
    print(f"wrote a random {sys.argv[1]} checkpoint to {sys.argv[2]}")
