# Independent derivation of the Qwen3.8-Flash-Next experts-only int4 overlay (the engine's
# convert_qwen38_int4.py as reference/colibri-engines.md §1.5 describes it) from a source
# checkpoint, compared byte for byte with qrepack's output:
#   experts: BF16 fused model.language_model.layers.L.mlp.experts.gate_up_proj [E, 2I, H]
#            (gate = rows [0, I)) + down_proj [E, H, I], or per-expert F8_E4M3
#            <p>.experts.E.{gate,up,down}_proj.weight times BF16 weight_scale_inv 128x128
#            blocks; likewise under mtp.layers.N.
#   int4-gN: per row and group of N columns s = max(f32(amax / 7), f32(1e-8)),
#            q = clip(rint(w / s), -8, 7) (f32 division, half to even), nibble q + 8, element 2k
#            low; merged_weight U8 [gate | up | down bytes], qs F32 [gate | up | down scales].
#   files:   model-LLLLL.safetensors per layer, model-mtpNN.safetensors per MTP layer, no
#            __metadata__, the F32 qs tensors first by name, then the U8 merged_weight by name.
#   qwen38_int4.py SRC_DIR OUT_DIR [GROUP]
import json
import os
import re
import struct
import sys

import numpy as np

from st_formats import bf16, e4m3_table, read_dir, read_raw

E4M3 = e4m3_table()



def header(path):
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    return list(json.loads(data[8:8 + n]).keys())


def values(src, name):
    dt, shape, raw = src[name]
    if dt == "BF16":
        return bf16(raw, shape)
    assert dt == "F8_E4M3", (name, dt)
    sd, ss, sraw = src[name + "_scale_inv"]
    assert sd == "BF16", name
    s = bf16(sraw, ss)
    full = np.repeat(np.repeat(s, 128, axis=0), 128, axis=1)[:shape[0], :shape[1]]
    return E4M3[raw].reshape(shape) * full


def quant(w, gs):
    o, i = w.shape
    g = w.reshape(o, i // gs, gs)
    amax = np.abs(g).max(axis=2)
    s = np.maximum(amax / np.float32(7), np.float32(1e-8)).astype(np.float32)
    q = np.clip(np.rint(g / s[:, :, None]), -8, 7).astype(np.int32) + 8
    q = q.reshape(o, i).astype(np.uint8)
    return (q[:, 0::2] | (q[:, 1::2] << 4)).tobytes(), s.tobytes()


def units(src):
    found = {}
    for n in src:
        m = re.match(r"^((?:model\.language_model\.|mtp\.)layers\.(\d+))\.mlp\.experts\.", n)
        if m:
            found[m.group(1)] = (n.startswith("mtp."), int(m.group(2)))
    return found


def expert(src, unit, e, inter):
    fused = unit + ".mlp.experts.gate_up_proj"
    if fused in src:
        gu = values(src, fused)[e]
        return gu[:inter], gu[inter:], values(src, unit + ".mlp.experts.down_proj")[e]
    p = f"{unit}.mlp.experts.{e}."
    return tuple(values(src, p + k + "_proj.weight") for k in ("gate", "up", "down"))


def main():
    src_dir, out_dir = sys.argv[1], sys.argv[2]
    gs = int(sys.argv[3]) if len(sys.argv) > 3 else 64
    cfg = json.load(open(os.path.join(src_dir, "config.json")))
    text = cfg.get("text_config", cfg)
    n_exp, inter = text["num_experts"], text["moe_intermediate_size"]
    src = read_dir(src_dir)
    checked = 0
    want_files = set()
    for unit, (mtp, idx) in sorted(units(src).items()):
        fname = f"model-mtp{idx:02d}.safetensors" if mtp else f"model-{idx:05d}.safetensors"
        want_files.add(fname)
        path = os.path.join(out_dir, fname)
        got = read_raw(path)
        names = sorted(str(e) for e in range(n_exp))
        order = [f"{unit}.mlp.experts.{e}.qs" for e in names] + \
                [f"{unit}.mlp.experts.{e}.merged_weight" for e in names]
        if header(path) != order:
            raise SystemExit(f"{fname}: header order {header(path)[:4]}... is not {order[:4]}...")
        for e in range(n_exp):
            data, scales = b"", b""
            for w in expert(src, unit, e, inter):
                d, s = quant(w.astype(np.float32), gs)
                data, scales = data + d, scales + s
            p = f"{unit}.mlp.experts.{e}."
            for name, dt, want in ((p + "merged_weight", "U8", data), (p + "qs", "F32", scales)):
                gd, gshape, graw = got[name]
                if gd != dt or graw.tobytes() != want or gshape != [len(want) // (4 if dt == "F32" else 1)]:
                    raise SystemExit(f"{name}: differs from the derivation")
                checked += 1
    have = {f for f in os.listdir(out_dir) if f.endswith(".safetensors")}
    if have != want_files:
        raise SystemExit(f"output files {sorted(have)} are not {sorted(want_files)}")
    if not checked:
        raise SystemExit("nothing checked")
    print(f"qwen38_int4: {checked} tensors in {len(want_files)} files equal the derivation")


if __name__ == "__main__":
    main()
