#!/usr/bin/env python3
"""Independent derivation of qrepack's colibri-kimi-k3 container, written from upstream
k3_repack.py's rules as reference/colibri-engines.md section 1.12 states them (not from
qrepack's code). Rebuilds every expected output file byte for byte with numpy and compares.

  kimi_k3.py expect SRC OUT [--bits 8|4] [--mla-bits N] [--head-bits N]
  kimi_k3.py mutate SRC DST (--drop NAME | --rename OLD NEW | --reshape NAME ROWS COLS
                             | --kda-layers L,L,...)   a copy of SRC with one thing changed
  kimi_k3.py damage DIR NAME   flips the first data byte of tensor NAME in place

Rules: shards model-NNNNN-of-000096 (NNNNN 1..94) -> model-NNNNN-of-000094; vision_tower* /
mm_projector* skipped; per file the other tensors in source data order, then experts sorted by
(expert id, w1|w2|w3, packed|scale), stable; classes bits (KDA q/k/v/o/g_proj, latent and shared
experts, dense mlp), mla (q_a/q_b/kv_a/kv_b and MLA-layer o/g_proj), head (lm_head): int8 per row
(s = max(amax/127, 1e-20), q = clip(rint(x * f32(1/s)), -127, 127)) or int4-g64 when bits <= 4
and I % 64 == 0 (s = max(amax/7, 1e-20), clip(-8, 7) + 8, low nibble = even column); header
json.dumps(separators=(",", ":")) in plan order padded with spaces to 8; index json.dump.
Exit 0 when every byte matches, 1 with one line per difference otherwise.
"""
import json
import os
import shutil
import struct
import sys

import numpy as np

WIDTH = {"F64": 8, "F32": 4, "BF16": 2, "F16": 2, "U8": 1, "I8": 1, "I64": 8, "I32": 4}
COPIED = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json")


def read_header(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        hdr = json.loads(f.read(n))
    hdr.pop("__metadata__", None)
    return hdr, 8 + n


def read_tensors(path):
    """name -> (dtype, shape, bytes), in data order."""
    hdr, base = read_header(path)
    with open(path, "rb") as f:
        data = f.read()
    items = sorted(hdr.items(), key=lambda kv: kv[1]["data_offsets"][0])
    return [(k, v["dtype"], v["shape"], data[base + v["data_offsets"][0]:base + v["data_offsets"][1]])
            for k, v in items]


def to_f32(dtype, raw, shape):
    if dtype == "BF16":
        u = np.frombuffer(raw, np.uint16).astype(np.uint32) << 16
        return u.view(np.float32).reshape(shape)
    if dtype == "F16":
        return np.frombuffer(raw, np.float16).astype(np.float32).reshape(shape)
    return np.frombuffer(raw, np.float32).reshape(shape)


def kda_layers(src):
    cfg = json.load(open(os.path.join(src, "config.json")))
    tc = cfg.get("text_config", cfg)
    return set(x - 1 for x in tc["linear_attn_config"]["kda_layers"])


def classify(name, kda):
    """-> 'skip' | 'expert' | 'pass' | ('quant', class)"""
    if name.startswith("vision_tower") or name.startswith("mm_projector"):
        return "skip"
    n = name[len("language_model."):] if name.startswith("language_model.") else name
    if ".block_sparse_moe.experts." in n:
        return "expert"
    if n == "lm_head.weight":
        return ("quant", "head")
    parts = n.split(".")
    layer = int(parts[2]) if len(parts) > 3 and parts[1] == "layers" else -1
    if ".self_attn." in n and n.endswith(".weight"):
        leaf = parts[-2]
        if leaf in ("q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj"):
            return ("quant", "mla")
        if leaf in ("q_proj", "k_proj", "v_proj"):
            return ("quant", "bits")
        if leaf in ("o_proj", "g_proj"):
            return ("quant", "bits" if layer in kda else "mla")
        return "pass"
    for leaf in ("routed_expert_down_proj", "routed_expert_up_proj", "shared_experts.gate_proj",
                 "shared_experts.up_proj", "shared_experts.down_proj", "mlp.gate_proj",
                 "mlp.up_proj", "mlp.down_proj"):
        if n.endswith(leaf + ".weight"):
            return ("quant", "bits")
    return "pass"


def expert_key(name):
    p = name.split(".experts.")[1].split(".")
    return (int(p[0]), {"w1": 0, "w2": 1, "w3": 2}[p[1]], 0 if p[2].endswith("packed") else 1)


def int8_rows(x):
    s = np.maximum((np.abs(x).max(axis=1) / np.float32(127)).astype(np.float32), np.float32(1e-20))
    inv = (np.float32(1) / s).astype(np.float32)
    q = np.clip(np.rint(x * inv[:, None]), -127, 127).astype(np.int8)
    return q.tobytes(), list(x.shape), s.astype(np.float32).tobytes(), [x.shape[0]]


def int4_g64(x):
    n, cols = x.shape
    g = x.reshape(n, cols // 64, 64)
    s = np.maximum((np.abs(g).max(axis=2) / np.float32(7)).astype(np.float32), np.float32(1e-20))
    inv = (np.float32(1) / s).astype(np.float32)
    q = (np.clip(np.rint(g * inv[:, :, None]), -8, 7).astype(np.int32) + 8).reshape(n, cols)
    packed = (q[:, 0::2] | (q[:, 1::2] << 4)).astype(np.uint8)
    return packed.tobytes(), [n, cols // 2], s.astype(np.float32).tobytes(), [n, cols // 64]


def header(entries):
    oh, off = {}, 0
    for name, dt, shape, nb in entries:
        oh[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + nb]}
        off += nb
    js = json.dumps(oh, separators=(",", ":")).encode()
    js += b" " * ((-(8 + len(js))) % 8)
    return struct.pack("<Q", len(js)) + js


def expect_file(path, kda, bits):
    tensors = read_tensors(path)
    rest = [t for t in tensors if classify(t[0], kda) not in ("skip", "expert")]
    experts = sorted((t for t in tensors if classify(t[0], kda) == "expert"),
                     key=lambda t: expert_key(t[0]))
    entries, blobs = [], []
    for name, dt, shape, raw in rest + experts:
        kind = classify(name, kda)
        if isinstance(kind, tuple):
            b = bits[kind[1]]
            x = to_f32(dt, raw, shape)
            q, qshape, s, sshape = int4_g64(x) if b <= 4 and shape[1] % 64 == 0 else int8_rows(x)
            entries += [(name, "U8", qshape, len(q)),
                        (name + ".qs", "F32", sshape, len(s))]
            blobs += [q, s]
        else:
            entries.append((name, dt, shape, len(raw)))
            blobs.append(raw)
    return header(entries) + b"".join(blobs), [e[0] for e in entries], sum(e[3] for e in entries)


def expect(src, out, bits):
    kda = kda_layers(src)
    problems, index, total = [], {}, 0
    for num in range(1, 95):
        sp = os.path.join(src, f"model-{num:05d}-of-000096.safetensors")
        if not os.path.exists(sp):
            continue
        dname = f"model-{num:05d}-of-000094.safetensors"
        want, names, size = expect_file(sp, kda, bits)
        total += size
        for n in names:
            index[n] = dname
        dp = os.path.join(out, dname)
        got = open(dp, "rb").read() if os.path.exists(dp) else None
        if got != want:
            problems.append(f"{dname}: differs ({'missing' if got is None else len(got)} vs "
                            f"{len(want)} bytes)")
    idx = json.dumps({"metadata": {"total_size": total}, "weight_map": index}).encode()
    if open(os.path.join(out, "model.safetensors.index.json"), "rb").read() != idx:
        problems.append("model.safetensors.index.json differs")
    for f in COPIED:
        if os.path.exists(os.path.join(src, f)) and \
                open(os.path.join(src, f), "rb").read() != open(os.path.join(out, f), "rb").read():
            problems.append(f"{f} is not a copy")
    allowed = set(index.values()) | set(COPIED) | {"model.safetensors.index.json", "qrepack.json"}
    for f in sorted(os.listdir(out)):
        if f not in allowed:
            problems.append(f"unexpected file {f}")
    for p in problems:
        print(p)
    return 1 if problems else 0


def write_st(path, tensors):
    """tensors: list of (name, dtype, shape, bytes) in data order; metadata format pt."""
    oh, off = {"__metadata__": {"format": "pt"}}, 0
    for name, dt, shape, raw in tensors:
        oh[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(raw)]}
        off += len(raw)
    js = json.dumps(oh, separators=(",", ":")).encode()
    js += b" " * ((-len(js)) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(js)) + js + b"".join(t[3] for t in tensors))


def mutate(src, dst, args):
    shutil.copytree(src, dst)
    if args[0] == "--kda-layers":
        p = os.path.join(dst, "config.json")
        cfg = json.load(open(p))
        cfg["text_config"]["linear_attn_config"]["kda_layers"] = [int(x) for x in args[1].split(",")]
        json.dump(cfg, open(p, "w"), indent=2)
        return 0
    idx_path = os.path.join(dst, "model.safetensors.index.json")
    idx = json.load(open(idx_path))
    name = args[1]
    shard = os.path.join(dst, idx["weight_map"][name])
    tensors = read_tensors(shard)
    out = []
    for t in tensors:
        if t[0] != name:
            out.append(t)
        elif args[0] == "--rename":
            out.append((args[2], t[1], t[2], t[3]))
            idx["weight_map"][args[2]] = idx["weight_map"].pop(name)
        elif args[0] == "--reshape":
            rows, cols = int(args[2]), int(args[3])
            out.append((t[0], t[1], [rows, cols], bytes(rows * cols * WIDTH[t[1]])))
    if args[0] == "--drop":
        del idx["weight_map"][name]
    write_st(shard, out)
    json.dump(idx, open(idx_path, "w"), indent=2)
    return 0


def damage(d, name):
    idx = json.load(open(os.path.join(d, "model.safetensors.index.json")))
    path = os.path.join(d, idx["weight_map"][name])
    hdr, base = read_header(path)
    with open(path, "r+b") as f:
        f.seek(base + hdr[name]["data_offsets"][0])
        b = f.read(1)
        f.seek(base + hdr[name]["data_offsets"][0])
        f.write(bytes([b[0] ^ 0xFF]))
    return 0


def main():
    if sys.argv[1] == "mutate":
        return mutate(sys.argv[2], sys.argv[3], sys.argv[4:])
    if sys.argv[1] == "damage":
        return damage(sys.argv[2], sys.argv[3])
    src, out, rest = sys.argv[2], sys.argv[3], sys.argv[4:]
    opts = {rest[i]: int(rest[i + 1]) for i in range(0, len(rest), 2)}
    b = opts.get("--bits", 8)
    bits = {"bits": b, "mla": opts.get("--mla-bits", max(b, 8)),
            "head": opts.get("--head-bits", max(b, 8))}
    return expect(src, out, bits)


if __name__ == "__main__":
    sys.exit(main())
