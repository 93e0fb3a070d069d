"""Every family the loader knows, in every form its releases come in, as a
user gets it: a checkpoint written by moe-make-checkpoint (the C++ tests'
writer: the family's config keys, tensor names, wrapper prefix, shards and
the tensors that must be ignored), served by a router with 2 workers and
checked through MoeClient against the case the writer used. y meets the
fp32 tolerance and the routing is exact."""

import subprocess

import pytest

from conftest import Cluster, assert_same_token_routing, binary, make_checkpoint, within

F32_TOL = (1e-4, 1e-3)  # tests/golden/README.md


def families():
    """`moe-make-checkpoint --list`: a family per line, then its forms."""
    done = subprocess.run([binary("moe-make-checkpoint"), "--list"],
                          capture_output=True, text=True, timeout=60, check=True)
    return [line.split() for line in done.stdout.splitlines() if line.strip()]


@pytest.mark.parametrize("family", families(), ids=" ".join)
def test_family_serves_its_case(family, tmp_path):
    name, *form = family
    fam, layer, t, cfg = make_checkpoint(str(tmp_path / "ckpt"), name, *form)
    assert fam == name
    c = Cluster(str(tmp_path / "run"), [f"--model={tmp_path / 'ckpt'}"], workers=2)
    try:
        info = c.client.model_info()
        assert info.family == name and layer in list(info.moe_layers)
        # A layer with vision experts (ERNIE-4.5-VL) needs each row's type:
        # the case is text.
        types = [0] * len(t["x"]) if layer in info.vision_layers else None
        y = c.client.forward(layer, t["x"], routing=True, token_ids=t.get("token_ids"),
                             token_types=types)
        excess = within(y, t["y"], *F32_TOL)
        assert excess <= 0, f"{name}: |y - y_ref| exceeds the tolerance by {excess:g}"
        if cfg["routing"] == "token_choice":
            assert_same_token_routing(y.routing, t)
    finally:
        c.stop()
