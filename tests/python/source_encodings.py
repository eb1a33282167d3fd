# Independent derivation of qrepack's source decoders. Reads a source checkpoint in any of the
# encodings of reference/formats.md §4 and §6 with its own safetensors reader and its own
# decode tables, computes every quantized weight in float32 exactly as its producer defines it,
# and requires qrepack's `convert --to f32` output to hold the same bits:
#   FP8 block      W = e4m3(q) * s[i // 128, j // 128]   (s F32; BF16: the high half of an F32;
#                                                         F16: widened exactly;
#                                                         UE8M0: 2^(code - 127))
#   FP8 tensor     W = e4m3(q) * weight_scale
#   NVFP4 ModelOpt W = (e2m1(q) * e4m3(weight_scale)) * weight_scale_2       (left to right)
#   NVFP4 CT       W = e2m1(q) * (e4m3(weight_scale) / weight_global_scale)
#   FP8 tiles      W = e4m3(q) * 2^(s - 127), s from "<p>.scale" over 128x128 blocks, 32x32 tiles
#                  or row groups of 32, whichever grid the scale's shape is (DeepSeek V4 / V4.1)
#   MXFP4          W = e2m1(q) * 2^(e - 127), one e per row group of 32 (U8 weight_packed + U8
#                  weight_scale, or I8 "<p>.weight" + F8_E8M0 "<p>.scale")
#   int4 CT        W = (nibble - 8) * f32(bf16 scale), eight nibbles per little-endian I32 word,
#                  lowest column in the lowest bits; the group is I / (scale columns)
#   MLX affine     W = s * q + b in float32 (a multiply, then an add), q unsigned, 32 / bits codes
#                  per little-endian U32 word, lowest column in the lowest bits; s and b per
#                  group from "<p>.scales" / "<p>.biases"; bits and group from config.json's
#                  "quantization" block (per-module entries first); mlx-lm's stacked
#                  "<l>.mlp.switch_mlp.<proj>.weight" [E, O, ..] is expert e's "<l>.mlp.experts.e.<proj>"
# MiniMax source names are mapped to the engine's (block_sparse_moe -> mlp, w1/w3/w2 ->
# gate/up/down_proj) by this script's own rules.
#   source_encodings.py SRC_DIR F32_OUT_DIR
import json
import os
import sys

import numpy as np

from st_formats import bf16, e4m3_table, floats, read_dir

E2M1 = np.array([0, .5, 1, 1.5, 2, 3, 4, 6, -0., -.5, -1, -1.5, -2, -3, -4, -6], dtype=np.float32)


E4M3 = e4m3_table()


def ue8m0(codes):
    assert not np.any(codes == 0xFF)
    return np.ldexp(np.ones(codes.shape, dtype=np.float64), codes.astype(np.int64) - 127).astype(np.float32)



def engine_name(n):
    if ".block_sparse_moe.e_score_correction_bias" in n:
        return n.replace(".block_sparse_moe.e_score_correction_bias", ".mlp.gate.e_score_correction_bias")
    n = n.replace(".block_sparse_moe.", ".mlp.")
    if ".mlp.experts." in n:
        for a, b in ((".w1.", ".gate_proj."), (".w3.", ".up_proj."), (".w2.", ".down_proj.")):
            if a in n:
                return n.replace(a, b)
    return n


def f32(t):
    return t[2].view("<f4").reshape(t[1])


def grid(shape, br, bc):
    return [-(-shape[0] // br), -(-shape[1] // bc)]


def nibbles(raw, rows, cols):
    q = raw.reshape(rows, cols // 2)
    codes = np.empty((rows, cols), dtype=np.uint8)
    codes[:, 0::2] = q & 0x0F
    codes[:, 1::2] = q >> 4
    return codes


def packed4(src, name):
    dt, shape, raw = src[name]
    prefix = name[:-len(".weight")] if name.endswith(".weight") else None
    if dt == "F8_E4M3" and prefix and prefix + ".scale" in src:
        sd, ss, sraw = src[prefix + ".scale"]
        assert sd == "F8_E8M0", sd
        br, bc = next(b for b in ((128, 128), (32, 32), (1, 32)) if grid(shape, *b) == list(ss))
        s = ue8m0(sraw.reshape(ss))
        full = np.repeat(np.repeat(s, br, axis=0), bc, axis=1)[:shape[0], :shape[1]]
        return E4M3[raw].reshape(shape) * full, f"fp8-block{br}x{bc}-ue8m0"
    mx_scale = None
    if dt == "I8" and prefix and prefix + ".scale" in src:
        mx_scale = src[prefix + ".scale"]
    if dt == "U8" and name.endswith("_packed") and src.get(name[:-7] + "_scale", ("",))[0] == "U8":
        mx_scale = src[name[:-7] + "_scale"]
    if mx_scale is not None:
        rows, cols = shape[0], shape[1] * 2
        e = np.repeat(ue8m0(mx_scale[2].reshape(rows, cols // 32)), 32, axis=1)
        return E2M1[nibbles(raw, rows, cols)] * e, "mxfp4"
    if dt == "I32" and name.endswith("_packed"):
        base = name[:-7]
        rows, cols = shape[0], shape[1] * 8
        if base + "_shape" in src:
            assert list(src[base + "_shape"][2].view("<i4")) == [rows, cols]
        sd, ss, sraw = src[base + "_scale"]
        assert sd == "BF16", sd
        group = cols // ss[1]
        q = nibbles(raw.view(np.uint8), rows, cols).astype(np.float32) - 8
        return q * np.repeat(bf16(sraw, ss), group, axis=1)[:, :cols], "int4-ct"
    return None, None


def mlx_affine(src, config, name):
    """[(output name, float32 matrix)] of an MLX affine weight, or None."""
    dt, shape, raw = src[name]
    module = name[:-len(".weight")]
    if dt != "U32" or not name.endswith(".weight") or module + ".scales" not in src:
        return None
    q = config["quantization"]
    p = q.get(module, q)
    bits, group = p["bits"], p["group_size"]
    per = 32 // bits
    words = raw.view("<u4").reshape(shape)
    shifts = (bits * np.arange(per)).astype(np.uint32)
    codes = (words[..., None] >> shifts) & np.uint32((1 << bits) - 1)
    codes = codes.reshape(shape[:-1] + [shape[-1] * per]).astype(np.float32)
    s = np.repeat(floats(src[module + ".scales"]), group, axis=-1)
    b = np.repeat(floats(src[module + ".biases"]), group, axis=-1)
    w = (s * codes).astype(np.float32) + b
    if len(shape) == 2:
        return [(name, w)]
    layer, proj = module.split(".mlp.switch_mlp.")
    return [(f"{layer}.mlp.experts.{e}.{proj}.weight", w[e]) for e in range(shape[0])]


def expected(src, name):
    dt, shape, raw = src[name]
    want, kind = packed4(src, name)
    if want is not None:
        return want, kind
    base = name[:-len("_packed")] if name.endswith("_packed") else name
    if dt == "F8_E4M3" and name + "_scale_inv" in src:
        sd, ss, sraw = src[name + "_scale_inv"]
        s = ue8m0(sraw.reshape(ss)) if sd == "F8_E8M0" else floats(src[name + "_scale_inv"])
        full = np.repeat(np.repeat(s, 128, axis=0), 128, axis=1)[:shape[0], :shape[1]]
        return E4M3[raw].reshape(shape) * full, "fp8-block-" + sd
    if dt == "F8_E4M3" and name + "_scale" in src:
        return E4M3[raw].reshape(shape) * f32(src[name + "_scale"]).reshape(()), "fp8-tensor"
    if dt == "U8" and base + "_scale" in src:
        q = raw.reshape(shape)
        codes = np.empty((shape[0], shape[1] * 2), dtype=np.uint8)
        codes[:, 0::2] = q & 0x0F  # element 2k in the low nibble
        codes[:, 1::2] = q >> 4
        lut = E2M1[codes]
        bs = np.repeat(E4M3[src[base + "_scale"][2]].reshape(shape[0], -1), 16, axis=1)
        if name.endswith("_packed"):
            g = f32(src[base + "_global_scale"]).reshape(())
            return lut * (bs / g), "nvfp4-ct"
        g = f32(src[base + "_scale_2"]).reshape(())
        return (lut * bs) * g, "nvfp4-modelopt"
    return None, None


def compare(name, kind, got, want):
    want = want.astype(np.float32)
    if got.shape != want.shape or not np.array_equal(got.view(np.uint32), want.view(np.uint32)):
        diff = np.argwhere(got.view(np.uint32) != want.view(np.uint32)) if got.shape == want.shape else []
        i = tuple(diff[0]) if len(diff) else None
        raise SystemExit(f"{name} ({kind}): differs at {i}: {got[i] if i else got.shape} vs "
                         f"{want[i] if i else want.shape}")


def main():
    src, out = read_dir(sys.argv[1]), read_dir(sys.argv[2])
    config = json.load(open(os.path.join(sys.argv[1], "config.json")))
    checked = {}
    for name in src:
        outputs = mlx_affine(src, config, name)
        if outputs is not None:
            for out_name, want in outputs:
                got_t = out.get(engine_name(out_name))
                if got_t is None:
                    raise SystemExit(f"{name}: no output {engine_name(out_name)}")
                if got_t[0] == "F32":
                    compare(out_name, "mlx-affine", f32(got_t), want)
                    checked["mlx-affine"] = checked.get("mlx-affine", 0) + 1
            continue
        want, kind = expected(src, name)
        if want is None:
            continue
        base = name[:-len("_packed")] if name.endswith("_packed") else name
        got_t = out.get(engine_name(base))
        if got_t is None:
            raise SystemExit(f"{name}: no output {engine_name(base)}")
        if got_t[0] != "F32":
            continue  # a class the scheme keeps as stored
        compare(name, kind, f32(got_t), want)
        checked[kind] = checked.get(kind, 0) + 1
    if not checked:
        raise SystemExit("no quantized weight was checked")
    print("bit-exact:", ", ".join(f"{n} {k}" for k, n in sorted(checked.items())))


main()
