"""A compact PyTorch MoE decoder (RMSNorm, rotary attention, MoE MLP) for the
Mixtral and Qwen3-MoE families, loading a Hugging Face checkpoint directory
with the pure-Python safetensors reader of moe_serve (no safetensors package).

Module names follow Hugging Face's, so the checkpoint's tensor names are the
parameter names and moe_serve.torch.replace_moe_blocks finds the MoE blocks
(`model.layers.{L}.block_sparse_moe` for Mixtral, `model.layers.{L}.mlp` for
Qwen3-MoE).
"""

from __future__ import annotations

import json
import os
import sys

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "client", "python"))
from moe_serve.safetensors_lite import load_checkpoint  # noqa: E402

FAMILIES = ("mixtral", "qwen3_moe")


class RMSNorm(nn.Module):
    def __init__(self, n, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x):
        var = x.float().pow(2).mean(-1, keepdim=True)
        return self.weight * (x.float() * torch.rsqrt(var + self.eps)).to(x.dtype)


def rotate_half(x):
    a, b = x.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        H = cfg["hidden_size"]
        self.heads = cfg["num_attention_heads"]
        self.kv_heads = cfg.get("num_key_value_heads", self.heads)
        self.head_dim = cfg.get("head_dim") or H // self.heads
        self.theta = cfg.get("rope_theta", 10000.0)
        self.q_proj = nn.Linear(H, self.heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(H, self.kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(H, self.kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.heads * self.head_dim, H, bias=False)
        self.qk_norm = cfg["model_type"] == "qwen3_moe"
        if self.qk_norm:  # Qwen3: RMSNorm over each head before the rotation
            self.q_norm = RMSNorm(self.head_dim, cfg.get("rms_norm_eps", 1e-6))
            self.k_norm = RMSNorm(self.head_dim, cfg.get("rms_norm_eps", 1e-6))

    def forward(self, x):  # x [B, T, H]
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.heads, self.head_dim)
        k = self.k_proj(x).view(B, T, self.kv_heads, self.head_dim)
        v = self.v_proj(x).view(B, T, self.kv_heads, self.head_dim)
        if self.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # [B, heads, T, d]
        inv = 1.0 / (self.theta ** (torch.arange(0, self.head_dim, 2).float() / self.head_dim))
        freqs = torch.outer(torch.arange(T).float(), inv)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        rep = self.heads // self.kv_heads
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        att = (q @ k.transpose(-1, -2)) / self.head_dim ** 0.5
        mask = torch.ones(T, T, dtype=torch.bool).triu(1)
        att = att.masked_fill(mask, float("-inf")).softmax(-1)
        out = (att @ v).transpose(1, 2).reshape(B, T, self.heads * self.head_dim)
        return self.o_proj(out)


class SwiGLU(nn.Module):
    """down(silu(gate(x)) * up(x)); Mixtral names them w1, w3, w2."""

    def __init__(self, H, inter, names=("gate_proj", "up_proj", "down_proj")):
        super().__init__()
        self.names = names
        setattr(self, names[0], nn.Linear(H, inter, bias=False))
        setattr(self, names[1], nn.Linear(H, inter, bias=False))
        setattr(self, names[2], nn.Linear(inter, H, bias=False))

    def forward(self, x):
        g, u, d = (getattr(self, n) for n in self.names)
        return d(F.silu(g(x)) * u(x))


class SparseMoe(nn.Module):
    """Softmax router, top-k, optional renormalisation, SwiGLU experts."""
    returns_router_logits = False

    def __init__(self, H, inter, experts, top_k, norm, names):
        super().__init__()
        self.top_k, self.norm = top_k, norm
        self.gate = nn.Linear(H, experts, bias=False)
        self.experts = nn.ModuleList(SwiGLU(H, inter, names) for _ in range(experts))

    def forward(self, hidden_states):
        shape = hidden_states.shape
        x = hidden_states.reshape(-1, shape[-1])
        probs = self.gate(x).float().softmax(-1)
        w, idx = probs.topk(self.top_k, dim=-1)
        if self.norm:
            w = w / w.sum(-1, keepdim=True)
        out = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            tok, slot = (idx == e).nonzero(as_tuple=True)
            if tok.numel():
                out.index_add_(0, tok, expert(x[tok]) * w[tok, slot, None].to(x.dtype))
        return out.reshape(shape)


def moe_layers(cfg):
    n = cfg["num_hidden_layers"]
    if cfg["model_type"] == "mixtral":
        return list(range(n))
    step = cfg.get("decoder_sparse_step", 1)
    dense = set(cfg.get("mlp_only_layers", []))
    return [l for l in range(n) if l not in dense and (l + 1) % step == 0]


class DecoderLayer(nn.Module):
    def __init__(self, cfg, layer):
        super().__init__()
        H, eps = cfg["hidden_size"], cfg.get("rms_norm_eps", 1e-6)
        self.input_layernorm = RMSNorm(H, eps)
        self.post_attention_layernorm = RMSNorm(H, eps)
        self.self_attn = Attention(cfg)
        self.is_mixtral = cfg["model_type"] == "mixtral"
        if self.is_mixtral:
            self.block_sparse_moe = SparseMoe(H, cfg["intermediate_size"],
                                              cfg["num_local_experts"],
                                              cfg["num_experts_per_tok"], True,
                                              ("w1", "w3", "w2"))
        elif layer in moe_layers(cfg):
            self.mlp = SparseMoe(H, cfg["moe_intermediate_size"], cfg["num_experts"],
                                 cfg["num_experts_per_tok"], cfg.get("norm_topk_prob", False),
                                 ("gate_proj", "up_proj", "down_proj"))
        else:
            self.mlp = SwiGLU(H, cfg["intermediate_size"])

    def forward(self, x):
        x = x + self.self_attn(self.input_layernorm(x))
        ffn = self.block_sparse_moe if self.is_mixtral else self.mlp
        return x + ffn(self.post_attention_layernorm(x))


class Backbone(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg["vocab_size"], cfg["hidden_size"])
        self.layers = nn.ModuleList(DecoderLayer(cfg, l)
                                    for l in range(cfg["num_hidden_layers"]))
        self.norm = RMSNorm(cfg["hidden_size"], cfg.get("rms_norm_eps", 1e-6))

    def forward(self, ids):
        x = self.embed_tokens(ids)
        for layer in self.layers:
            x = layer(x)
        return self.norm(x)


class MoeForCausalLM(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        if cfg["model_type"] not in FAMILIES:
            raise ValueError(f"model_type {cfg['model_type']!r}: supported {FAMILIES}")
        self.config = cfg
        self.model = Backbone(cfg)
        self.lm_head = nn.Linear(cfg["hidden_size"], cfg["vocab_size"], bias=False)

    def forward(self, ids):
        """(final hidden states [B, T, H], logits [B, T, V])."""
        h = self.model(ids)
        return h, self.lm_head(h)

    @torch.no_grad()
    def generate(self, ids, new_tokens):
        """Greedy decoding (no cache: the whole sequence each step)."""
        for _ in range(new_tokens):
            _, logits = self(ids)
            ids = torch.cat([ids, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
        return ids

    @classmethod
    def from_pretrained(cls, directory):
        with open(os.path.join(directory, "config.json")) as f:
            cfg = json.load(f)
        model = cls(cfg)
        tensors = load_checkpoint(directory)
        if cfg.get("tie_word_embeddings") and "lm_head.weight" not in tensors:
            tensors["lm_head.weight"] = tensors["model.embed_tokens.weight"]
        state = {k: torch.from_numpy(v) for k, v in tensors.items()}
        missing, unexpected = model.load_state_dict(state, strict=False)
        if missing:
            raise ValueError(f"{directory}: missing tensors {missing[:5]}...")
        return model.eval()
