"""ERNIE-4.5-VL through MoeClient: a checkpoint in the release layout
(moe-make-checkpoint: its text experts hold a golden case, its vision
experts filler), served by a router with 2 workers. Text rows answer the
case; a request mixing text and image rows answers each row as a request of
its type alone does; the vision experts are reported as E + e; a request
without token_types is refused by name and the next one answered."""

import grpc
import numpy as np
import pytest

from conftest import Cluster, make_checkpoint, within
from moe_serve import MoeError

F32_TOL = (1e-4, 1e-3)  # tests/golden/README.md


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    d = tmp_path_factory.mktemp("ernie_vl")
    fam, layer, t, cfg = make_checkpoint(str(d / "ckpt"), "ernie4_5_moe_vl")
    assert fam == "ernie4_5_moe_vl"
    c = Cluster(str(d / "run"), [f"--model={d / 'ckpt'}"], workers=2)
    yield layer, t, cfg, c
    c.stop()


def test_model_info_lists_the_vision_layers(served):
    layer, _, cfg, c = served
    info = c.client.model_info()
    assert layer in info.vision_layers
    vision = info.vision_layers[layer]
    assert vision not in list(info.moe_layers)
    assert vision in info.layer_config_overrides_json


def test_rows_of_each_type_answer_as_alone(served):
    layer, t, cfg, c = served
    x = t["x"]
    n, E = len(x), cfg["experts"]
    text = c.client.forward(layer, x, routing=True, token_types=[0] * n)
    assert within(text, t["y"], *F32_TOL) <= 0
    image = c.client.forward(layer, x, routing=True, token_types=np.ones(n, np.int32))
    assert (image.routing.expert_ids >= E).all()
    assert (image.routing.expert_ids < 2 * E).all()
    types = np.arange(n) % 3  # text, image, video, ...
    mixed = c.client.forward(layer, x, routing=True, token_types=types)
    for r in range(n):
        alone = text if types[r] == 0 else image
        np.testing.assert_allclose(mixed[r], alone[r], rtol=1e-5, atol=1e-6)
        assert sorted(mixed.routing.expert_ids[r]) == sorted(alone.routing.expert_ids[r])


def test_a_request_without_types_is_refused_by_name(served):
    layer, t, _, c = served
    with pytest.raises(MoeError) as e:
        c.client.forward(layer, t["x"])
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "token_types" in e.value.message and f"layer {layer}" in e.value.message
    y = c.client.forward(layer, t["x"], token_types=[0] * len(t["x"]))
    assert within(y, t["y"], *F32_TOL) <= 0
