"""gpt-oss and DeepSeek-V4 as RELEASED (MXFP4 experts, V4's FP8 shared
expert with E8M0 block scales), written from the golden cases whose weights
those formats hold exactly, served by a router with 2 workers with
--weight-dtype auto: the experts stay MXFP4, y meets the fp32 tolerance and
routing is exact."""

import numpy as np
import pytest

from conftest import Cluster, load_golden, quantise_mxfp4, within, write_released_checkpoint

F32_TOL = (1e-4, 1e-3)  # tests/golden/README.md
CASES = ["gptoss_like.safetensors", "deepseek_v4_like.safetensors",
         "deepseek_v4_hash.safetensors"]


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


def test_released_checkpoint_serves_mxfp4_at_fp32_tolerance(released):
    name, fam, t, cfg, c = released
    info = c.client.model_info()
    assert info.family == fam and list(info.moe_layers) == [0]
    assert info.weight_dtype == "mxfp4"
    # 4.25 bits a routed weight (+ fp32 biases) against bf16's 16.
    e, h, i = cfg["experts"], cfg["hidden"], cfg["inter"]
    bf16_bytes = 2 * 3 * h * i
    assert 0.2 < info.expert_weight_bytes / bf16_bytes < 0.35, info.expert_weight_bytes
    y = c.client.forward(0, t["x"], routing=True, token_ids=t.get("token_ids"))
    excess = within(y, t["y"], *F32_TOL)
    assert excess <= 0, f"{name}: |y - y_ref| exceeds the fp32 tolerance by {excess:g}"
    ids = y.routing.expert_ids
    for n in range(ids.shape[0]):  # order within a token's k may differ
        assert sorted(ids[n]) == sorted(t["top_idx"][n].tolist()), f"token {n}"


def test_quantiser_refuses_weights_off_the_grid():
    t, _ = load_golden("gptoss_like.safetensors")
    w = t["experts.w1"][0].copy()
    quantise_mxfp4(w)  # exact
    w[0, 0] += 1e-3
    with pytest.raises(AssertionError):
        quantise_mxfp4(w)
