# Independent derivation of Qwen3.8-Flash-Next's experts-int4g64/ sidecar
# (convert_qwen38_experts_int4.py as reference/colibri-engines.md §9.2 describes it) from a
# source snapshot, compared byte for byte with qrepack's output:
#   experts:  the text layers' routed experts under the prefix that has embed_tokens
#             (model.language_model or model): per expert F8_E4M3 times a BF16 / F16 / F32
#             128x128 weight_scale_inv (one f32 multiply), or float per expert, or float fused
#             gate_up_proj [E, 2I, H] (gate = rows [0, I)) / down_proj [E, H, I]
#   quantize: per row and group of 64 (the tail zero-padded) s = f32(max(amax, f32 1e-12)) / 7
#             and q = rint(w / s) (f32 divisions, half to even) clipped to [-8, 7], stored q + 8
#   codes:    "planar64-v8": per 64 inputs 32 bytes, byte k = code k | code k + 32 << 4; a tail
#             in pairs (low = even), an odd tail padded with nibble 8; rows of ceil(C/2) bytes
#   files:    layer-NNN.safetensors: per expert gate, up, down codes then their scales, back to
#             back; compact header, "__metadata__" last {format, version "1", layer}, spaces
#             until 8 + header is a multiple of 4096. index.json: json.dump(indent=1) + newline.
#   qwen38_sidecar.py SRC_DIR OUT_DIR
import hashlib
import json
import os
import struct
import sys

import numpy as np

from st_formats import e4m3_table, floats, read_raw

E4M3 = e4m3_table()
PROJ = ("gate_proj", "up_proj", "down_proj")
FORMAT = "colibri.qwen38.experts-int4g64"


def shards_of(d):
    index = os.path.join(d, "model.safetensors.index.json")
    if os.path.isfile(index):
        return sorted(set(json.load(open(index))["weight_map"].values()))
    return sorted(f for f in os.listdir(d) if f.endswith(".safetensors"))


def matrix(src, prefix, l, e, j, shape):
    name = f"{prefix}.layers.{l}.mlp.experts.{e}.{PROJ[j]}.weight"
    if name in src:
        dt, s, raw = src[name]
        assert list(s) == list(shape), name
        if dt == "F8_E4M3":
            scale = floats(src[name + "_scale_inv"])
            full = np.repeat(np.repeat(scale, 128, 0), 128, 1)[:shape[0], :shape[1]]
            return E4M3[raw].reshape(shape) * full
        return floats(src[name])
    fused = f"{prefix}.layers.{l}.mlp.experts.{'down_proj' if j == 2 else 'gate_up_proj'}"
    w = floats(src[fused])[e]
    return w if j == 2 else w[j * shape[0]:(j + 1) * shape[0]]


def quantize(w):
    rows, cols = w.shape
    groups = -(-cols // 64)
    x = np.zeros((rows, groups * 64), np.float32)
    x[:, :cols] = w
    x = x.reshape(rows, groups, 64)
    amax = np.abs(x).max(axis=2)
    scale = np.maximum(amax, np.float32(1e-12)) / np.float32(7)
    q = np.clip(np.rint(x / scale[:, :, None]), -8, 7).astype(np.int32) + 8
    return q.reshape(rows, groups * 64)[:, :cols].astype(np.uint8), scale.astype(np.float32)


def planar(codes):
    rows, cols = codes.shape
    body = cols // 64 * 64
    out = []
    for r in range(rows):
        c = codes[r]
        blocks = c[:body].reshape(-1, 2, 32)
        row = (blocks[:, 0, :] | (blocks[:, 1, :] << 4)).reshape(-1)
        tail = c[body:]
        if len(tail) % 2:
            tail = np.concatenate([tail, [8]])
        row = np.concatenate([row, tail[0::2] | (tail[1::2] << 4)]).astype(np.uint8)
        out.append(row.tobytes())
    return b"".join(out)


def layer_file(src, prefix, l, experts, hidden, inter):
    entries, blobs, off = [], [], 0
    for e in range(experts):
        codes, scales = [], []
        for j in range(3):
            shape = (hidden, inter) if j == 2 else (inter, hidden)
            q, s = quantize(matrix(src, prefix, l, e, j, shape))
            codes.append((q.shape[0], (q.shape[1] + 1) // 2, planar(q)))
            scales.append(s)
        for j in range(3):
            rows, width, data = codes[j]
            name = f"{prefix}.layers.{l}.mlp.experts.{e}.{PROJ[j]}.weight"
            entries.append((name, "U8", [rows, width], off, off + len(data)))
            blobs.append(data)
            off += len(data)
        for j in range(3):
            data = scales[j].astype("<f4").tobytes()
            name = f"{prefix}.layers.{l}.mlp.experts.{e}.{PROJ[j]}.weight.qs"
            entries.append((name, "F32", list(scales[j].shape), off, off + len(data)))
            blobs.append(data)
            off += len(data)
    head = ",".join('"%s":{"dtype":"%s","shape":[%s],"data_offsets":[%d,%d]}'
                    % (n, dt, ",".join(map(str, sh)), a, b) for n, dt, sh, a, b in entries)
    head = '{%s,"__metadata__":{"format":"%s","version":"1","layer":"%d"}}' % (head, FORMAT, l)
    head += " " * (-(8 + len(head)) % 4096)
    record = off // experts
    return struct.pack("<Q", len(head)) + head.encode() + b"".join(blobs), record


def main():
    src_dir, out_dir = sys.argv[1:3]
    config_bytes = open(os.path.join(src_dir, "config.json"), "rb").read()
    config = json.loads(config_bytes)
    text = config.get("text_config", config)
    layers, experts = int(text["num_hidden_layers"]), int(text["num_experts"])
    hidden, inter = int(text["hidden_size"]), int(text["moe_intermediate_size"])
    src, shard_size = {}, {}
    for s in shards_of(src_dir):
        path = os.path.join(src_dir, s)
        tensors = read_raw(path)
        src.update(tensors)
        if any(".mlp.experts." in n for n in tensors):
            shard_size[s] = os.path.getsize(path)
    prefix = next(p for p in ("model.language_model", "model") if p + ".embed_tokens.weight" in src)
    bad, record = 0, 0
    for l in range(layers):
        want, record = layer_file(src, prefix, l, experts, hidden, inter)
        name = "layer-%03d.safetensors" % l
        got = open(os.path.join(out_dir, name), "rb").read()
        if got != want:
            at = next((i for i in range(min(len(got), len(want))) if got[i] != want[i]), None)
            print(f"{name}: differs (sizes {len(got)} / {len(want)}, first byte {at})")
            bad += 1
    index = {"format": FORMAT, "version": 1, "complete": True, "group_size": 64,
             "codes": "planar64-v8", "scales": "f32-per-64", "layers": layers, "experts": experts,
             "hidden_size": hidden, "moe_intermediate_size": inter, "prefix": prefix,
             "record_bytes": record,
             "record": ["gate codes", "up codes", "down codes", "gate scales", "up scales",
                        "down scales"],
             "quantizer": "per 64 inputs: scale = max(absmax, 1e-12)/7 (f32), code = rint(w/scale) "
                          "clamped to [-8,7], stored v+8 (tools/convert_qwen36.py "
                          "quantize_row_grouped)",
             "files": ["layer-%03d.safetensors" % l for l in range(layers)],
             "done": list(range(layers)),
             "source": {"config_sha256": hashlib.sha256(config_bytes).hexdigest(),
                        "shards": dict(sorted(shard_size.items()))}}
    want = (json.dumps(index, indent=1) + "\n").encode()
    if open(os.path.join(out_dir, "index.json"), "rb").read() != want:
        print("index.json differs")
        bad += 1
    print(f"qwen38_sidecar: {layers} layer files and index.json checked, {bad} differ")
    return 1 if bad else 0


sys.exit(main())
