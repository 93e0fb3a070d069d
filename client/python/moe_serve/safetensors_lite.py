"""A tiny pure-Python safetensors reader and writer (NumPy only).

Format: u64 little-endian header length, a JSON header naming each tensor's
dtype, shape and byte range, then the raw little-endian row-major data.
BF16 tensors are read as float32 (exactly: bf16 is the top half of fp32).
"""

from __future__ import annotations

import json
import os
import struct
from typing import Dict, Mapping, Optional, Tuple

import numpy as np

_NP = {
    "F64": np.float64, "F32": np.float32, "F16": np.float16,
    "I64": np.int64, "I32": np.int32, "I16": np.int16, "I8": np.int8,
    "U8": np.uint8, "BOOL": np.bool_,
}


def bf16_bits_to_f32(bits: np.ndarray) -> np.ndarray:
    """bf16 bit patterns (uint16) to float32, exactly."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 to bf16 bit patterns (uint16), round to nearest even; NaN stays NaN."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounded = (u + (np.uint32(0x7FFF) + ((u >> 16) & np.uint32(1)))) >> 16
    nan = np.isnan(np.asarray(x, dtype=np.float32))
    rounded = np.where(nan, (u >> 16) | np.uint32(0x40), rounded)
    return rounded.astype(np.uint16)


def read_header(path: str) -> Tuple[dict, int]:
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    return header, 8 + n


def load(path: str) -> Tuple[Dict[str, np.ndarray], Dict[str, str]]:
    """All tensors of one file (BF16 as float32) and its __metadata__."""
    header, base = read_header(path)
    meta = header.pop("__metadata__", {}) or {}
    out: Dict[str, np.ndarray] = {}
    with open(path, "rb") as f:
        data = f.read()
    for name, t in header.items():
        begin, end = t["data_offsets"]
        raw = data[base + begin: base + end]
        shape = tuple(t["shape"])
        if t["dtype"] == "BF16":
            arr = bf16_bits_to_f32(np.frombuffer(raw, dtype="<u2"))
        else:
            arr = np.frombuffer(raw, dtype=np.dtype(_NP[t["dtype"]]).newbyteorder("<"))
            arr = arr.astype(arr.dtype.newbyteorder("="))
        out[name] = arr.reshape(shape).copy()
    return out, meta


def load_checkpoint(directory: str) -> Dict[str, np.ndarray]:
    """Every tensor of a Hugging Face checkpoint directory, sharded or not."""
    index = os.path.join(directory, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = sorted(n for n in os.listdir(directory) if n.endswith(".safetensors"))
    tensors: Dict[str, np.ndarray] = {}
    for name in files:
        tensors.update(load(os.path.join(directory, name))[0])
    return tensors


def save(path: str, tensors: Mapping[str, np.ndarray],
         metadata: Optional[Mapping[str, str]] = None) -> None:
    """Writes float32/float16/int arrays as such (no BF16 writing)."""
    inv = {np.dtype(v): k for k, v in _NP.items()}
    header: dict = {}
    if metadata:
        header["__metadata__"] = dict(metadata)
    blobs = []
    offset = 0
    for name, arr in tensors.items():
        arr = np.ascontiguousarray(arr)
        raw = arr.astype(arr.dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": inv[arr.dtype], "shape": list(arr.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    head = json.dumps(header).encode()
    head += b" " * (-len(head) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(head)))
        f.write(head)
        for b in blobs:
            f.write(b)
