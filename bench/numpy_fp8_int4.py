# The numpy peer for `make bench`: FP8 E4M3 128x128-block checkpoint -> engine int4-g128, the
# same math qrepack does (256-entry decode table, block-scale multiply, per-group amax/7 with
# the 1e-8 floor, rint, clip to [-8, 7], nibble pack), one tensor at a time, timed over the
# first LIMIT bytes of FP8 weights. Prints "<seconds> <fp8 bytes>".
# Usage: /usr/bin/python3 numpy_fp8_int4.py CHECKPOINT_DIR LIMIT_BYTES
import glob
import json
import os
import struct
import sys
import time

import numpy as np

ckpt, limit = sys.argv[1], int(sys.argv[2])


def e4m3_table():
    t = np.zeros(256, np.float32)
    for c in range(256):
        s, e, m = c >> 7, (c >> 3) & 0xF, c & 7
        v = (m / 8.0) * 2.0 ** -6 if e == 0 else (1 + m / 8.0) * 2.0 ** (e - 7)
        t[c] = -v if s else v
    t[0x7F] = t[0xFF] = np.nan
    return t


table = e4m3_table()
files = sorted(glob.glob(os.path.join(ckpt, "*.safetensors")))
headers = []
for f in files:
    with open(f, "rb") as fh:
        (n,) = struct.unpack("<Q", fh.read(8))
        headers.append((f, 8 + n, json.loads(fh.read(n))))

done = 0
t0 = time.perf_counter()
for f, base, h in headers:
    data = np.memmap(f, dtype=np.uint8, mode="r")
    for name, e in h.items():
        if name == "__metadata__" or e["dtype"] != "F8_E4M3" or len(e["shape"]) != 2:
            continue
        s = h.get(name + "_scale_inv")
        if s is None:
            continue
        rows, cols = e["shape"]
        b, end = e["data_offsets"]
        q = np.asarray(data[base + b : base + end]).reshape(rows, cols)
        sb, se = s["data_offsets"]
        scale = np.frombuffer(bytes(data[base + sb : base + se]), np.float32).reshape(s["shape"])
        w = table[q] * np.repeat(np.repeat(scale, 128, 0), 128, 1)[:rows, :cols]
        g = w.reshape(rows, -1, 128) if cols % 128 == 0 else w.reshape(rows, 1, cols)
        sc = np.maximum(np.abs(g).max(axis=2, keepdims=True) / np.float32(7), np.float32(1e-8))
        codes = (np.clip(np.rint(g / sc), -8, 7).astype(np.int8) + 8).astype(np.uint8).reshape(rows, -1)
        if cols % 2:
            codes = np.pad(codes, ((0, 0), (0, 1)))
        packed = codes[:, 0::2] | (codes[:, 1::2] << 4)
        done += rows * cols
        if done >= limit:
            break
    if done >= limit:
        break
print(f"{time.perf_counter() - t0:.3f} {done}")
