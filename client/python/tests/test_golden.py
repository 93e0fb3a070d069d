"""Every golden case, written as a Hugging Face checkpoint and served by a
router with 2 workers, through MoeClient: NumPy and torch, fp32 and bf16."""

import numpy as np
import pytest
import torch

from conftest import assert_same_token_routing, within
from moe_serve.safetensors_lite import bf16_bits_to_f32, f32_to_bf16_bits

F32_TOL = (1e-4, 1e-3)   # tests/golden/README.md
BF16_TOL = (5e-2, 2e-2)


@pytest.fixture
def case(served_golden):
    return served_golden


def check(y, ref, tol, what):
    excess = within(y, ref, *tol)
    assert excess <= 0, f"{what}: |y - y_ref| exceeds the tolerance by {excess:g}"


def test_numpy_f32_with_routing(case):
    name, t, cfg, c = case
    y = c.client.forward(c.layer, t["x"], routing=True, timing=True, token_ids=t.get("token_ids"))
    assert isinstance(y, np.ndarray) and y.dtype == np.float32 and y.shape == t["y"].shape
    check(y, t["y"], F32_TOL, name)
    assert y.timing.total_us > 0 and y.timing.batch_tokens >= t["x"].shape[0]
    if cfg["routing"] == "token_choice":
        assert_same_token_routing(y.routing, t)
    else:
        assert y.routing.expert_ids.shape[0] == t["x"].shape[0]


def test_torch_f32(case):
    name, t, _, c = case
    x = torch.from_numpy(t["x"])
    y = c.client.forward(c.layer, x, token_ids=t.get("token_ids"))
    assert isinstance(y, torch.Tensor) and y.dtype == torch.float32
    check(y.numpy(), t["y"], F32_TOL, name)


def same_routing(got, t, cfg):
    if cfg["routing"] != "token_choice":
        return False
    return all(sorted(got.expert_ids[n]) == sorted(t["top_idx"][n].tolist())
               for n in range(got.expert_ids.shape[0]))


def check_bf16(y32_of_rounded, y_bf16_as_f32, routing, t, cfg, name):
    # bf16 on the wire: the service answers the bf16-rounded input in fp32 and
    # rounds the output once, so the answer is the fp32 answer to the rounded
    # input within one bf16 rounding (2^-8 relative).
    check(y_bf16_as_f32, y32_of_rounded, (1e-6, 2.0 ** -8), name + " (bf16 vs fp32)")
    # The 2026 cases (their config lists "act") reach |y| ~ 100 (expert
    # biases, clamped activations): rounding x to bf16 alone moves y by up
    # to ~0.4 there (measured: gptoss_like 0.11 at |y| <= 40,
    # deepseek_v4_hash 0.38 at |y| <= 114), past the golden tolerance,
    # which is for bf16 weights. The check above is the exact one for them.
    if "act" in cfg:
        return
    # Rounding x may flip a near-tie in routing; where it does not, the
    # golden bf16 tolerance holds against the fp32 reference too.
    if same_routing(routing, t, cfg):
        check(y_bf16_as_f32, t["y"], BF16_TOL, name + " (bf16 vs golden)")
    elif cfg["routing"] == "token_choice" and cfg["capacity_factor"] == 0:
        # Tokens are independent: compare those whose experts did not change.
        keep = [n for n in range(routing.expert_ids.shape[0])
                if sorted(routing.expert_ids[n]) == sorted(t["top_idx"][n].tolist())]
        assert len(keep) >= routing.expert_ids.shape[0] // 2, "most tokens keep their experts"
        check(y_bf16_as_f32[keep], t["y"][keep], BF16_TOL, name + " (bf16 vs golden)")


def test_torch_bf16(case):
    name, t, cfg, c = case
    xb = torch.from_numpy(t["x"]).to(torch.bfloat16)
    ref = c.client.forward(c.layer, xb.float(), routing=True, token_ids=t.get("token_ids"))
    y = c.client.forward(c.layer, xb, token_ids=t.get("token_ids"))
    assert isinstance(y, torch.Tensor) and y.dtype == torch.bfloat16
    assert y.shape == xb.shape
    check_bf16(ref.numpy(), y.float().numpy(), ref.routing, t, cfg, name)


def test_numpy_bf16_bits(case):
    name, t, cfg, c = case
    bits = f32_to_bf16_bits(t["x"])
    ref = c.client.forward(c.layer, bf16_bits_to_f32(bits), routing=True, token_ids=t.get("token_ids"))
    y = c.client.forward(c.layer, bits, dtype="bf16", token_ids=t.get("token_ids"))
    assert y.dtype == np.uint16 and y.shape == t["y"].shape
    check_bf16(ref, bf16_bits_to_f32(y), ref.routing, t, cfg, name)
    # A float32 array sent as bf16 comes back as float32.
    y32 = c.client.forward(c.layer, t["x"], dtype="bf16", token_ids=t.get("token_ids"))
    assert y32.dtype == np.float32
    np.testing.assert_array_equal(y32, bf16_bits_to_f32(y))
    # torch and NumPy bf16 agree bit for bit.
    yt = c.client.forward(c.layer, torch.from_numpy(t["x"]).to(torch.bfloat16), token_ids=t.get("token_ids"))
    np.testing.assert_array_equal(yt.view(torch.int16).numpy().view(np.uint16), y)
