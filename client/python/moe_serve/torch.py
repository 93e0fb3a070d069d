"""PyTorch integration: MoE blocks computed by the service.

    from moe_serve import MoeClient
    from moe_serve.torch import replace_moe_blocks
    replace_moe_blocks(model, MoeClient("127.0.0.1:50051"))

Inference only: the remote output carries no gradient.
"""

from __future__ import annotations

import re
from typing import Iterator, List, Optional

import torch
from torch import nn

from ._client import MoeClient

# Hugging Face blocks that return (hidden_states, router_logits).
_TUPLE_BLOCKS = {"MixtralSparseMoeBlock", "Qwen2MoeSparseMoeBlock",
                 "Qwen3MoeSparseMoeBlock", "OlmoeSparseMoeBlock"}
# A decoder layer's MoE block: `...layers.{L}.block_sparse_moe` (Mixtral) or
# `...layers.{L}.mlp` (Qwen2/3-MoE, OLMoE, DeepSeek) with a gate and experts.
_NAME = re.compile(r"(?:^|\.)layers\.(\d+)\.(block_sparse_moe|mlp)$")


class RemoteMoE(nn.Module):
    """forward(hidden_states [..., H]) -> the service's MoE layer `layer`.

    `dtype` is the dtype on the wire (default: the input's). With
    `return_router_logits` (Hugging Face blocks), returns (y, router_logits),
    the logits computed locally by `gate` when given, else None. A
    hash-routed layer needs the rows' token ids: pass `token_ids` (shaped
    like hidden_states' leading dims) to forward, or set `self.token_ids`
    before a block is called the Hugging Face way. A layer with vision
    experts (ERNIE-4.5-VL) needs each row's type (0 text, 1 image, 2 video,
    the model's moe_mm_token_type_ids): pass `token_types` to forward, or
    set `self.token_types`.

    Caller routing:
    - `gate` (an nn.Module such as the block's nn.Linear, or an [E, H]
      weight tensor): the gate runs here, on the attention side, and its
      logits are sent as `router_logits`, so the service scores them instead
      of computing x·Wᵀ again. `send_gate_logits=False` keeps the gate for
      the returned logits only (a hash-routed layer refuses logits).
    - `routing` (forward's argument, or `self.routing` for every call): an
      (expert_ids, weights) pair [rows, k] or a `moe_serve.Routing` sent as
      the routing, replacing the service's gate.
    - `self.recorded`: a list to which each call appends the routing the
      service used; `self.replay`: an iterator whose next routing each call
      sends. Together: record a run, replay it bit for bit.
    - `shared`: "add" (default), "separate" (the answer without the shared
      experts; theirs is `self.last_shared_output`) or "skip".
    """

    def __init__(self, client: MoeClient, layer: int, *, dtype=None,
                 return_router_logits: bool = False, gate=None,
                 send_gate_logits: bool = True, shared: str = "add"):
        super().__init__()
        self.client = client
        self.layer = int(layer)
        self.dtype = dtype
        self.return_router_logits = return_router_logits
        self.gate = gate
        self.send_gate_logits = send_gate_logits
        self.shared = shared
        self.token_ids = None
        self.token_types = None
        self.routing = None
        self.recorded: Optional[list] = None
        self.replay: Optional[Iterator] = None
        self.last_shared_output = None

    def gate_logits(self, x: torch.Tensor) -> Optional[torch.Tensor]:
        """The gate's logits [rows, E] for x [rows, H], or None without one."""
        if self.gate is None:
            return None
        if isinstance(self.gate, torch.Tensor):
            return x.float() @ self.gate.float().t()
        return self.gate(x)

    def forward(self, hidden_states: torch.Tensor, token_ids=None, routing=None,
                token_types=None):
        shape = hidden_states.shape
        x = hidden_states.reshape(-1, shape[-1])
        ids = token_ids if token_ids is not None else self.token_ids
        types = token_types if token_types is not None else self.token_types
        if routing is None:
            routing = next(self.replay) if self.replay is not None else self.routing
        logits = self.gate_logits(x)
        send = (logits is not None and self.send_gate_logits and routing is None)
        y = self.client.forward(
            self.layer, x, dtype=self.dtype, token_ids=ids, token_types=types,
            routing=routing if routing is not None else False,
            return_routing=self.recorded is not None,
            router_logits=logits.detach().float() if send else None,
            shared=self.shared)
        if self.recorded is not None:
            self.recorded.append(y.routing)
        self.last_shared_output = getattr(y, "shared_output", None)
        y = y.reshape(shape)
        if not self.return_router_logits:
            return y
        return y, logits

    def extra_repr(self) -> str:
        return f"layer={self.layer}, target={self.client.target!r}"


def find_moe_blocks(model: nn.Module):
    """[(qualified name, layer index, module)] of the model's MoE blocks."""
    found = []
    for name, module in model.named_modules():
        m = _NAME.search(name)
        if m and hasattr(module, "gate") and hasattr(module, "experts"):
            found.append((name, int(m.group(1)), module))
    return found


def replace_moe_blocks(model: nn.Module, client: MoeClient, *, dtype=None,
                       keep_gate: bool = True, local_gate: bool = False,
                       shared: str = "add") -> List[int]:
    """Swaps every MoE block of `model` (Mixtral, Qwen2/3-MoE, OLMoE,
    DeepSeek layouts, Hugging Face's or examples/remote_model's) for a
    RemoteMoE of the same layer; returns the layers swapped. Checks the
    service's hidden size and MoE layers against the model first.

    A block that returns its router logits (Hugging Face's) keeps its gate
    when `keep_gate`; `local_gate` keeps every block's. A kept gate runs
    locally and its logits are sent as router_logits (not to a hash-routed
    layer, which routes by token id), so the service does not compute them
    again. `shared` is every RemoteMoE's shared mode."""
    info = client.model_info()
    blocks = find_moe_blocks(model)
    if not blocks:
        raise ValueError("replace_moe_blocks: the model has no MoE block "
                         "(layers.{L}.block_sparse_moe or layers.{L}.mlp with gate and experts)")
    served = set(info.moe_layers)
    for name, layer, block in blocks:
        if layer not in served:
            raise ValueError(f"replace_moe_blocks: {name} is layer {layer}, which the "
                             f"service does not serve (MoE layers {sorted(served)})")
        w = getattr(block.gate, "weight", None)
        if w is not None and w.shape[-1] != info.hidden:
            raise ValueError(f"replace_moe_blocks: {name} has hidden size {w.shape[-1]}, "
                             f"the service {info.hidden}")
    hash_layers = set(info.hash_layers)
    for name, layer, block in blocks:
        tuple_out = (type(block).__name__ in _TUPLE_BLOCKS
                     or bool(getattr(block, "returns_router_logits", False)))
        kept = local_gate or (tuple_out and keep_gate)
        remote = RemoteMoE(client, layer, dtype=dtype, return_router_logits=tuple_out,
                           gate=block.gate if kept else None,
                           send_gate_logits=layer not in hash_layers, shared=shared)
        parent_name, _, attr = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, attr, remote)
    return [layer for _, layer, _ in blocks]


def remote_blocks(model: nn.Module) -> List[RemoteMoE]:
    """The model's RemoteMoE blocks, in module order."""
    return [m for m in model.modules() if isinstance(m, RemoteMoE)]
