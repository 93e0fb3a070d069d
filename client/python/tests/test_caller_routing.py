"""The caller-routing API through MoeClient: every golden case's
own routing replayed, its gate logits sent, the service's logits returned,
its shared experts apart and skipped; and bad routing refused with
INVALID_ARGUMENT, the next call still served."""

import asyncio

import grpc
import numpy as np
import pytest
import torch

from conftest import within
from moe_serve import AsyncMoeClient, MoeError

F32_TOL = (1e-4, 1e-3)  # tests/golden/README.md


def check(y, ref, what):
    excess = within(y, ref, *F32_TOL)
    assert excess <= 0, f"{what}: |y - y_ref| exceeds the tolerance by {excess:g}"


def gate_logits(t, cfg):
    """x·gate.weightᵀ (+ gate.bias with router_bias), the router's input
    first normalised where the case has router_prenorm (golden README)."""
    x = t["x"].astype(np.float64)
    if cfg.get("router_prenorm"):
        eps = cfg.get("norm_eps", 1e-6)
        x = x / np.sqrt(np.mean(x * x, axis=1, keepdims=True) + eps)
        x = x * t["gate.scale"] / np.sqrt(x.shape[1])
    logits = x @ t["gate.weight"].astype(np.float64).T
    if cfg.get("router_bias"):
        logits = logits + t["gate.bias"]
    return logits.astype(np.float32)


def token_choice(cfg):
    return cfg["routing"] == "token_choice"


def router_rows(cfg):
    """The gate's rows: E real experts and Z zero-computation ones."""
    return cfg["experts"] + cfg.get("zero_experts", 0)


def hash_routed(cfg):
    return cfg.get("hash_vocab", 0) > 0


def test_routing_replay(served_golden):
    name, t, cfg, c = served_golden
    if not token_choice(cfg):
        pytest.skip("expert-choice layer: the service takes routing for token choice only")
    sent = (t["top_idx"], t["top_w"])
    y = c.client.forward(c.layer, t["x"], routing=sent, return_routing=True,
                         token_ids=t.get("token_ids"))
    check(y, t["y"], name + " (routing replayed)")
    np.testing.assert_array_equal(y.routing.expert_ids, t["top_idx"])
    np.testing.assert_array_equal(y.routing.weights, t["top_w"].astype(np.float32))
    # A replayed answer's own routing, as torch tensors, gives it again.
    yt = c.client.forward(c.layer, torch.from_numpy(t["x"]),
                          routing=(torch.from_numpy(y.routing.expert_ids),
                                   torch.from_numpy(y.routing.weights)),
                          token_ids=t.get("token_ids"))
    assert isinstance(yt, torch.Tensor) and yt.routing is None
    np.testing.assert_array_equal(yt.numpy(), y)
    # Routing other than the gate's is dispatched as sent: every id moved to
    # the next expert is answered with those ids and another y.
    # (A zero-computation expert, ids E..E+Z-1, is a router row too.)
    moved = (t["top_idx"] + 1) % router_rows(cfg)
    ym = c.client.forward(c.layer, t["x"], routing=(moved, t["top_w"]), return_routing=True,
                          token_ids=t.get("token_ids"))
    np.testing.assert_array_equal(ym.routing.expert_ids, moved)
    assert within(ym, t["y"], *F32_TOL) > 0, "moving every slot left y as it was"


def test_router_logits_sent(served_golden):
    name, t, cfg, c = served_golden
    if hash_routed(cfg):
        pytest.skip("hash-routed layer: it routes by token id, the service refuses logits")
    logits = gate_logits(t, cfg)
    y = c.client.forward(c.layer, t["x"], router_logits=logits, return_router_logits=True,
                         token_ids=t.get("token_ids"))
    check(y, t["y"], name + " (router_logits sent)")
    # Returned as sent.
    np.testing.assert_array_equal(y.router_logits, logits)


def test_router_logits_returned(served_golden):
    name, t, cfg, c = served_golden
    y = c.client.forward(c.layer, torch.from_numpy(t["x"]), return_router_logits=True,
                         token_ids=t.get("token_ids"))
    check(y.numpy(), t["y"], name)
    logits = y.router_logits
    assert isinstance(logits, torch.Tensor) and logits.dtype == torch.float32
    assert tuple(logits.shape) == (t["x"].shape[0], router_rows(cfg))
    check(logits.numpy(), gate_logits(t, cfg), name + " (router_logits returned)")


def test_shared_separate_and_skip(served_golden):
    name, t, cfg, c = served_golden
    ids = t.get("token_ids")
    apart = c.client.forward(c.layer, t["x"], shared="separate", token_ids=ids)
    assert apart.shared_output.shape == t["y"].shape
    check(apart + apart.shared_output, t["y"], name + " (output + shared_output)")
    has_shared = cfg["shared_inter"] > 0
    assert has_shared == bool(np.any(apart.shared_output != 0)), \
        "shared_output is zeros exactly when the layer has no shared experts"
    skipped = c.client.forward(c.layer, t["x"], shared="skip", token_ids=ids)
    assert skipped.shared_output is None
    # y - shared: the routed part, the same bits as "separate"'s.
    np.testing.assert_array_equal(skipped, apart)
    check(skipped, t["y"] - apart.shared_output, name + " (skip = y - shared)")


# ---- bad input: refused, and the service goes on -----------------------------

X = np.random.default_rng(4).standard_normal((3, 64)).astype(np.float32)
IDS = np.array([[0, 1], [2, 3], [4, 5]])
W = np.full((3, 2), 0.5, np.float32)


def _nan_weight():
    w = W.copy()
    w[1, 0] = np.nan
    return {"routing": (IDS, w)}


BAD = {
    "wrong k": ({"routing": (IDS[:, :1], W[:, :1])}, "routing.slots: wrong k"),
    "id out of range": ({"routing": (np.array([[0, 1], [2, 8], [4, 5]]), W)}, "is outside [0, 8)"),
    "repeated id": ({"routing": (np.array([[0, 1], [3, 3], [4, 5]]), W)}, "must be distinct"),
    "NaN weight": (_nan_weight(), "routing.weights[2] (row 1, slot 0): not finite"),
    "logits of the wrong width": ({"router_logits": np.zeros((3, 7), np.float32)},
                                  "router_logits.shape[1]: wrong width 7"),
    "routing and logits": ({"routing": (IDS, W),
                            "router_logits": np.zeros((3, 8), np.float32)}, "send one or neither"),
}


@pytest.mark.parametrize("what", sorted(BAD))
def test_bad_input_refused_then_served(synthetic, what):
    kw, field = BAD[what]
    with pytest.raises(MoeError) as e:
        synthetic.client.forward(0, X, **kw)
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT, e.value
    assert field in e.value.message, e.value.message
    y = synthetic.client.forward(0, X, routing=(IDS, W), return_routing=True)
    np.testing.assert_array_equal(y.routing.expert_ids, IDS)


def test_shapes_the_message_would_hide_are_refused_here(synthetic):
    with pytest.raises(ValueError, match="expert_ids and weights"):
        synthetic.client.forward(0, X, routing=(IDS, W[:, :1]))
    with pytest.raises(ValueError, match="expert_ids and weights"):
        synthetic.client.forward(0, X, routing=(IDS.reshape(-1), W.reshape(-1)))
    with pytest.raises(ValueError, match="shared="):
        synthetic.client.forward(0, X, shared="both")


def test_bool_routing_keeps_its_meaning(synthetic):
    y = synthetic.client.forward(0, X, routing=True)
    assert y.routing.expert_ids.shape == (3, 2)
    assert synthetic.client.forward(0, X).routing is None
    # The service's routing sent back gives the same answer.
    again = synthetic.client.forward(0, X, routing=y.routing)
    np.testing.assert_array_equal(again, y)


def test_forward_many_and_async(synthetic):
    base = synthetic.client.forward(0, X, routing=True, return_router_logits=True)
    items = [{"layer": 0, "x": X, "routing": base.routing, "return_routing": True},
             {"layer": 0, "x": X, "router_logits": base.router_logits},
             {"layer": 0, "x": X, "routing": (IDS[:, :1], W[:, :1])},
             {"layer": 0, "x": X, "shared": "separate"}]
    got = synthetic.client.forward_many(items, return_exceptions=True)
    np.testing.assert_array_equal(got[0], base)
    np.testing.assert_array_equal(got[0].routing.expert_ids, base.routing.expert_ids)
    np.testing.assert_array_equal(got[1], base)
    assert isinstance(got[2], MoeError) and got[2].code == grpc.StatusCode.INVALID_ARGUMENT
    np.testing.assert_array_equal(got[3] + got[3].shared_output, base)

    async def run():
        async with AsyncMoeClient(synthetic.target, timeout=30) as client:
            y = await client.forward(0, X, routing=base.routing,
                                     return_router_logits=True)
            many = await client.forward_many(items[:2])
            return y, many

    y, many = asyncio.run(run())
    np.testing.assert_array_equal(y, base)
    np.testing.assert_array_equal(many[1], base)
