# Independent derivation of E8/IQ3 (engine fmt 6) from docs/formats/e8-iq3.md, in numpy float32
# with every operation in the order the spec gives (the engine converter's reference encoder),
# vectorised over rows:
#   e8_iq3.py encode IN OUT        IN: int64 rows, int64 cols, rows*cols f32 (row-major);
#                                  OUT: the rotated rows' fmt 6 bytes, then the rotated f32 rows
#   e8_iq3.py container SRC OUT    every fmt 6 tensor of the conversion OUT of checkpoint SRC
#                                  equals this derivation of its source weight; prints the count
# The codebook comes from this file's own table (GRID, the published IQ3_XXS grid as four
# doubled magnitudes per entry); its SHA-256 is checked against the published file's.
import glob
import hashlib
import json
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))

F = np.float32
GRID_SHA256 = "46e35f5a997efdee6c99ce57854c8a0d4f0ff8ca57e5e8a60c0793ea580acf5d"
# IQ3_XXS grid: entry j's four doubled magnitudes, coordinate 0 first, as 32-bit words (byte k =
# coordinate k), as published.
GRID_WORDS = """
04040404 04040414 04040424 04040c0c 04040c1c 04040c3e 04041404 04041414 04041c0c 04042414
04043e1c 04043e2c 040c040c 040c041c 040c0c04 040c0c14 040c140c 040c142c 040c1c04 040c1c14
040c240c 040c2c24 040c3e04 04140404 04140414 04140424 04140c0c 04141404 04141414 04141c0c
04141c1c 04141c3e 04142c0c 04142c3e 04143e2c 041c040c 041c043e 041c0c04 041c0c14 041c142c
041c3e04 04240c1c 04241c3e 04242424 04242c3e 04243e1c 04243e2c 042c040c 042c043e 042c1c14
042c2c14 04341c2c 04343424 043e0c04 043e0c24 043e0c34 043e241c 043e340c 0c04040c 0c04041c
0c040c04 0c040c14 0c04140c 0c04141c 0c041c04 0c041c14 0c041c24 0c04243e 0c042c04 0c0c0404
0c0c0414 0c0c0c0c 0c0c1404 0c0c1414 0c14040c 0c14041c 0c140c04 0c140c14 0c14140c 0c141c04
0c143e14 0c1c0404 0c1c0414 0c1c1404 0c1c1c0c 0c1c2434 0c1c3434 0c24040c 0c24042c 0c242c04
0c2c1404 0c2c1424 0c2c2434 0c2c3e0c 0c34042c 0c3e1414 0c3e2404 14040404 14040414 14040c0c
14040c1c 14041404 14041414 14041434 14041c0c 14042414 140c040c 140c041c 140c042c 140c0c04
140c0c14 140c140c 140c1c04 140c341c 140c343e 140c3e04 14140404 14140414 14140c0c 14140c3e
14141404 14141414 14141c3e 14142404 14142c2c 141c040c 141c0c04 141c0c24 141c3e04 141c3e24
14241c2c 14242c1c 142c041c 142c143e 142c240c 142c3e24 143e040c 143e041c 143e0c34 143e242c
1c04040c 1c040c04 1c040c14 1c04140c 1c04141c 1c042c04 1c04342c 1c043e14 1c0c0404 1c0c0414
1c0c1404 1c0c1c0c 1c0c2424 1c0c2434 1c14040c 1c14041c 1c140c04 1c14142c 1c142c14 1c143e14
1c1c0c0c 1c1c1c1c 1c241c04 1c24243e 1c243e14 1c2c0404 1c2c0434 1c2c1414 1c2c2c2c 1c340c24
1c341c34 1c34341c 1c3e1c1c 1c3e3404 24040424 24040c3e 24041c2c 24041c3e 24042c1c 24042c3e
240c3e24 24141404 24141c3e 24142404 24143404 24143434 241c043e 241c242c 24240424 24242c0c
24243424 242c142c 242c241c 242c3e04 243e042c 243e0c04 243e0c14 243e1c04 2c040c14 2c04240c
2c043e04 2c0c0404 2c0c0434 2c0c1434 2c0c2c2c 2c140c24 2c141c14 2c143e14 2c1c0414 2c1c2c1c
2c240c04 2c24141c 2c24143e 2c243e14 2c2c0414 2c2c1c0c 2c342c04 2c3e1424 2c3e2414 34041424
34042424 34042434 34043424 340c140c 340c340c 34140c3e 34143424 341c1c04 341c1c34 34242424
342c042c 342c2c14 34341c1c 343e041c 343e140c 3e04041c 3e04042c 3e04043e 3e040c04 3e041c14
3e042c14 3e0c1434 3e0c2404 3e140c14 3e14242c 3e142c14 3e1c0404 3e1c0c2c 3e1c1c1c 3e1c3404
3e24140c 3e24240c 3e2c0404 3e2c0414 3e2c1424 3e341c04
"""


def grid_doubled():
    words = [int(w, 16) for w in GRID_WORDS.split()]
    assert len(words) == 256
    g = np.array([[(w >> (8 * k)) & 0xFF for k in range(4)] for w in words], dtype=np.uint8)
    assert hashlib.sha256(g.tobytes()).hexdigest() == GRID_SHA256, "codebook differs"
    return g


GRID = grid_doubled().astype(F) * F(0.5)                 # [256, 4] halved magnitudes
GRID2 = ((GRID[:, 0] * GRID[:, 0] + GRID[:, 1] * GRID[:, 1])
         + GRID[:, 2] * GRID[:, 2]) + GRID[:, 3] * GRID[:, 3]  # integers: exact


def block_signs(b):
    """+-1 of a rotation block of b: bit i of the xorshift64* byte stream seeded 417 + b."""
    s = 417 + b
    out = []
    mask = (1 << 64) - 1
    for _ in range((b + 7) // 8):
        s ^= s >> 12
        s = (s ^ (s << 25)) & mask
        s ^= s >> 27
        byte = ((s * 2685821657736338717) & mask) >> 56
        out.extend(-1.0 if (byte >> j) & 1 else 1.0 for j in range(8))
    return np.array(out[:b], dtype=F)


def rotation_blocks(n):
    blocks = []
    while n:
        b = n & -n
        while b > 32768:
            b >>= 1
        blocks.append(b)
        n -= b
    return blocks


def rotate(rows):
    rows = rows.astype(F, copy=True)
    off = 0
    for b in rotation_blocks(rows.shape[1]):
        x = rows[:, off:off + b] * block_signs(b)
        h = 1
        while h < b:
            x = x.reshape(len(rows), b // (2 * h), 2, h)
            u = x[:, :, 0, :].copy()
            v = x[:, :, 1, :].copy()
            x[:, :, 0, :] = u + v
            x[:, :, 1, :] = u - v
            x = x.reshape(len(rows), b)
            h *= 2
        rows[:, off:off + b] = x / F(np.sqrt(F(b)))
        off += b
    return rows


def encode_block(x):
    """[R, 256] rotated f32 -> [R, 98] bytes."""
    r = len(x)
    neg = (x < 0).reshape(r, 32, 8).copy()                  # -0.0 is not negative
    mag = np.abs(x)
    m8 = mag.reshape(r, 32, 8)
    odd = neg.sum(-1) % 2 == 1
    least = m8.argmin(-1)                                     # first least magnitude
    rr, bb = np.nonzero(odd)
    neg[rr, bb, least[rr, bb]] ^= True
    neg = neg.reshape(r, 256)
    mean = (mag * mag).sum(-1) / F(256)                       # numpy's pairwise f32 sum
    d = np.sqrt(mean) / F(20) + F(1e-12)
    d16 = d.astype(np.float16)
    d = d16.astype(F)
    out = np.zeros((r, 98), dtype=np.uint8)
    out[:, 96:98] = d16.view(np.uint8).reshape(r, 2)
    for ib in range(8):
        m = mag[:, ib * 32:(ib + 1) * 32].reshape(r, 8, 1, 4)
        a = ((m[..., 0] * GRID[:, 0] + m[..., 1] * GRID[:, 1]) + m[..., 2] * GRID[:, 2]) \
            + m[..., 3] * GRID[:, 3]                          # [R, 8, 256], no fused ops
        best_err = None
        for code in range(16):
            db = np.maximum(d * F(0.5 + code) * F(0.5), F(1e-20))[:, None, None]
            idx = np.argmin(db * GRID2 + F(-2) * a, axis=-1)  # [R, 8]
            ai = np.take_along_axis(a, idx[..., None], -1)[..., 0]
            t = (db[..., 0] * db[..., 0]) * GRID2[idx] - (F(2) * db[..., 0]) * ai
            err = ((t[:, 0] + t[:, 1]) + (t[:, 2] + t[:, 3])) + ((t[:, 4] + t[:, 5]) + (t[:, 6] + t[:, 7]))
            if best_err is None:
                best_err, best_idx, best_code = err, idx, np.zeros(r, np.int64)
            else:
                take = err < best_err
                best_err = np.where(take, err, best_err)
                best_idx = np.where(take[:, None], idx, best_idx)
                best_code = np.where(take, code, best_code)
        out[:, ib * 8:(ib + 1) * 8] = best_idx.astype(np.uint8)
        word = (best_code.astype(np.uint64) & 0xF) << 28
        for l in range(4):
            for j in range(7):
                word |= neg[:, ib * 32 + l * 8 + j].astype(np.uint64) << (7 * l + j)
        out[:, 64 + 4 * ib:68 + 4 * ib] = word.astype('<u4').view(np.uint8).reshape(r, 4)
    return out


def encode(rows):
    rot = rotate(rows)
    blocks = [encode_block(rot[:, c:c + 256]) for c in range(0, rot.shape[1], 256)]
    return np.concatenate(blocks, axis=1), rot


def cmd_encode(src, dst):
    raw = open(src, "rb").read()
    rows, cols = struct.unpack("<qq", raw[:16])
    x = np.frombuffer(raw[16:], dtype="<f4").reshape(rows, cols)
    packed, rot = encode(x)
    with open(dst, "wb") as f:
        f.write(packed.tobytes())
        f.write(rot.astype("<f4").tobytes())


def cmd_container(src_dir, out_dir):
    from engine_containers import load_dir, source_f32
    src, _ = load_dir(src_dir)
    out, _ = load_dir(out_dir)
    checked = 0
    for name in sorted(out):
        if not name.endswith(".qs"):
            continue
        base = name[:-3]
        _, qshape, qs = out[name]
        tag = np.frombuffer(qs.tobytes(), dtype=np.float32)
        if tag.size != 1 or tag[0] != 6.0:
            continue
        w = source_f32(src, base).astype(F)
        want, _ = encode(w)
        got = np.frombuffer(out[base][2].tobytes(), dtype=np.uint8)
        if got.size != want.size or not np.array_equal(got, want.reshape(-1)):
            diff = np.nonzero(got != want.reshape(-1))[0] if got.size == want.size else [-1]
            print(f"{base}: fmt 6 bytes differ from the derivation (first at byte {diff[0]})")
            sys.exit(1)
        checked += 1
    print(f"e8: {checked} tensors identical to the derivation")
    sys.exit(0 if checked > 0 else 1)


if __name__ == "__main__":
    if sys.argv[1] == "encode":
        cmd_encode(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "container":
        cmd_container(sys.argv[2], sys.argv[3])
    else:
        sys.exit("usage: e8_iq3.py encode IN OUT | container SRC OUT")
