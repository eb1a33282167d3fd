# Independent derivation of the engine containers qrepack writes (reference/colibri.md §1.4-1.6,
# the engine converter's quant_int2 / quant_int3_g64 / quant_int4_grouped formulas and the FP8
# repack's layout), from the source checkpoint's own bytes:
#   engine_containers.py SRC_DIR OUT_DIR MODE
# MODE: int2-row, int3-g64, int4-g64-2bit (every weight at --bits 2 under int4-g64) or
# fp8-passthrough. Every quantized output (a tensor with a ".qs") must equal the derivation
# byte for byte; exits 1 naming the first difference.
import glob
import json
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from st_formats import e4m3_table, read_raw  # noqa: E402

E4M3 = e4m3_table()
RESIDENT = ("self_attn.q_a_proj", "self_attn.q_b_proj", "self_attn.kv_a_proj_with_mqa",
            "self_attn.kv_b_proj", "self_attn.o_proj", "mlp.shared_experts.", "mlp.gate_proj",
            "mlp.up_proj", "mlp.down_proj")


def load_dir(d):
    tensors, meta = {}, {}
    for path in sorted(glob.glob(os.path.join(d, "*.safetensors"))):
        tensors.update(read_raw(path))
        raw = open(path, "rb").read()
        n = struct.unpack("<Q", raw[:8])[0]
        meta[os.path.basename(path)] = (json.loads(raw[8:8 + n]).get("__metadata__", {}),
                                        [k for k in json.loads(raw[8:8 + n]) if k != "__metadata__"])
    return tensors, meta


def source_f32(src, name):
    dtype, shape, b = src[name]
    if dtype == "F8_E4M3":
        o, i = shape
        _, sshape, sb = src[name + "_scale_inv"]
        s = np.frombuffer(sb.tobytes(), dtype=np.float32).reshape(sshape)
        full = np.repeat(np.repeat(s, 128, axis=0), 128, axis=1)[:o, :i]
        return E4M3[b].reshape(o, i) * full
    if dtype == "BF16":
        u = np.frombuffer(b.tobytes(), dtype=np.uint16).astype(np.uint32) << 16
        return u.view(np.float32).reshape(shape)
    return np.frombuffer(b.tobytes(), dtype=np.float32).reshape(shape)


def quant_int2(w):
    amax = np.abs(w).max(axis=1, keepdims=True)
    s = np.maximum(amax / 1, 1e-8)
    q = np.clip(np.rint(w / s), -2, 1).astype(np.int32)
    o, i = w.shape
    out = np.zeros((o, (i + 3) // 4), np.uint8)
    for k in range(4):
        v = q[:, k::4]
        out[:, :v.shape[1]] |= ((v + 2).astype(np.uint8) << (k * 2))
    return out.reshape(-1), s[:, 0].astype(np.float32)


def quant_int3_g64(w):
    o, i = w.shape
    ng = (i + 63) // 64
    wp = np.pad(w, ((0, 0), (0, ng * 64 - i)))
    g = wp.reshape(o, ng, 64)
    s = np.maximum(np.abs(g).max(axis=2, keepdims=True) / 3.0, 1e-8)
    q = (np.clip(np.rint(g / s), -4, 3).astype(np.int32) + 4).astype(np.uint8)
    lo = np.zeros((o, ng, 16), np.uint8)
    hi = np.zeros((o, ng, 8), np.uint8)
    for k in range(4):
        lo |= ((q[:, :, k::4] & 3) << (k * 2)).astype(np.uint8)
    for k in range(8):
        hi |= (((q[:, :, k::8] >> 2) & 1) << k).astype(np.uint8)
    return np.concatenate([lo, hi], axis=2).reshape(-1), s[:, :, 0].astype(np.float32).reshape(-1)


def quant_int4_grouped(w, bits, gs):
    qmax = (1 << (bits - 1)) - 1
    o, i = w.shape
    ng = (i + gs - 1) // gs
    wpad = np.zeros((o, ng * gs), np.float32)
    wpad[:, :i] = w
    wr = wpad.reshape(o, ng, gs)
    s = np.maximum(np.abs(wr).max(axis=2, keepdims=True) / qmax, 1e-8)
    q = np.clip(np.rint(wr / s), -8, qmax).astype(np.int32).reshape(o, ng * gs)[:, :i]
    out = np.zeros((o, (i + 1) // 2), np.uint8)
    v0 = (q[:, 0::2] + 8).astype(np.uint8)
    out[:, :v0.shape[1]] = v0
    if i > 1:
        v1 = (q[:, 1::2] + 8).astype(np.uint8)
        out[:, :v1.shape[1]] |= (v1 << 4)
    return out.reshape(-1), s[:, :, 0].astype(np.float32).reshape(-1)


def main():
    src, _ = load_dir(sys.argv[1])
    out, meta = load_dir(sys.argv[2])
    mode = sys.argv[3]
    checked = 0
    for name in sorted(out):
        if not name + ".qs" in out:
            continue
        data = out[name][2]
        scales = np.frombuffer(out[name + ".qs"][2].tobytes(), dtype=np.float32)
        if mode == "fp8-passthrough":
            want, want_s = src[name][2], np.frombuffer(
                src[name + "_scale_inv"][2].tobytes(), dtype=np.float32)
            if out[name][1] != src[name][1]:
                print(f"{name}: shape {out[name][1]} is not the source's {src[name][1]}")
                return 1
        else:
            w = source_f32(src, name).astype(np.float32)
            if mode == "int2-row" and "embed_tokens" not in name and name != "lm_head.weight":
                want, want_s = quant_int2(w)
            elif mode == "int3-g64" and "embed_tokens" not in name and name != "lm_head.weight":
                want, want_s = quant_int3_g64(w)
            elif mode == "int4-g64-2bit":
                want, want_s = quant_int4_grouped(w, 2, 64)
            else:
                continue  # io stays int8-row (checked by the int8 tests)
        if data.tobytes() != np.asarray(want).tobytes():
            diff = np.nonzero(data != want)[0][0]
            print(f"{name}: byte {diff} is {data[diff]:#04x}, derivation {want[diff]:#04x}")
            return 1
        if scales.tobytes() != np.asarray(want_s, dtype=np.float32).tobytes():
            print(f"{name}.qs differs from the derivation")
            return 1
        checked += 1
    if mode == "fp8-passthrough":  # each shard stamps exactly its resident weights
        for shard, (md, names) in meta.items():
            stamps = json.loads(md.get("colibri.fmt", "{}"))
            want = {n: "fp8-e4m3-b128" for n in names
                    if n + ".qs" in names and any(r in n for r in RESIDENT)
                    and ".mlp.experts." not in n}
            if stamps != want or md.get("colibri.container.formats") != '["fp8-e4m3-b128"]':
                print(f"{shard}: stamps {sorted(stamps)} differ from the residents {sorted(want)}")
                return 1
    if checked == 0:
        print("no quantized output checked")
        return 1
    print(f"{checked} quantized outputs equal the derivation ({mode})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
