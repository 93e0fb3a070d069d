"""Fixtures: real moe-router and moe-worker processes.

The binaries come from $MOE_BIN_DIR: a build directory (server/moe-router,
worker/moe-worker, client/moe-loadtest) or a flat folder of them; default
the repository's build/. Every process is killed by its pid on teardown.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, os.path.join(REPO, "client", "python"))

from moe_serve import MoeClient, MoeError  # noqa: E402
from moe_serve import safetensors_lite as st  # noqa: E402

GOLDEN_DIR = os.environ.get("MOE_GOLDEN_DIR", os.path.join(REPO, "tests", "golden"))


def binary(name: str) -> str:
    root = os.environ.get("MOE_BIN_DIR", os.path.join(REPO, "build"))
    sub = {"moe-router": "server", "moe-worker": "worker", "moe-cli": "client",
           "moe-loadtest": "client", "moe-make-checkpoint": "tests"}[name]
    for p in (os.path.join(root, sub, name), os.path.join(root, name)):
        if os.access(p, os.X_OK):
            return p
    pytest.fail(f"{name} not found under MOE_BIN_DIR={root} (as {sub}/{name} or {name})")


class Cluster:
    """A router with `workers` workers (0 = experts in the router)."""

    def __init__(self, tmp: str, router_args, workers: int = 2, worker_args=(),
                 client_kw=None):
        self.tmp = tmp
        self.layer = 0  # the MoE layer a golden fixture wrote its case at
        self.procs = []
        self.logs = []
        os.makedirs(tmp, exist_ok=True)
        port_file = os.path.join(tmp, "port")
        self._spawn("router", [binary("moe-router"), "--listen=127.0.0.1:0",
                               f"--port-file={port_file}", f"--num-workers={workers}",
                               "--threads=1", *router_args])
        self.port = self._wait_port(port_file)
        self.target = f"127.0.0.1:{self.port}"
        for i in range(workers):
            self._spawn(f"worker{i}", [binary("moe-worker"), f"--router={self.target}",
                                       "--threads=1", *worker_args])
        self.client = MoeClient(self.target, timeout=30, **(client_kw or {}))
        self._wait_ready()

    def _spawn(self, name, argv):
        log = open(os.path.join(self.tmp, name + ".log"), "wb")
        self.logs.append(log.name)
        self.procs.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT))
        log.close()

    def log_text(self) -> str:
        out = []
        for p in self.logs:
            with open(p, errors="replace") as f:
                out.append(f"--- {os.path.basename(p)} ---\n{f.read()[-4000:]}")
        return "\n".join(out)

    def _check_alive(self):
        for p in self.procs:
            if p.poll() is not None:
                raise RuntimeError(f"{p.args[0]} exited with {p.returncode}\n"
                                   + self.log_text())

    def _wait_port(self, path, deadline_s=30):
        end = time.time() + deadline_s
        while time.time() < end:
            self._check_alive()
            try:
                with open(path) as f:
                    port = int(f.read().strip() or 0)
                if port > 0:
                    return port
            except (OSError, ValueError):
                pass
            time.sleep(0.02)
        raise RuntimeError("router wrote no port file\n" + self.log_text())

    def _wait_ready(self, deadline_s=60):
        end = time.time() + deadline_s
        while time.time() < end:
            self._check_alive()
            try:
                if self.client.health("moe.v1.MoeService", timeout=2):
                    return
            except MoeError:
                pass
            time.sleep(0.05)
        raise RuntimeError("service not SERVING\n" + self.log_text())

    def stop(self):
        self.client.close()
        for p in reversed(self.procs):
            if p.poll() is None:
                p.kill()  # by pid: Popen.kill signals only this child
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass


@pytest.fixture
def cluster_factory(tmp_path):
    made = []

    def make(router_args, workers=2, worker_args=(), client_kw=None, name="c"):
        c = Cluster(str(tmp_path / f"{name}{len(made)}"), router_args, workers,
                    worker_args, client_kw)
        made.append(c)
        return c

    yield make
    for c in made:
        c.stop()


SYNTHETIC = ["--synthetic", "--hidden=64", "--inter=32", "--experts=8", "--top-k=2",
             "--layers=2", "--seed=3"]


@pytest.fixture(scope="session")
def synthetic(tmp_path_factory):
    """A synthetic 2-layer model (H=64, E=8, k=2) on a router with 2 workers."""
    c = Cluster(str(tmp_path_factory.mktemp("synthetic")), SYNTHETIC, workers=2)
    yield c
    c.stop()


# ---- golden cases as Hugging Face checkpoints --------------------------------

def golden_files():
    return sorted(f for f in os.listdir(GOLDEN_DIR) if f.endswith(".safetensors"))


def load_golden(name):
    tensors, meta = st.load(os.path.join(GOLDEN_DIR, name))
    return tensors, json.loads(meta["config"])


def uses_2026d_pieces(c: dict) -> bool:
    """Whether golden config `c` needs a 2026d piece (golden README)."""
    return (c.get("score_func") == "sparsemixer" or c.get("zero_experts", 0) > 0
            or c.get("router_softcap", 0.0) > 0 or bool(c.get("shared_act"))
            or c.get("output_scale", 1.0) != 1.0 or c.get("output_bias", False)
            or c.get("act") in ("gelu_erf", "swiglustep"))


def _family_of(c: dict) -> str:
    """The Hugging Face family whose config.json expresses golden config `c`."""
    # The late-2026 families, by their activations (golden README 2026b/c).
    if c.get("act") == "relu2" or not c.get("gated", True):
        return "nemotron_h"
    if c.get("act") == "gelu_tanh" or c.get("router_prenorm") or c.get("branch_norms"):
        return "gemma4"
    if c.get("act") == "situ":
        return "kimi_k3"
    if c["score_func"] == "topk_softmax":
        return "gpt_oss"
    if c["score_func"] == "sqrtsoftplus":
        return "deepseek_v4"
    if c.get("norm_min", 0.0) > 0:
        return "ernie4_5_moe"
    sig = c["score_func"] == "sigmoid"
    no_groups = c["n_groups"] == 0
    if (sig and not c["use_bias"] and c["score_before_experts"] and not c["route_norm"]
            and c["shared_inter"] == c["inter"] and not c["shared_gate"] and no_groups
            and c["route_scale"] == 1.0):
        return "llama4_text"
    if (sig and c["use_bias"] and c["route_norm"] and c["route_scale"] == 1.0
            and c["shared_inter"] == 0 and no_groups):
        return "minimax_m2"
    if sig and c["use_bias"] and c["n_groups"] == 1:
        return "glm4_moe"
    if c["shared_gate"] and c["route_norm"] and c["route_scale"] == 1.0 and not sig:
        return "qwen3_next"
    if sig or c["use_bias"] or c["n_groups"] > 0 or c["route_scale"] != 1.0 \
            or (c["shared_inter"] > 0 and not c["shared_gate"]):
        return "deepseek_v3" if sig or c["use_bias"] else "deepseek_v2"
    if c["shared_inter"] > 0:
        return "qwen2_moe"
    return "mixtral" if c["route_norm"] else "qwen3_moe"


def hf_family_config(c: dict, num_layers: int = 1):
    """(model_type, config.json) that the router's loader maps to golden
    config `c`, with every layer an MoE layer."""
    j = {"hidden_size": c["hidden"], "num_hidden_layers": num_layers,
         "num_experts_per_tok": c["top_k"], "vocab_size": 32,
         "num_attention_heads": 4}
    fam = _family_of(c)
    if fam in ("deepseek_v2", "deepseek_v3", "glm4_moe"):
        assert c["shared_inter"] % c["inter"] == 0
        j.update(n_routed_experts=c["experts"], moe_intermediate_size=c["inter"],
                 intermediate_size=2 * c["hidden"],
                 n_shared_experts=c["shared_inter"] // c["inter"],
                 norm_topk_prob=c["route_norm"], routed_scaling_factor=c["route_scale"],
                 first_k_dense_replace=0,
                 n_group=max(c["n_groups"], 1), topk_group=max(c["topk_groups"], 1))
        if fam == "deepseek_v3":
            assert c["group_score"] == "top2_sum"
            j.update(topk_method="noaux_tc", num_nextn_predict_layers=0,
                     moe_layer_freq=1, scoring_func=c["score_func"])
        elif fam == "deepseek_v2":
            assert c["n_groups"] == 0 or c["group_score"] == "max"
            j.update(topk_method="group_limited_greedy" if c["n_groups"] else "greedy",
                     moe_layer_freq=1, scoring_func=c["score_func"])
    elif fam in ("qwen2_moe", "qwen3_next"):
        j.update(num_experts=c["experts"], moe_intermediate_size=c["inter"],
                 intermediate_size=2 * c["hidden"], norm_topk_prob=c["route_norm"],
                 decoder_sparse_step=1, mlp_only_layers=[],
                 shared_expert_intermediate_size=c["shared_inter"])
    elif fam == "mixtral":
        j.update(num_local_experts=c["experts"], intermediate_size=c["inter"])
    elif fam == "minimax_m2":
        j.update(num_local_experts=c["experts"], intermediate_size=c["inter"],
                 scoring_func="sigmoid", use_routing_bias=True)
    elif fam == "gpt_oss":
        j.update(num_local_experts=c["experts"], intermediate_size=c["inter"],
                 swiglu_limit=c.get("act_limit", 7.0))
    elif fam == "ernie4_5_moe":
        del j["num_experts_per_tok"]
        assert c["shared_inter"] % c["inter"] == 0
        j.update(moe_num_experts=c["experts"], moe_k=c["top_k"],
                 moe_intermediate_size=c["inter"],
                 moe_num_shared_experts=c["shared_inter"] // c["inter"],
                 moe_norm_min=c["norm_min"], moe_layer_start_index=0,
                 moe_layer_end_index=-1, moe_layer_interval=1, use_bias=False)
    elif fam == "deepseek_v4":
        assert c["shared_inter"] % c["inter"] == 0
        hash_vocab = c.get("hash_vocab", 0)
        j.update(n_routed_experts=c["experts"], moe_intermediate_size=c["inter"],
                 n_shared_experts=c["shared_inter"] // c["inter"],
                 scoring_func="sqrtsoftplus", routed_scaling_factor=c["route_scale"],
                 swiglu_limit=c.get("act_limit", 10.0),
                 num_hash_layers=num_layers if hash_vocab else 0)
        if hash_vocab:
            j["vocab_size"] = hash_vocab
    elif fam == "nemotron_h":
        j.update(n_routed_experts=c["experts"], moe_intermediate_size=c["inter"],
                 moe_shared_expert_intermediate_size=c["shared_inter"],
                 moe_latent_size=c.get("latent") or None, mlp_hidden_act="relu2",
                 mlp_bias=c.get("latent_bias", False),
                 n_group=max(c["n_groups"], 1), topk_group=max(c["topk_groups"], 1),
                 norm_topk_prob=c["route_norm"], routed_scaling_factor=c["route_scale"],
                 hybrid_override_pattern="E" * num_layers)
    elif fam == "gemma4":
        del j["num_experts_per_tok"]
        j.update(enable_moe_block=True, num_experts=c["experts"], top_k_experts=c["top_k"],
                 moe_intermediate_size=c["inter"], intermediate_size=c["shared_inter"],
                 hidden_activation="gelu_pytorch_tanh", rms_norm_eps=c["norm_eps"])
    elif fam == "kimi_k3":
        del j["num_experts_per_tok"]
        assert c["shared_inter"] % c["inter"] == 0
        j.update(num_experts=c["experts"], num_experts_per_token=c["top_k"],
                 moe_intermediate_size=c["inter"],
                 num_shared_experts=c["shared_inter"] // c["inter"],
                 routed_expert_hidden_size=c.get("latent", 0),
                 latent_moe_use_norm=c.get("latent_norm", False),
                 moe_router_activation_func=c["score_func"],
                 moe_renormalize=c["route_norm"], routed_scaling_factor=c["route_scale"],
                 num_expert_group=max(c["n_groups"], 1), topk_group=max(c["topk_groups"], 1),
                 hidden_act="situ", activation_situ_beta=c.get("act_beta", 1.0),
                 activation_situ_linear_beta=c.get("act_linear_beta", 0.0),
                 rms_norm_eps=c["norm_eps"], first_k_dense_replace=0, moe_layer_freq=1)
    elif fam == "llama4_text":
        j.update(num_local_experts=c["experts"], intermediate_size=c["inter"],
                 intermediate_size_mlp=2 * c["hidden"], interleave_moe_layer_step=1)
    else:
        j.update(num_experts=c["experts"], moe_intermediate_size=c["inter"],
                 intermediate_size=2 * c["hidden"], norm_topk_prob=False,
                 decoder_sparse_step=1, mlp_only_layers=[])
    if c["capacity_factor"] > 0:
        j["moe_capacity_factor"] = c["capacity_factor"]
    if c["routing"] == "expert_choice":
        j["moe_routing"] = "expert_choice"
    if c["score_before_experts"]:
        j["moe_score_before_experts"] = True
    # The 2026 options in the generic form (core/hf_config.cc ReadExtensions).
    if c["score_func"] in ("sqrtsoftplus", "topk_softmax"):
        j["moe_score_func"] = c["score_func"]
    if fam in ("nemotron_h", "gemma4", "kimi_k3"):
        # These families say their options in their own keys; a multimodal
        # one keeps the language model's under text_config.
        if fam == "nemotron_h":
            j["model_type"] = fam
            return fam, j
        j["model_type"] = "gemma4_text" if fam == "gemma4" else "kimi_linear"
        return fam, {"model_type": fam, "text_config": j}
    for key in ("router_bias", "expert_bias", "act", "act_alpha", "act_limit",
                "norm_min", "hash_vocab"):
        if key in c:
            j["moe_" + key] = c[key]
    j["model_type"] = fam
    return fam, j


def make_checkpoint(directory, family="auto", *args):
    """Runs moe-make-checkpoint (the C++ tests' checkpoint writer) for
    `family` into `directory` with its --io file; returns (family, layer,
    io tensors, io config)."""
    io = os.path.join(os.path.dirname(directory), "io.safetensors")
    argv = [binary("moe-make-checkpoint"), family, directory, "--io", io, *args]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"{' '.join(argv)}: {done.stderr}"
    tensors, meta = st.load(io)
    return meta["family"], int(meta["layer"]), tensors, json.loads(meta["config"])


@pytest.fixture(scope="session", params=golden_files())
def served_golden(request, tmp_path_factory):
    """(name, tensors, config, Cluster): a golden case written as an MoE
    layer (Cluster.layer) of a checkpoint and served by a router with 2
    workers. Session scope:
    pytest orders the tests of every module using it by case, so each
    case's cluster starts once for all of them."""
    name = request.param
    tensors, cfg = load_golden(name)
    d = tmp_path_factory.mktemp(name.replace(".safetensors", ""))
    if uses_2026d_pieces(cfg):
        # This file's writer has no family for the 2026d pieces; the C++
        # writer puts the case in the first family that expresses it.
        fam, layer, _, _ = make_checkpoint(str(d / "ckpt"), "auto", "--case",
                                           os.path.join(GOLDEN_DIR, name))
    else:
        fam, layer = write_golden_checkpoint(tensors, cfg, str(d / "ckpt")), 0
    c = Cluster(str(d / "run"), [f"--model={d / 'ckpt'}"], workers=2)
    c.layer = layer  # the MoE layer that holds the case
    info = c.client.model_info()
    assert info.family == fam and layer in list(info.moe_layers)
    assert info.hash_vocab == cfg.get("hash_vocab", 0)
    yield name, tensors, cfg, c
    c.stop()


def deepseek_v4_layer(tensors, c, layer):
    """Golden case (tensors, config c) as DeepSeek-V4 MoE layer `layer`,
    unquantised, under its upstream names (no "model." prefix): the
    correction bias of a top-k layer, the tid2eid table of a hash layer."""
    m = f"layers.{layer}.ffn."
    out = {m + "gate.weight": tensors["gate.weight"]}
    if c["use_bias"]:
        out[m + "gate.bias"] = tensors["gate.expert_bias"]
    if c.get("hash_vocab", 0):
        out[m + "gate.tid2eid"] = tensors["gate.tid2eid"].astype(np.int32)
    for e in range(c["experts"]):
        for role in ("w1", "w3", "w2"):
            out[f"{m}experts.{e}.{role}.weight"] = tensors[f"experts.{role}"][e]
    if c["shared_inter"] > 0:
        for role in ("w1", "w3", "w2"):
            out[f"{m}shared_experts.{role}.weight"] = tensors[f"shared.{role}"]
    return out


def write_golden_checkpoint(tensors, c, directory, layer=0):
    """Writes golden case (tensors, config c) as MoE layer `layer` of a
    checkpoint in the family that maps to it; returns the family."""
    fam, cfg = hf_family_config(c, num_layers=layer + 1)
    os.makedirs(directory, exist_ok=True)
    p = f"model.layers.{layer}."
    out = {}
    if fam == "gpt_oss":
        # The dequantised layout: gate_up_proj [E, H, 2I] with gate j at
        # column 2j and up j at 2j+1 (its bias likewise), down_proj [E, I, H].
        m = p + "mlp."
        e, h, i = c["experts"], c["hidden"], c["inter"]
        gate_up = np.empty((e, h, 2 * i), np.float32)
        gate_up[:, :, 0::2] = tensors["experts.w1"].transpose(0, 2, 1)
        gate_up[:, :, 1::2] = tensors["experts.w3"].transpose(0, 2, 1)
        gu_bias = np.empty((e, 2 * i), np.float32)
        gu_bias[:, 0::2] = tensors["experts.b1"]
        gu_bias[:, 1::2] = tensors["experts.b3"]
        out[m + "router.weight"] = tensors["gate.weight"]
        out[m + "router.bias"] = tensors["gate.bias"]
        out[m + "experts.gate_up_proj"] = gate_up
        out[m + "experts.gate_up_proj_bias"] = gu_bias
        out[m + "experts.down_proj"] = np.ascontiguousarray(
            tensors["experts.w2"].transpose(0, 2, 1))
        out[m + "experts.down_proj_bias"] = tensors["experts.b2"]
    elif fam == "deepseek_v4":
        out.update(deepseek_v4_layer(tensors, c, layer))
    elif fam == "nemotron_h":
        # backbone.layers.{L}.mixer.*: non-gated experts (up / down only),
        # the latent projections with their mlp_bias biases.
        m = f"backbone.layers.{layer}.mixer."
        out[m + "gate.weight"] = tensors["gate.weight"]
        out[m + "gate.e_score_correction_bias"] = tensors["gate.expert_bias"]
        for e in range(c["experts"]):
            out[f"{m}experts.{e}.up_proj.weight"] = tensors["experts.w3"][e]
            out[f"{m}experts.{e}.down_proj.weight"] = tensors["experts.w2"][e]
        if c["shared_inter"] > 0:
            out[m + "shared_experts.up_proj.weight"] = tensors["shared.w3"]
            out[m + "shared_experts.down_proj.weight"] = tensors["shared.w2"]
        if c.get("latent", 0):
            out[m + "fc1_latent_proj.weight"] = tensors["latent.w1"]
            out[m + "fc2_latent_proj.weight"] = tensors["latent.w2"]
            if c.get("latent_bias"):
                out[m + "fc1_latent_proj.bias"] = tensors["latent.b1"]
                out[m + "fc2_latent_proj.bias"] = tensors["latent.b2"]
    elif fam == "gemma4":
        # Experts packed as nn.Linear weights (gate rows over up rows), the
        # dense MLP as the shared expert, the norms around both branches.
        m = f"model.language_model.layers.{layer}."
        out[m + "router.proj.weight"] = tensors["gate.weight"]
        out[m + "router.scale"] = tensors["gate.scale"]
        out[m + "router.per_expert_scale"] = tensors["gate.per_expert_scale"]
        out[m + "experts.gate_up_proj"] = np.ascontiguousarray(np.concatenate(
            [tensors["experts.w1"], tensors["experts.w3"]], axis=1))
        out[m + "experts.down_proj"] = tensors["experts.w2"]
        for role, hf in {"w1": "gate_proj", "w3": "up_proj", "w2": "down_proj"}.items():
            out[f"{m}mlp.{hf}.weight"] = tensors[f"shared.{role}"]
        for key, hf in {"shared.in_norm": "pre_feedforward_layernorm",
                        "shared.out_norm": "post_feedforward_layernorm_1",
                        "experts.in_norm": "pre_feedforward_layernorm_2",
                        "experts.out_norm": "post_feedforward_layernorm_2"}.items():
            out[f"{m}{hf}.weight"] = tensors[key]
    elif fam == "kimi_k3":
        m = f"language_model.model.layers.{layer}.block_sparse_moe."
        out[m + "gate.weight"] = tensors["gate.weight"]
        out[m + "gate.e_score_correction_bias"] = tensors["gate.expert_bias"]
        for e in range(c["experts"]):
            for role in ("w1", "w3", "w2"):
                out[f"{m}experts.{e}.{role}.weight"] = tensors[f"experts.{role}"][e]
        for role, hf in {"w1": "gate_proj", "w3": "up_proj", "w2": "down_proj"}.items():
            out[f"{m}shared_experts.{hf}.weight"] = tensors[f"shared.{role}"]
        out[m + "routed_expert_down_proj.weight"] = tensors["latent.w1"]
        out[m + "routed_expert_up_proj.weight"] = tensors["latent.w2"]
        if c.get("latent_norm"):
            out[m + "routed_expert_norm.weight"] = tensors["latent.norm"]
    elif fam == "nemotron_h":
        j.update(n_routed_experts=c["experts"], moe_intermediate_size=c["inter"],
                 moe_shared_expert_intermediate_size=c["shared_inter"],
                 moe_latent_size=c.get("latent") or None, mlp_hidden_act="relu2",
                 mlp_bias=c.get("latent_bias", False),
                 n_group=max(c["n_groups"], 1), topk_group=max(c["topk_groups"], 1),
                 norm_topk_prob=c["route_norm"], routed_scaling_factor=c["route_scale"],
                 hybrid_override_pattern="E" * num_layers)
    elif fam == "gemma4":
        del j["num_experts_per_tok"]
        j.update(enable_moe_block=True, num_experts=c["experts"], top_k_experts=c["top_k"],
                 moe_intermediate_size=c["inter"], intermediate_size=c["shared_inter"],
                 hidden_activation="gelu_pytorch_tanh", rms_norm_eps=c["norm_eps"])
    elif fam == "kimi_k3":
        del j["num_experts_per_tok"]
        assert c["shared_inter"] % c["inter"] == 0
        j.update(num_experts=c["experts"], num_experts_per_token=c["top_k"],
                 moe_intermediate_size=c["inter"],
                 num_shared_experts=c["shared_inter"] // c["inter"],
                 routed_expert_hidden_size=c.get("latent", 0),
                 latent_moe_use_norm=c.get("latent_norm", False),
                 moe_router_activation_func=c["score_func"],
                 moe_renormalize=c["route_norm"], routed_scaling_factor=c["route_scale"],
                 num_expert_group=max(c["n_groups"], 1), topk_group=max(c["topk_groups"], 1),
                 hidden_act="situ", activation_situ_beta=c.get("act_beta", 1.0),
                 activation_situ_linear_beta=c.get("act_linear_beta", 0.0),
                 rms_norm_eps=c["norm_eps"], first_k_dense_replace=0, moe_layer_freq=1)
    elif fam == "llama4_text":
        # Fused experts for x·W: gate_up_proj [E, H, 2I] (gate, then up),
        # down_proj [E, I, H].
        m = p + "feed_forward."
        out[m + "router.weight"] = tensors["gate.weight"]
        out[m + "experts.gate_up_proj"] = np.ascontiguousarray(np.concatenate(
            [tensors["experts.w1"].transpose(0, 2, 1),
             tensors["experts.w3"].transpose(0, 2, 1)], axis=2))
        out[m + "experts.down_proj"] = np.ascontiguousarray(
            tensors["experts.w2"].transpose(0, 2, 1))
        for role, hf in {"w1": "gate_proj", "w3": "up_proj", "w2": "down_proj"}.items():
            out[f"{m}shared_expert.{hf}.weight"] = tensors[f"shared.{role}"]
    else:
        if fam in ("mixtral", "minimax_m2"):
            m = p + "block_sparse_moe."
            names = {"w1": "w1", "w3": "w3", "w2": "w2"}
        else:
            m = p + "mlp."
            names = {"w1": "gate_proj", "w3": "up_proj", "w2": "down_proj"}
        out[m + "gate.weight"] = tensors["gate.weight"]
        if c["use_bias"]:
            bias = {"minimax_m2": "e_score_correction_bias",
                    "ernie4_5_moe": "moe_statics.e_score_correction_bias"}.get(
                        fam, "gate.e_score_correction_bias")
            out[m + bias] = tensors["gate.expert_bias"]
            if fam == "ernie4_5_moe":
                out[m + bias] = out[m + bias].reshape(1, -1)
        for e in range(c["experts"]):
            for role, hf in names.items():
                out[f"{m}experts.{e}.{hf}.weight"] = tensors[f"experts.{role}"][e]
        if c["shared_inter"] > 0:
            sh = "shared_expert." if fam in ("qwen2_moe", "qwen3_next") else "shared_experts."
            for role, hf in names.items():
                out[f"{m}{sh}{hf}.weight"] = tensors[f"shared.{role}"]
        if c["shared_gate"]:
            out[m + "shared_expert_gate.weight"] = tensors["shared.gate"]
    st.save(os.path.join(directory, "model.safetensors"), out, {"format": "pt"})
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    return fam


# The released 4-bit forms (tests/golden/README.md "Hugging Face families"
# and its MXFP4 paragraph): gpt-oss *_blocks/*_scales, DeepSeek-V4 fp4
# experts (I8 + F8_E8M0 .scale) and fp8 shared expert (F8_E4M3 + F8_E8M0
# .scale per 128 x 128 block).

_E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6],
                 np.float32)


def _e4m3_table():
    """The fp32 value of every E4M3FN code (0x7f/0xff NaN)."""
    v = np.zeros(256, np.float64)
    for code in range(256):
        sign = -1.0 if code & 0x80 else 1.0
        e, m = (code >> 3) & 0xF, code & 7
        v[code] = sign * (m / 8 * 2.0 ** -6 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7))
    v[0x7F] = v[0xFF] = np.nan
    return v.astype(np.float32)


_E4M3 = _e4m3_table()


def quantise_mxfp4(w):
    """Rows [..., in] (in % 32 == 0) by the engine's MXFP4 rule
    (kernels/mxfp4_rule.h: scale byte floor(log2 amax) - 2 + 127, nearest
    E2M1 code): (code pairs [..., in/2] uint8, E8M0 scales [..., in/32]
    uint8). Asserts that the codes decode back to `w` exactly."""
    w = np.asarray(w, np.float32)
    blocks = w.reshape(*w.shape[:-1], w.shape[-1] // 32, 32)
    amax = np.abs(blocks).max(axis=-1)
    _, exp = np.frexp(amax)  # amax = f * 2^exp, f in [0.5, 1)
    s = np.where(amax > 0, np.clip(exp - 1 - 2 + 127, 0, 254), 127).astype(np.uint8)
    factor = np.ldexp(np.float32(1), s.astype(np.int32) - 127).astype(np.float32)
    y = blocks / factor[..., None]
    # Nearest code (the golden weights land on a code: no ties to break).
    codes = np.abs(np.abs(y)[..., None] - _E2M1[:8]).argmin(axis=-1).astype(np.uint8)
    codes |= np.where(np.signbit(y), 8, 0).astype(np.uint8)
    back = _E2M1[codes] * factor[..., None]
    assert np.array_equal(back, blocks), "weights not exactly MXFP4"
    flat = codes.reshape(*w.shape[:-1], w.shape[-1])
    pairs = (flat[..., 0::2] | (flat[..., 1::2] << 4)).astype(np.uint8)
    return pairs, s


def quantise_nvfp4(w):
    """One [rows, in] linear (in % 16 == 0) by the engine's NVFP4 rule
    (kernels/nvfp4_rule.h): a power-of-two global scale at or above
    amax / (6 * 448), per 16 inputs the E4M3 scale nearest amax / 6 /
    global, nearest E2M1 codes: (code pairs [rows, in/2] uint8, E4M3 scales
    [rows, in/16] uint8, global float32). Asserts that the codes decode
    back to `w` exactly."""
    w = np.asarray(w, np.float32)
    amax = float(np.abs(w).max())
    glob = np.float32(2.0 ** np.ceil(np.log2(amax / (6 * 448)))) if amax > 0 else np.float32(1)
    blocks = w.reshape(w.shape[0], w.shape[1] // 16, 16)
    target = np.abs(blocks).max(axis=-1) / np.float32(6) / glob
    positive = np.where(np.isnan(_E4M3[:0x7F]), np.inf, _E4M3[:0x7F])
    s = np.abs(target[..., None] - positive).argmin(axis=-1).astype(np.uint8)
    scale = _E4M3[s] * glob
    y = blocks / np.where(scale > 0, scale, 1)[..., None]
    codes = np.abs(np.abs(y)[..., None] - _E2M1[:8]).argmin(axis=-1).astype(np.uint8)
    codes |= np.where(np.signbit(y), 8, 0).astype(np.uint8)
    assert np.array_equal(_E2M1[codes] * scale[..., None], blocks), \
        "weights not exactly NVFP4"
    flat = codes.reshape(w.shape)
    pairs = (flat[:, 0::2] | (flat[:, 1::2] << 4)).astype(np.uint8)
    return pairs, s, glob


def quantise_fp8_e8m0(w, block=128):
    """[rows, cols] as E4M3 codes with one power-of-two scale per block x
    block (the smallest keeping amax <= 448), scales as E8M0 bytes. Asserts
    exactness."""
    w = np.asarray(w, np.float32)
    rows, cols = w.shape
    codes = np.zeros(w.shape, np.uint8)
    rb, cb = -(-rows // block), -(-cols // block)
    scales = np.zeros((rb, cb), np.uint8)
    finite = np.where(np.isnan(_E4M3), np.inf, _E4M3)
    for i in range(rb):
        for j in range(cb):
            blk = w[i * block:(i + 1) * block, j * block:(j + 1) * block]
            amax = float(np.abs(blk).max())
            k = int(np.ceil(np.log2(amax / 448.0))) if amax > 0 else 0
            scales[i, j] = k + 127
            y = blk / np.float32(2.0 ** k)
            c = np.abs(y[..., None] - finite).argmin(axis=-1).astype(np.uint8)
            assert np.array_equal(_E4M3[c] * np.float32(2.0 ** k), blk), \
                "weights not exactly FP8 with power-of-two scales"
            codes[i * block:(i + 1) * block, j * block:(j + 1) * block] = c
    return codes, scales


def _raw(dtype, arr):
    return (dtype, list(np.shape(arr)), np.ascontiguousarray(arr).tobytes())


def _bf16(x):
    bits = st.f32_to_bf16_bits(np.asarray(x, np.float32))
    assert np.array_equal(st.bf16_bits_to_f32(bits), np.asarray(x, np.float32)), \
        "weights not exactly bf16"
    return _raw("BF16", bits)


def save_raw(path, tensors):
    """safetensors with tensors given as (dtype name, shape, bytes) or
    float32/int arrays."""
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    names = {np.dtype(np.float32): "F32", np.dtype(np.int32): "I32"}
    for name, t in tensors.items():
        if not isinstance(t, tuple):
            t = _raw(names[np.asarray(t).dtype], np.asarray(t))
        dtype, shape, raw = t
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    head = json.dumps(header).encode()
    head += b" " * (-len(head) % 8)
    with open(path, "wb") as f:
        f.write(len(head).to_bytes(8, "little"))
        f.write(head)
        for b in blobs:
            f.write(b)


def _released_latent_layer(tensors, c, directory, layer, fam):
    """The MoE layer of kimi_k3 (compressed-tensors MXFP4 routed experts:
    weight_packed + E8M0 weight_scale) or nemotron_h (NVIDIA ModelOpt NVFP4
    routed experts: code pairs, E4M3 weight_scale per 16, F32 weight_scale_2
    and input_scale) as released: the family's unquantised layer as
    write_golden_checkpoint names it, with the routed experts replaced.
    Returns (tensors by name, quantization_config)."""
    write_golden_checkpoint(tensors, c, directory, layer)
    path = os.path.join(directory, "model.safetensors")
    out, _ = st.load(path)
    os.remove(path)
    if fam == "kimi_k3":
        m = f"language_model.model.layers.{layer}.block_sparse_moe.experts."
        for e in range(c["experts"]):
            for role in ("w1", "w3", "w2"):
                stem = f"{m}{e}.{role}."
                pairs, scales = quantise_mxfp4(out.pop(stem + "weight"))
                out[stem + "weight_packed"] = _raw("U8", pairs)
                out[stem + "weight_scale"] = _raw("U8", scales)
        group = {"format": "mxfp4-pack-quantized",
                 "targets": [r"re:.*block_sparse_moe\.experts\..*"],
                 "weights": {"num_bits": 4, "type": "float", "group_size": 32,
                             "strategy": "group", "scale_dtype": "torch.uint8"}}
        return out, {"quant_method": "compressed-tensors",
                     "format": "mxfp4-pack-quantized",
                     "config_groups": {"group_0": group},
                     "ignore": ["lm_head", "re:.*shared_experts.*", "re:vision_tower.*"]}
    m = f"backbone.layers.{layer}.mixer.experts."
    for e in range(c["experts"]):
        for proj in ("up_proj", "down_proj"):
            stem = f"{m}{e}.{proj}."
            pairs, scales, glob = quantise_nvfp4(out.pop(stem + "weight"))
            out[stem + "weight"] = _raw("U8", pairs)
            out[stem + "weight_scale"] = _raw("F8_E4M3", scales)
            out[stem + "weight_scale_2"] = _raw("F32", np.float32(glob))
            out[stem + "input_scale"] = _raw("F32", np.float32(1))
    return out, {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16,
                 "ignore": ["lm_head", "backbone.layers.*.mixer.gate",
                            "backbone.layers.*.mixer.shared_experts*",
                            "backbone.layers.*.mixer.fc*_latent_proj"]}


def write_released_checkpoint(tensors, c, directory, layer=0):
    """Golden case (tensors, config c) of gpt_oss, deepseek_v4, kimi_k3 or
    nemotron_h as the family's RELEASED checkpoint: quantised experts,
    release dtypes, two shards with an index, attention and embedding
    tensors around it. Returns the family."""
    fam, cfg = hf_family_config(c, num_layers=layer + 1)
    assert fam in ("gpt_oss", "deepseek_v4", "kimi_k3", "nemotron_h"), fam
    os.makedirs(directory, exist_ok=True)
    e, h, i = c["experts"], c["hidden"], c["inter"]
    out = {}
    if fam == "gpt_oss":
        m = f"model.layers.{layer}.mlp."
        cfg["quantization_config"] = {"quant_method": "mxfp4"}
        gate_up = np.empty((e, 2 * i, h), np.float32)  # row 2j gate j, 2j+1 up j
        gate_up[:, 0::2] = tensors["experts.w1"]
        gate_up[:, 1::2] = tensors["experts.w3"]
        gu_bias = np.empty((e, 2 * i), np.float32)
        gu_bias[:, 0::2] = tensors["experts.b1"]
        gu_bias[:, 1::2] = tensors["experts.b3"]
        pairs, scales = quantise_mxfp4(gate_up)
        out[m + "router.weight"] = _bf16(tensors["gate.weight"])
        out[m + "router.bias"] = _bf16(tensors["gate.bias"])
        out[m + "experts.gate_up_proj_blocks"] = _raw("U8", pairs.reshape(e, 2 * i, h // 32, 16))
        out[m + "experts.gate_up_proj_scales"] = _raw("U8", scales)
        out[m + "experts.gate_up_proj_bias"] = _bf16(gu_bias)
        pairs, scales = quantise_mxfp4(tensors["experts.w2"])
        out[m + "experts.down_proj_blocks"] = _raw("U8", pairs.reshape(e, h, i // 32, 16))
        out[m + "experts.down_proj_scales"] = _raw("U8", scales)
        out[m + "experts.down_proj_bias"] = _bf16(tensors["experts.b2"])
        prefix = f"model.layers.{layer}."
    elif fam in ("kimi_k3", "nemotron_h"):
        out, cfg["quantization_config"] = _released_latent_layer(
            tensors, c, directory, layer, fam)
        prefix = (f"backbone.layers.{layer}." if fam == "nemotron_h"
                  else f"language_model.model.layers.{layer}.")
        if fam == "kimi_k3":
            out["vision_tower.patch_embed.proj.weight"] = np.zeros((h, 12), np.float32)
    else:
        m = f"layers.{layer}.ffn."
        cfg["expert_dtype"] = "fp4"
        cfg["quantization_config"] = {"quant_method": "fp8", "fmt": "e4m3",
                                      "scale_fmt": "ue8m0",
                                      "weight_block_size": [128, 128]}
        out[m + "gate.weight"] = _bf16(tensors["gate.weight"])
        if c["use_bias"]:
            out[m + "gate.bias"] = tensors["gate.expert_bias"].astype(np.float32)
        if c.get("hash_vocab", 0):
            out[m + "gate.tid2eid"] = tensors["gate.tid2eid"].astype(np.int32)
        for x in range(e):
            for role in ("w1", "w3", "w2"):
                pairs, scales = quantise_mxfp4(tensors[f"experts.{role}"][x])
                out[f"{m}experts.{x}.{role}.weight"] = _raw("I8", pairs)
                out[f"{m}experts.{x}.{role}.scale"] = _raw("F8_E8M0", scales)
        for role in ("w1", "w3", "w2"):
            codes, scales = quantise_fp8_e8m0(tensors[f"shared.{role}"])
            out[f"{m}shared_experts.{role}.weight"] = _raw("F8_E4M3", codes)
            out[f"{m}shared_experts.{role}.scale"] = _raw("F8_E8M0", scales)
        prefix = f"layers.{layer}."
    # What a real checkpoint has around the MoE layer (ignored by the loader).
    embed = {"nemotron_h": "backbone.embeddings.weight",
             "kimi_k3": "language_model.model.embed_tokens.weight"}.get(
                 fam, "model.embed_tokens.weight")
    out[embed] = np.zeros((32, h), np.float32)
    for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
        out[f"{prefix}self_attn.{proj}.weight"] = np.full((h, h), 0.01, np.float32)
    names = sorted(out)
    weight_map = {}
    shards = [names[0::2], names[1::2]]
    for s, part in enumerate(shards):
        fname = f"model-{s + 1:05d}-of-{len(shards):05d}.safetensors"
        save_raw(os.path.join(directory, fname), {n: out[n] for n in part})
        weight_map.update({n: fname for n in part})
    with open(os.path.join(directory, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": weight_map}, f, indent=2)
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    return fam


def save_checkpoint(directory, tensors, cfg):
    """One unsharded checkpoint: model.safetensors and config.json."""
    os.makedirs(directory, exist_ok=True)
    st.save(os.path.join(directory, "model.safetensors"), tensors, {"format": "pt"})
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)


def assert_serves_golden(client, layer, t, tol, label):
    """y within `tol` (atol, rtol) of the case and the same experts per token
    (their order within a token's k may differ); returns the answer."""
    y = client.forward(layer, t["x"], routing=True)
    excess = within(y, t["y"], *tol)
    assert excess <= 0, f"{label}: |y - y_ref| exceeds the tolerance by {excess:g}"
    ids = y.routing.expert_ids
    for n in range(ids.shape[0]):
        assert sorted(ids[n]) == sorted(t["top_idx"][n].tolist()), f"{label}: token {n}"
    return y


def assert_same_token_routing(routing, t):
    """The experts of every token as golden case `t`'s (their order within
    a token's k may differ) and the same weights."""
    ids = routing.expert_ids
    assert ids.shape == t["top_idx"].shape
    for n in range(ids.shape[0]):
        assert sorted(ids[n]) == sorted(t["top_idx"][n].tolist()), f"token {n}"
    np.testing.assert_allclose(np.sort(routing.weights, axis=1),
                               np.sort(t["top_w"], axis=1), atol=1e-5)


def within(y, ref, atol, rtol):
    """Max of |y - ref| - (atol + rtol |ref|) (<= 0 passes) for messages."""
    y = np.asarray(y, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    excess = np.abs(y - ref) - (atol + rtol * np.abs(ref))
    return float(excess.max()) if excess.size else 0.0
