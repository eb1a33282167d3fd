# Independent derivation of qrepack's source decoders. Reads a source checkpoint in any of the
# encodings of reference/formats.md §4 and §6 with its own safetensors reader and its own
# decode tables, computes every quantized weight in float32 exactly as its producer defines it,
# and requires qrepack's `convert --to f32` output to hold the same bits:
#   FP8 block      W = e4m3(q) * s[i // 128, j // 128]   (s F32; BF16: the high half of an F32;
#                                                         UE8M0: 2^(code - 127))
#   FP8 tensor     W = e4m3(q) * weight_scale
#   NVFP4 ModelOpt W = (e2m1(q) * e4m3(weight_scale)) * weight_scale_2       (left to right)
#   NVFP4 CT       W = e2m1(q) * (e4m3(weight_scale) / weight_global_scale)
# MiniMax source names are mapped to the engine's (block_sparse_moe -> mlp, w1/w3/w2 ->
# gate/up/down_proj) by this script's own rules.
#   source_encodings.py SRC_DIR F32_OUT_DIR
import sys

import numpy as np

from st_formats import bf16, e4m3_table, read_dir

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


def expected(src, name):
    dt, shape, raw = src[name]
    base = name[:-len("_packed")] if name.endswith("_packed") else name
    if dt == "F8_E4M3" and name + "_scale_inv" in src:
        sd, ss, sraw = src[name + "_scale_inv"]
        if sd == "F8_E8M0":
            s = ue8m0(sraw.reshape(ss))
        elif sd == "BF16":
            s = bf16(sraw, ss)
        else:
            s = f32(src[name + "_scale_inv"])
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


def main():
    src, out = read_dir(sys.argv[1]), read_dir(sys.argv[2])
    checked = {}
    for name in src:
        want, kind = expected(src, name)
        if want is None:
            continue
        base = name[:-len("_packed")] if name.endswith("_packed") else name
        got_t = out.get(engine_name(base))
        if got_t is None:
            raise SystemExit(f"{name}: no output {engine_name(base)}")
        if got_t[0] != "F32":
            continue  # a class the scheme keeps as stored
        got = f32(got_t)
        want = want.astype(np.float32)
        if got.shape != want.shape or not np.array_equal(got.view(np.uint32), want.view(np.uint32)):
            diff = np.argwhere(got.view(np.uint32) != want.view(np.uint32))
            i = tuple(diff[0]) if len(diff) else None
            raise SystemExit(f"{name} ({kind}): differs at {i}: {got[i] if i else got.shape} vs "
                             f"{want[i] if i else want.shape}")
        checked[kind] = checked.get(kind, 0) + 1
    if not checked:
        raise SystemExit("no quantized weight was checked")
    print("bit-exact:", ", ".join(f"{n} {k}" for k, n in sorted(checked.items())))


main()
