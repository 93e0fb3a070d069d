"""NumPy / torch arrays <-> moe.v1.Tensor, and the results' extras."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from ._stubs import moe_pb2
from .safetensors_lite import bf16_bits_to_f32, f32_to_bf16_bits

try:  # torch is optional
    import torch as _torch
except ImportError:  # pragma: no cover
    _torch = None

_WIRE = {"f32": moe_pb2.F32, "bf16": moe_pb2.BF16, "f16": moe_pb2.F16}
_ALIASES = {"f32": "f32", "float32": "f32", "fp32": "f32",
            "bf16": "bf16", "bfloat16": "bf16",
            "f16": "f16", "float16": "f16", "fp16": "f16", "half": "f16"}


def wire_name(dtype: Any) -> Optional[str]:
    """'f32' | 'bf16' | 'f16' | None from a string, numpy or torch dtype."""
    if dtype is None:
        return None
    if _torch is not None and isinstance(dtype, _torch.dtype):
        m = {_torch.float32: "f32", _torch.bfloat16: "bf16", _torch.float16: "f16"}
        if dtype not in m:
            raise ValueError(f"unsupported dtype {dtype}")
        return m[dtype]
    if isinstance(dtype, str) and dtype.lower() in _ALIASES:
        return _ALIASES[dtype.lower()]
    try:
        nd = np.dtype(dtype)
    except TypeError:
        nd = None
    if nd == np.float32:
        return "f32"
    if nd == np.float16:
        return "f16"
    raise ValueError(f"unsupported dtype {dtype!r} (f32, bf16 or f16)")


@dataclass
class Routing:
    """Each token's experts in summation order: `expert_ids` and `weights`
    are [tokens, slots]; a dropped slot has weight 0, an unused one id -1."""
    expert_ids: np.ndarray
    weights: np.ndarray

    @property
    def slots(self) -> int:
        return self.expert_ids.shape[1]


def _rounded_repr(obj) -> str:
    """A dataclass's repr with its floats rounded to 3 decimals (the times
    are microseconds: nanoseconds, what the clocks give). Their full repr,
    such as 0.14999999999999997, is floating-point noise. The values
    themselves are kept as they came."""
    parts = []
    for f in dataclasses.fields(obj):
        v = getattr(obj, f.name)
        parts.append(f"{f.name}={round(v, 3) if isinstance(v, float) else v!r}")
    return f"{type(obj).__name__}({', '.join(parts)})"


@dataclass
class WorkerTiming:
    """One worker's part of the step (the slowest worker's, in
    `Timing.critical_worker`), in microseconds of its own clock."""
    rank: int = 0
    decode_us: float = 0.0
    gather_us: float = 0.0
    dispatch_wait_us: float = 0.0
    experts_us: float = 0.0
    combine_wait_us: float = 0.0
    sum_us: float = 0.0
    step_us: float = 0.0

    __repr__ = _rounded_repr


@dataclass
class Timing:
    """Where the time of the step went, in microseconds."""
    queue_us: float
    route_us: float
    plan_us: float
    dispatch_us: float
    experts_us: float
    combine_us: float
    shared_us: float
    total_us: float
    batch_tokens: int
    batch_requests: int
    # Rows between router and workers (0 without workers); servers before it
    # existed leave it 0.
    wire_us: float = 0.0
    # The worker whose experts took longest; None without workers.
    critical_worker: Optional[WorkerTiming] = None

    __repr__ = _rounded_repr


_EXTRAS = ("routing", "timing", "router_logits", "shared_output")


class MoeArray(np.ndarray):
    """A NumPy result with `.routing`, `.timing`, `.router_logits` [N, E]
    float32 and `.shared_output` [N, H] (None unless asked)."""
    routing: Optional[Routing] = None
    timing: Optional[Timing] = None
    router_logits: Optional[np.ndarray] = None
    shared_output: Optional[np.ndarray] = None

    def __array_finalize__(self, obj):
        for name in _EXTRAS:
            setattr(self, name, getattr(obj, name, None))


class _Kind:
    """How to give back an output: the input's kind, dtype and device."""

    def __init__(self, is_torch, out_dtype, device=None, bf16_bits=False):
        self.is_torch = is_torch
        self.out_dtype = out_dtype
        self.device = device
        self.bf16_bits = bf16_bits


def encode(x: Any, dtype: Any = None, what: str = "hidden states"):
    """(moe_pb2.Tensor, kind). `dtype` is the dtype on the wire (default: the
    input's); a NumPy uint16 array is taken as bf16 bits when dtype='bf16'.
    `what` names the tensor in errors."""
    want = wire_name(dtype)
    if _torch is not None and isinstance(x, _torch.Tensor):
        t = x.detach()
        if t.dim() != 2:
            raise ValueError(f"{what} must be 2-D, got shape {tuple(t.shape)}")
        kind = _Kind(True, t.dtype, t.device)
        have = wire_name(t.dtype) if t.dtype in (_torch.float32, _torch.bfloat16,
                                                 _torch.float16) else "f32"
        wire = want or have
        tdt = {"f32": _torch.float32, "bf16": _torch.bfloat16, "f16": _torch.float16}[wire]
        t = t.to(device="cpu", dtype=tdt).contiguous()
        if wire == "bf16":
            data = t.view(_torch.int16).numpy().tobytes()
        else:
            data = t.numpy().tobytes()
        shape = list(t.shape)
    else:
        a = np.asarray(x)
        if a.ndim != 2:
            raise ValueError(f"{what} must be 2-D, got shape {a.shape}")
        if a.dtype == np.uint16:
            if want != "bf16":
                raise ValueError("a uint16 array holds bf16 bits: pass dtype='bf16'")
            kind = _Kind(False, np.uint16, bf16_bits=True)
            data = np.ascontiguousarray(a, dtype="<u2").tobytes()
            wire = "bf16"
        else:
            if a.dtype not in (np.float32, np.float16, np.float64):
                raise ValueError(f"unsupported array dtype {a.dtype}")
            kind = _Kind(False, a.dtype)
            wire = want or ("f16" if a.dtype == np.float16 else "f32")
            if wire == "bf16":
                data = f32_to_bf16_bits(a.astype(np.float32)).astype("<u2").tobytes()
            elif wire == "f16":
                data = np.ascontiguousarray(a, dtype="<f2").tobytes()
            else:
                data = np.ascontiguousarray(a, dtype="<f4").tobytes()
        shape = list(a.shape)
    return moe_pb2.Tensor(dtype=_WIRE[wire], shape=shape, data=data), kind


def _to_numpy(t: moe_pb2.Tensor, keep_bf16_bits: bool) -> np.ndarray:
    shape = tuple(t.shape)
    if t.dtype == moe_pb2.BF16:
        bits = np.frombuffer(t.data, dtype="<u2").reshape(shape)
        return bits.astype(np.uint16) if keep_bf16_bits else bf16_bits_to_f32(bits)
    if t.dtype == moe_pb2.F16:
        return np.frombuffer(t.data, dtype="<f2").reshape(shape).astype(np.float16)
    if t.dtype == moe_pb2.F32:
        return np.frombuffer(t.data, dtype="<f4").reshape(shape).astype(np.float32)
    raise ValueError(f"unknown dtype {t.dtype} in the response")


def _known_fields(cls, msg) -> dict:
    """The fields of `msg` that dataclass `cls` has (a newer server's extra
    ones are skipped)."""
    known = {f.name for f in dataclasses.fields(cls)}
    return {f.name: getattr(msg, f.name) for f in msg.DESCRIPTOR.fields
            if f.name in known and f.message_type is None}


def _timing(t) -> Timing:
    timing = Timing(**_known_fields(Timing, t))
    if t.HasField("critical_worker"):
        timing.critical_worker = WorkerTiming(
            **_known_fields(WorkerTiming, t.critical_worker))
    return timing


def decode(resp: moe_pb2.ForwardResponse, kind: _Kind, routing: bool, timing: bool):
    out = resp.output
    extras = {}
    if routing:
        r = resp.routing
        n, s = int(r.tokens), int(r.slots)
        extras["routing"] = Routing(
            np.asarray(r.expert_ids, dtype=np.int32).reshape(n, s),
            np.asarray(r.weights, dtype=np.float32).reshape(n, s))
    if timing:
        t = resp.timing
        # Fields this client knows; a newer server's extra ones are skipped.
        extras["timing"] = _timing(t)
    if resp.HasField("router_logits"):
        logits = _to_numpy(resp.router_logits, False).astype(np.float32, copy=False)
        if kind.is_torch:
            logits = _torch.from_numpy(logits.copy()).to(device=kind.device)
        extras["router_logits"] = logits
    if resp.HasField("shared_output"):
        # In the output's kind, dtype and device, like the output.
        extras["shared_output"] = _output(resp.shared_output, kind)
    y = _output(out, kind)
    if not kind.is_torch:
        y = y.view(MoeArray)
    for name in _EXTRAS:
        setattr(y, name, extras.get(name))
    return y


def _output(out: moe_pb2.Tensor, kind: _Kind):
    """An [N, H] answer tensor as the input's kind, dtype and device."""
    if kind.is_torch:
        if out.dtype == moe_pb2.BF16:
            bits = np.frombuffer(out.data, dtype="<i2").reshape(tuple(out.shape)).copy()
            y = _torch.from_numpy(bits).view(_torch.bfloat16)
        else:
            y = _torch.from_numpy(_to_numpy(out, False).copy())
        return y.to(device=kind.device, dtype=kind.out_dtype)
    if kind.bf16_bits:
        if out.dtype == moe_pb2.BF16:
            y = _to_numpy(out, True)
        else:
            y = f32_to_bf16_bits(_to_numpy(out, False).astype(np.float32))
    else:
        y = _to_numpy(out, False).astype(kind.out_dtype, copy=False)
    return np.ascontiguousarray(y)
