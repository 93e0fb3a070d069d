"""Writes a small random Hugging Face checkpoint of a supported family.

    python3 examples/remote_model/make_checkpoint.py mixtral /tmp/tiny-mixtral
    python3 examples/remote_model/make_checkpoint.py gpt_oss /tmp/tiny-gpt-oss --released
    python3 examples/remote_model/make_checkpoint.py --list

`mixtral` and `qwen3_moe` are written here as whole models (attention and
all), which `run.py` runs end to end. Every family the loader knows (the
list is the loader's own, `moe-make-checkpoint --list`) is written by
`moe-make-checkpoint`, the test suite's checkpoint writer, in its real
layout: its MoE layers from a golden case its config expresses, the other
tensors a release has as filler; `--released` (gpt_oss, deepseek_v4,
kimi_k3: MXFP4 experts as they ship), `--nvfp4` (nemotron_h's ModelOpt
release), `--packed` (transformers v5's packed experts) and `--mistral`
(mixtral, deepseek_v3 as Mistral-Large-3: Mistral's own params.json and
consolidated shards) choose a form.
Mixtral and Qwen3-MoE in a form other than the whole model go there too.
The binary is `$MOE_BIN/tests/moe-make-checkpoint` (MOE_BIN: the build
directory, `build/` by default; `cmake --build build --target
moe-make-checkpoint`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))

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


def writer() -> str:
    """The test suite's checkpoint writer, moe-make-checkpoint."""
    build = os.environ.get("MOE_BIN", os.path.join(REPO, "build"))
    for path in (os.path.join(build, "tests", "moe-make-checkpoint"),
                 os.path.join(build, "moe-make-checkpoint")):
        if os.access(path, os.X_OK):
            return path
    sys.exit(f"make_checkpoint: no moe-make-checkpoint in {build} (MOE_BIN): build it "
             f"with cmake --build {build} --target moe-make-checkpoint")


def families() -> list[str]:
    """Every family and form the loader knows, from moe-make-checkpoint."""
    out = subprocess.run([writer(), "--list"], check=True, capture_output=True, text=True)
    return out.stdout.splitlines()


def write(family: str, directory: str, seed: int = 0) -> dict:
    import numpy as np
    import torch

    sys.path.insert(0, HERE)
    from model import MoeForCausalLM
    from moe_serve.safetensors_lite import save

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


def main(argv: list[str]) -> int:
    if argv == ["--list"]:
        print("\n".join(families()))
        return 0
    if len(argv) not in (2, 3):
        sys.exit(f"usage: {sys.argv[0]} --list | FAMILY DIR [--released | --nvfp4 | --packed | --mistral]")
    family, directory = argv[0], argv[1]
    if family in CONFIGS and len(argv) == 2:
        try:
            import numpy  # noqa: F401
            import torch  # noqa: F401
        except ImportError as e:
            # The MoE layers alone, as every other family's, still serve.
            print(f"make_checkpoint: {e.name} is missing: {family} written by "
                  "moe-make-checkpoint, its MoE layers only", file=sys.stderr)
        else:
            write(family, directory)
            print(f"wrote a random {family} checkpoint to {directory}")
            return 0
    return subprocess.run([writer()] + argv).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
