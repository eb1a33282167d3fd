# Shared by the test derivations: an E4M3 (fn) decode table computed from the bit layout, and a
# minimal safetensors reader (header + raw bytes), both independent of qrepack.
import json
import os
import struct

import numpy as np


def e4m3_table():
    out = np.zeros(256, dtype=np.float32)
    for b in range(256):
        s = -1.0 if b & 0x80 else 1.0
        e, m = (b >> 3) & 15, b & 7
        if e == 15 and m == 7:
            out[b] = np.nan
        elif e == 0:
            out[b] = s * (m / 8.0) * 2.0 ** -6
        else:
            out[b] = s * (1.0 + m / 8.0) * 2.0 ** (e - 7)
    return out


def read_raw(path):
    """{name: (dtype, shape, uint8 bytes)} of one .safetensors file."""
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        a, b = t["data_offsets"]
        out[name] = (t["dtype"], t["shape"], np.frombuffer(data[8 + n + a:8 + n + b], dtype=np.uint8))
    return out


def bf16(raw, shape):
    """BF16 bytes widened to float32 (exact: the high half of the bits)."""
    return (raw.view("<u2").astype(np.uint32) << 16).view("<f4").reshape(shape)


def floats(t):
    """A BF16, F16 or F32 tensor (dtype, shape, raw bytes) as float32, each widened exactly."""
    dt, shape, raw = t
    if dt == "BF16":
        return bf16(raw, shape)
    if dt == "F16":
        return raw.view("<f2").astype(np.float32).reshape(shape)
    assert dt == "F32", dt
    return raw.view("<f4").reshape(shape)


def read_dir(d):
    """read_raw of every .safetensors file in d, merged."""
    out = {}
    for f in sorted(os.listdir(d)):
        if f.endswith(".safetensors"):
            out.update(read_raw(os.path.join(d, f)))
    return out
