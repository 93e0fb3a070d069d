"""DeepSeek-V4 as released: hash-routed first layers (tid2eid, token ids
needed) and top-k layers after them (correction bias) in one checkpoint,
served by a router with 2 workers and called through MoeClient."""

import json
import os

import grpc
import numpy as np
import pytest

from conftest import (Cluster, deepseek_v4_layer, hf_family_config, load_golden,
                      within)
from moe_serve import MoeError
from moe_serve import safetensors_lite as st

F32_TOL = (1e-4, 1e-3)  # tests/golden/README.md


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    hash_t, hash_c = load_golden("deepseek_v4_hash.safetensors")
    topk_t, topk_c = load_golden("deepseek_v4_like.safetensors")
    vocab = hash_c["hash_vocab"]
    d = tmp_path_factory.mktemp("deepseek_v4_mixed")
    ckpt = d / "ckpt"
    os.makedirs(ckpt)
    fam, cfg = hf_family_config(topk_c, num_layers=4)
    assert fam == "deepseek_v4"
    cfg.update(num_hash_layers=2, vocab_size=vocab)
    # The family says which layers hash; the generic every-layer key would
    # contradict it (refused).
    cfg.pop("moe_hash_vocab", None)
    # Layer 1 holds the hash case with its table's rows rotated by one:
    # token id v there is token id v + 1 of layer 0.
    rotated = dict(hash_t)
    rotated["gate.tid2eid"] = np.roll(hash_t["gate.tid2eid"], -1, axis=0)
    out = {}
    out.update(deepseek_v4_layer(hash_t, hash_c, 0))
    out.update(deepseek_v4_layer(rotated, hash_c, 1))
    out.update(deepseek_v4_layer(topk_t, topk_c, 2))
    out.update(deepseek_v4_layer(topk_t, topk_c, 3))
    st.save(str(ckpt / "model.safetensors"), out, {"format": "pt"})
    with open(ckpt / "config.json", "w") as f:
        json.dump(cfg, f, indent=2)
    c = Cluster(str(d / "run"), [f"--model={ckpt}"], workers=2)
    yield (hash_t, hash_c), (topk_t, topk_c), c
    c.stop()


def check(y, ref, what):
    excess = within(y, ref, *F32_TOL)
    assert excess <= 0, f"{what}: |y - y_ref| exceeds the tolerance by {excess:g}"


def test_model_info_names_the_hash_layers(mixed):
    (_, hash_c), (_, topk_c), c = mixed
    info = c.client.model_info()
    assert info.family == "deepseek_v4"
    assert list(info.moe_layers) == [0, 1, 2, 3]
    assert list(info.hash_layers) == [0, 1]
    assert info.hash_vocab == hash_c["hash_vocab"]
    assert json.loads(info.layer_config_json)["use_bias"] is True
    assert sorted(info.layer_config_overrides_json) == [0, 1]
    for layer in (0, 1):
        got = json.loads(info.layer_config_overrides_json[layer])
        assert got["hash_vocab"] == hash_c["hash_vocab"] and not got["use_bias"]


def test_each_layer_matches_its_case(mixed):
    (ht, _), (tt, _), c = mixed
    ids = ht["token_ids"]
    y0 = c.client.forward(0, ht["x"], routing=True, token_ids=ids)
    check(y0, ht["y"], "hash layer 0")
    assert y0.routing.expert_ids.tolist() == ht["top_idx"].tolist()
    # Layer 1 reads its own (rotated) table.
    y1 = c.client.forward(1, ht["x"], token_ids=(ids - 1) % ht["gate.tid2eid"].shape[0])
    check(y1, ht["y"], "hash layer 1")
    for layer in (2, 3):
        y = c.client.forward(layer, tt["x"], routing=True)
        check(y, tt["y"], f"top-k layer {layer}")
        for n in range(y.routing.expert_ids.shape[0]):
            assert sorted(y.routing.expert_ids[n]) == sorted(tt["top_idx"][n].tolist())
        # Token ids given to a top-k layer are accepted and change nothing.
        again = c.client.forward(layer, tt["x"], token_ids=np.zeros(len(tt["x"]), np.int64))
        np.testing.assert_array_equal(again, y)


def test_hash_layer_refuses_missing_or_bad_ids(mixed):
    (ht, hash_c), _, c = mixed
    with pytest.raises(MoeError) as e:
        c.client.forward(1, ht["x"])
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "token_ids" in e.value.message and "layer 1" in e.value.message
    bad = ht["token_ids"].copy()
    bad[2] = hash_c["hash_vocab"]
    with pytest.raises(MoeError) as e:
        c.client.forward(0, ht["x"], token_ids=bad)
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "token_ids[2]" in e.value.message
    # The service answers the next request.
    check(c.client.forward(0, ht["x"], token_ids=ht["token_ids"]), ht["y"], "after")
