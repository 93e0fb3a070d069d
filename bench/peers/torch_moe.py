#!/usr/bin/env python3
"""The PyTorch peer of moe-bench: one MoE layer in PyTorch, timed on the same device.

  torch_moe.py --weights CASE.safetensors [--tokens N] [--device cuda|cpu]
  torch_moe.py --random --hidden 2048 --inter 1408 --experts 64 --top-k 6 \\
               --shared-inter 2816 --tokens 512 [--device cuda|cpu]

Weights come from a safetensors file in the golden layout (tests/golden/README.md:
gate.weight, gate.expert_bias, experts.w1/w3/w2, shared.*, the routing options in
__metadata__["config"]) so that both sides compute the same layer without sharing
an RNG; --random makes random weights of the given shape (timing only). Routing is
docs/architecture.md section 3 in fp32 (softmax or sigmoid, bias for choosing only, groups,
top-k, renormalise, scale, capacity, expert choice); experts run in --dtype (bf16
by default) in two styles: a per-expert loop (as Hugging Face models do) and one
grouped GEMM per projection with torch._grouped_mm where this torch has it. Each
style is timed (CUDA events on a GPU; warm-up, then the median of --reps) and
checked: against the file's y when it has x and y (tolerance of the golden README
for bf16 or fp32), else the grouped style against the loop. The last line printed
is a JSON object. Exit status 1 when a check fails.
"""
import argparse
import json
import math
import statistics
import struct
import sys
import time

import torch
import torch.nn.functional as F

DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
          "I64": torch.int64, "I32": torch.int32}


def load_safetensors(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    meta = header.pop("__metadata__", {}) or {}
    tensors = {}
    for name, info in header.items():
        a, b = info["data_offsets"]
        t = torch.frombuffer(bytearray(data[a:b]), dtype=DTYPES[info["dtype"]])
        tensors[name] = t.reshape(info["shape"]).clone()
    config = json.loads(meta["config"]) if "config" in meta else {}
    return tensors, config


def route(x, t, c):
    """Per-slot (token, expert, weight) in slot order, fp32, as docs/architecture.md section 3."""
    n, e, k = x.shape[0], c["experts"], c["top_k"]
    logits = x.float() @ t["gate.weight"].float().t()
    if c.get("routing", "token_choice") == "expert_choice":
        probs = logits.softmax(dim=0)  # over tokens
        cf = c.get("capacity_factor", 0) or 0
        cap = int(cf * n / e) if cf > 0 else (n * k) // e
        cap = max(1, min(n, cap))
        w, tok = probs.t().topk(cap, dim=1)  # [E, C]
        denom = torch.zeros(n).index_add_(0, tok.reshape(-1), w.reshape(-1)) + 1e-9
        exp = torch.arange(e).repeat_interleave(cap)
        tok = tok.reshape(-1)
        return tok, exp, w.reshape(-1) / denom[tok]
    s = logits.sigmoid() if c.get("score_func", "softmax") == "sigmoid" else logits.softmax(-1)
    choose = s + t["gate.expert_bias"].float() if c.get("use_bias") else s.clone()
    groups = c.get("n_groups", 0) or 0
    if groups > 0:
        g = choose.view(n, groups, e // groups)
        if c.get("group_score", "top2_sum") == "max":
            gs = g.max(-1).values
        else:
            gs = g.topk(2, dim=-1).values.sum(-1)
        keep = gs.topk(c["topk_groups"], dim=-1).indices
        mask = torch.ones(n, groups, dtype=torch.bool)
        mask.scatter_(1, keep, False)
        choose = choose.masked_fill(mask.repeat_interleave(e // groups, dim=1), float("-inf"))
    # Ties to the lower expert id: a stable sort, descending.
    idx = torch.sort(choose, dim=-1, descending=True, stable=True).indices[:, :k]
    w = s.gather(1, idx)
    cf = c.get("capacity_factor", 0) or 0
    if cf > 0:
        cap = math.ceil(cf * n * k / e)
        used = [0] * e
        for i in range(n):
            for j in range(k):
                ex = int(idx[i, j])
                if used[ex] < cap:
                    used[ex] += 1
                else:
                    w[i, j] = 0.0
    if c.get("route_norm", False):
        w = w / (w.sum(-1, keepdim=True) + 1e-20)
    w = w * float(c.get("route_scale", 1.0))
    tok = torch.arange(n).repeat_interleave(k)
    return tok, idx.reshape(-1), w.reshape(-1)


class Layer:
    def __init__(self, t, c, device, dtype):
        self.c, self.device, self.dtype = c, device, dtype
        cast = lambda name: t[name].to(device=device, dtype=dtype).contiguous()
        self.w1, self.w3, self.w2 = cast("experts.w1"), cast("experts.w3"), cast("experts.w2")
        # Grouped layout: [E, H, 2I] (gate and up fused) and [E, I, H].
        self.w13_t = torch.cat([self.w1, self.w3], dim=1).transpose(1, 2).contiguous()
        self.w2_t = self.w2.transpose(1, 2).contiguous()
        self.shared = None
        if c.get("shared_inter", 0):
            self.shared = [cast("shared.w1"), cast("shared.w3"), cast("shared.w2")]
            self.shared_gate = cast("shared.gate") if c.get("shared_gate") else None
        self.t = t

    def _shared(self, x):
        if self.shared is None:
            return 0
        w1, w3, w2 = self.shared
        s = (F.silu(x @ w1.t()) * (x @ w3.t())) @ w2.t()
        if self.shared_gate is not None:
            s = s * torch.sigmoid(x @ self.shared_gate.t())
        return s

    def plan(self, x_cpu):
        tok, exp, w = route(x_cpu, self.t, self.c)
        order = torch.sort(exp, stable=True).indices
        counts = torch.bincount(exp, minlength=self.c["experts"])
        d = self.device
        return (tok[order].to(d), exp[order], w[order].to(d, torch.float32), counts,
                torch.cumsum(counts, 0).to(d, torch.int32))

    def forward(self, x, plan, style):
        tok, exp, w, counts, offs = plan
        before = self.c.get("score_before_experts", False)
        xs = x[tok]
        if before:
            xs = (xs.float() * w[:, None]).to(self.dtype)
        if style == "loop":
            out = torch.empty(xs.shape, device=x.device, dtype=self.dtype)
            start = 0
            for e, cnt in enumerate(counts.tolist()):
                if cnt == 0:
                    continue
                r = xs[start:start + cnt]
                out[start:start + cnt] = (F.silu(r @ self.w1[e].t()) * (r @ self.w3[e].t())) @ self.w2[e].t()
                start += cnt
        else:
            h = torch._grouped_mm(xs, self.w13_t, offs=offs)
            i = self.w1.shape[1]
            h = (F.silu(h[:, :i]) * h[:, i:]).to(self.dtype)
            out = torch._grouped_mm(h, self.w2_t, offs=offs)
        out = out.float()
        if not before:
            out = out * w[:, None]
        y = torch.zeros(x.shape, device=x.device, dtype=torch.float32).index_add_(0, tok, out)
        return y + (self._shared(x).float() if self.shared is not None else 0)


def random_case(a):
    g = torch.Generator().manual_seed(a.seed)
    h, i, e, s = a.hidden, a.inter, a.experts, a.shared_inter
    r = lambda *shape, scale: torch.randn(*shape, generator=g) * scale
    t = {"gate.weight": r(e, h, scale=h ** -0.5), "experts.w1": r(e, i, h, scale=h ** -0.5),
         "experts.w3": r(e, i, h, scale=h ** -0.5), "experts.w2": r(e, h, i, scale=i ** -0.5),
         "x": r(a.tokens, h, scale=1.0)}
    if s:
        t.update({"shared.w1": r(s, h, scale=h ** -0.5), "shared.w3": r(s, h, scale=h ** -0.5),
                  "shared.w2": r(h, s, scale=s ** -0.5)})
    c = {"hidden": h, "inter": i, "experts": e, "top_k": a.top_k, "shared_inter": s,
         "route_norm": True}
    return t, c


def timed(fn, device, warmup, reps):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        if device.type == "cuda":
            b, f = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            b.record()
            fn()
            f.record()
            torch.cuda.synchronize()
            times.append(b.elapsed_time(f) / 1e3)
        else:
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--weights", help="safetensors file in the golden layout")
    p.add_argument("--random", action="store_true", help="random weights of the shape below")
    p.add_argument("--hidden", type=int, default=2048)
    p.add_argument("--inter", type=int, default=1408)
    p.add_argument("--experts", type=int, default=64)
    p.add_argument("--top-k", type=int, default=6)
    p.add_argument("--shared-inter", type=int, default=0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--tokens", type=int, help="tokens per step (default: the file's x)")
    p.add_argument("--device", default="cuda")
    p.add_argument("--dtype", choices=["bf16", "f32"], default="bf16")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--reps", type=int, default=10)
    a = p.parse_args()
    if bool(a.weights) == bool(a.random):
        p.error("give --weights FILE or --random")
    device = torch.device(a.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("torch_moe: no CUDA device visible to torch", file=sys.stderr)
        return 2
    dtype = torch.bfloat16 if a.dtype == "bf16" else torch.float32
    if a.weights:
        t, c = load_safetensors(a.weights)
    else:
        a.tokens = a.tokens or 512
        t, c = random_case(a)
    # x: the file's (cycled up to --tokens), else random.
    if "x" in t:
        x_cpu = t["x"].float()
        n = a.tokens or x_cpu.shape[0]
        x_cpu = x_cpu.repeat((n + x_cpu.shape[0] - 1) // x_cpu.shape[0], 1)[:n]
    else:
        n = a.tokens or 512
        x_cpu = torch.randn(n, c["hidden"], generator=torch.Generator().manual_seed(a.seed))
    # Expected output: the file's y where x is used unchanged (and routing is per token).
    ref = None
    if "y" in t and "x" in t and n == t["x"].shape[0]:
        ref = ("y", t["y"].float())
    layer = Layer(t, c, device, dtype)
    x = x_cpu.to(device)
    xd = x.to(dtype)
    plan = layer.plan(x_cpu)

    styles = {}
    outputs = {}
    for style in ("loop", "grouped"):
        if style == "grouped" and not hasattr(torch, "_grouped_mm"):
            print(f"torch_moe: grouped style skipped: torch {torch.__version__} has no torch._grouped_mm")
            styles[style] = {"skipped": f"torch {torch.__version__} has no torch._grouped_mm"}
            continue
        try:
            outputs[style] = layer.forward(xd, plan, style).cpu()
            sec = timed(lambda: layer.forward(xd, plan, style), device, a.warmup, a.reps)
        except Exception as e:  # a style this torch or device cannot run
            print(f"torch_moe: {style} style failed: {e}")
            styles[style] = {"failed": str(e)[:300]}
            continue
        styles[style] = {"ms": round(sec * 1e3, 4), "tokens_per_s": round(n / sec, 1)}
        print(f"torch_moe: {style:8s} {n} tokens: {sec * 1e3:9.3f} ms  {n / sec:12.1f} tokens/s")

    checks = []
    ok = all("failed" not in s for s in styles.values())
    atol, rtol = (5e-2, 2e-2) if dtype == torch.bfloat16 else (1e-4, 1e-3)
    if ref is None and "loop" in outputs:
        ref = ("loop", outputs["loop"])
    for style, y in outputs.items():
        if ref is None or (ref[0] == "loop" and style == "loop"):
            continue
        err = (y - ref[1]).abs()
        bad = int((err > atol + rtol * ref[1].abs()).sum())
        checks.append({"style": style, "against": ref[0], "max_abs_err": float(err.max()),
                       "bad": bad})
        ok = ok and bad == 0
        print(f"torch_moe: {style} vs {ref[0]}: max |err| {float(err.max()):.3g}, "
              f"{bad} outside {atol} + {rtol}*|ref|")
    print(json.dumps({"peer": "torch", "torch": torch.__version__, "device": str(device),
                      "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
                      "dtype": a.dtype, "tokens": n, "hidden": c["hidden"], "inter": c["inter"],
                      "experts": c["experts"], "top_k": c["top_k"],
                      "shared_inter": c.get("shared_inter", 0), "styles": styles,
                      "checks": checks, "ok": ok}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
