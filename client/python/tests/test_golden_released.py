"""gpt-oss and DeepSeek-V4 as RELEASED (MXFP4 experts, V4's FP8 shared
expert with E8M0 block scales), Kimi K3 as released (compressed-tensors
MXFP4 routed experts) and Nemotron 3 as released (ModelOpt NVFP4 routed
experts), written from the golden cases whose weights those formats hold
exactly, served by a router with 2 workers with --weight-dtype auto: the
experts stay 4-bit, y meets the fp32 tolerance and routing is exact."""

import numpy as np
import pytest

from conftest import (Cluster, load_golden, quantise_mxfp4, quantise_nvfp4, within,
                      write_released_checkpoint)

F32_TOL = (1e-4, 1e-3)  # tests/golden/README.md
CASES = ["gptoss_like.safetensors", "deepseek_v4_like.safetensors",
         "deepseek_v4_hash.safetensors", "kimi_k3_like.safetensors",
         "nemotron3_nvfp4.safetensors"]


def four_bit_bytes(fmt, rows, cols):
    """Bytes a 4-bit [rows, cols] weight needs from its shape: an E2M1 code
    a weight, an 8-bit scale per block of a row, and for NVFP4 the tensor's
    fp32 global scale, which the CPU kernels keep once per output row. At
    release widths that is 4.25 (MXFP4) or 4.5 (NVFP4) bits a weight."""
    nv = fmt == "nvfp4"
    block = 16 if nv else 32
    return rows * (cols // 2 + -(-cols // block) + (4 if nv else 0))


@pytest.fixture(scope="module", params=CASES)
def released(request, tmp_path_factory):
    name = request.param
    tensors, cfg = load_golden(name)
    d = tmp_path_factory.mktemp(name.replace(".safetensors", "") + "_released")
    fam = write_released_checkpoint(tensors, cfg, str(d / "ckpt"))
    c = Cluster(str(d / "run"), [f"--model={d / 'ckpt'}", "--weight-dtype=auto"],
                workers=2)
    yield name, fam, tensors, cfg, c
    c.stop()


def test_released_checkpoint_serves_four_bit_at_fp32_tolerance(released):
    name, fam, t, cfg, c = released
    info = c.client.model_info()
    assert info.family == fam and list(info.moe_layers) == [0]
    fmt = "nvfp4" if fam == "nemotron_h" else "mxfp4"
    assert info.weight_dtype == fmt
    # The bytes the routed expert's shapes need (LatentMoE experts are
    # latent wide; non-gated ones have no gate), padding only adding.
    width, i = cfg.get("latent") or cfg["hidden"], cfg["inter"]
    gated = cfg.get("gated", True)
    need = (2 if gated else 1) * four_bit_bytes(fmt, i, width) + four_bit_bytes(fmt, width, i)
    assert need <= info.expert_weight_bytes < 1.05 * need, (info.expert_weight_bytes, need)
    y = c.client.forward(0, t["x"], routing=True, token_ids=t.get("token_ids"))
    excess = within(y, t["y"], *F32_TOL)
    assert excess <= 0, f"{name}: |y - y_ref| exceeds the fp32 tolerance by {excess:g}"
    ids = y.routing.expert_ids
    for n in range(ids.shape[0]):  # order within a token's k may differ
        assert sorted(ids[n]) == sorted(t["top_idx"][n].tolist()), f"token {n}"


@pytest.mark.parametrize("case,quantise", [("gptoss_like.safetensors", quantise_mxfp4),
                                           ("nemotron3_nvfp4.safetensors", quantise_nvfp4)])
def test_quantiser_refuses_weights_off_the_grid(case, quantise):
    t, _ = load_golden(case)
    w = t["experts.w3"][0].copy()
    quantise(w)  # exact
    w[0, 0] += 1e-3
    with pytest.raises(AssertionError):
        quantise(w)
