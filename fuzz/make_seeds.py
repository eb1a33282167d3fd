#!/usr/bin/python3
"""Seed corpora for the fuzz targets (scripts/fuzz.sh), made by qrepack's own fixtures and by
torch.save: small, valid inputs in each target's input form (fuzz/*_fuzz.cc).

usage: make_seeds.py QREPACK_BINARY OUT_DIR
"""
import io
import json
import os
import struct
import subprocess
import sys
import tempfile
import zipfile

import torch


def safetensors_bytes(tensors, metadata=None):
    header, data = {}, b""
    if metadata:
        header["__metadata__"] = metadata
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


def pickle_input(pt_bytes):
    """A .pt as the pickle targets take it: storage sizes, then data.pkl (pickle_input.h)."""
    z = zipfile.ZipFile(io.BytesIO(pt_bytes))
    names = z.namelist()
    root = names[0].split("/")[0]
    pkl = z.read(f"{root}/data.pkl")
    keys = sorted(int(n.rsplit("/", 1)[1]) for n in names if "/data/" in n)
    if keys != list(range(len(keys))) or len(keys) > 64:
        return None
    sizes = [z.getinfo(f"{root}/data/{k}").file_size for k in keys]
    if sum(sizes) > (1 << 20):
        return None
    return bytes([len(keys)]) + b"".join(struct.pack("<I", s) for s in sizes) + pkl


def torch_saved(obj):
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def gguf_bytes(kvs, tensors, align=32):
    """A GGUF v3 file: kvs [(key, type, packed value)], tensors [(name, dims, ggml type, data)]."""
    def gstr(x):
        b = x.encode()
        return struct.pack("<Q", len(b)) + b
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs))
    for k, t, v in kvs:
        head += gstr(k) + struct.pack("<I", t) + v
    off, data = 0, b""
    for name, dims, ty, b in tensors:
        head += gstr(name) + struct.pack("<I", len(dims)) + struct.pack("<%dQ" % len(dims), *dims)
        head += struct.pack("<IQ", ty, off)
        b += bytes(-len(b) % align)
        data += b
        off += len(b)
    return head + bytes(-len(head) % align) + data


def gguf_seeds(qrepack, out, tmp):
    fx = os.path.join(tmp, "gguf")
    subprocess.run([qrepack, "fixture", "olmoe-gguf", "-o", fx], check=True,
                   stdout=subprocess.DEVNULL)
    with open(os.path.join(fx, "olmoe-tiny.gguf"), "rb") as f:
        write(out, "gguf_fuzz", "olmoe_fixture.gguf", f.read())
    # A whole OLMoE at hidden 32 (block-32 types only), small enough to mutate quickly.
    u32 = lambda v: struct.pack("<I", v)
    string = lambda x: struct.pack("<Q", len(x.encode())) + x.encode()
    toks = ["<|endoftext|>", "a", "b", "\u0120a"]
    kvs = [("general.architecture", 8, string("olmoe"))]
    for k, v in (("embedding_length", 32), ("block_count", 1), ("attention.head_count", 2),
                 ("attention.head_count_kv", 2), ("expert_count", 2), ("expert_used_count", 1),
                 ("feed_forward_length", 32)):
        kvs.append(("olmoe." + k, 4, u32(v)))
    kvs += [("olmoe.rope.freq_base", 6, struct.pack("<f", 10000.0)),
            ("olmoe.attention.layer_norm_rms_epsilon", 6, struct.pack("<f", 1e-5)),
            ("tokenizer.ggml.tokens", 9, struct.pack("<IQ", 8, 4) + b"".join(map(string, toks))),
            ("tokenizer.ggml.token_type", 9, struct.pack("<IQ", 5, 4) + struct.pack("<4i", 3, 1, 1, 1)),
            ("tokenizer.ggml.merges", 9, struct.pack("<IQ", 8, 1) + string("a b")),
            ("tokenizer.ggml.eos_token_id", 4, u32(0))]
    q8 = (struct.pack("<e", 0.01) + bytes(range(32)))
    q4 = (struct.pack("<e", 0.02) + bytes(range(100, 116)))
    def mat(rows, ty):
        return (q8 if ty == 8 else q4) * rows
    ts = [("token_embd.weight", [32, 4], 8, mat(4, 8))]
    for n, ty in (("attn_q", 2), ("attn_k", 2), ("attn_v", 8), ("attn_output", 8)):
        ts.append(("blk.0.%s.weight" % n, [32, 32], ty, mat(32, ty)))
    for n in ("attn_norm", "ffn_norm", "attn_q_norm", "attn_k_norm"):
        ts.append(("blk.0.%s.weight" % n, [32], 0, struct.pack("<32f", *([1.0] * 32))))
    ts.append(("blk.0.ffn_gate_inp.weight", [32, 2], 1, struct.pack("<64e", *([0.5] * 64))))
    for n, ty in (("gate", 2), ("up", 8), ("down", 30)):
        data = mat(64, ty) if ty != 30 else struct.pack("<2048H", *([0x3f80] * 2048))
        ts.append(("blk.0.ffn_%s_exps.weight" % n, [32, 32, 2], ty, data))
    ts += [("output_norm.weight", [32], 0, struct.pack("<32f", *([1.0] * 32))),
           ("output.weight", [32, 4], 2, mat(4, 2))]
    write(out, "gguf_fuzz", "olmoe_small.gguf", gguf_bytes(kvs, ts))
    # One K-quant block of each type, and nested arrays.
    for ty, size in ((10, 84), (11, 110), (14, 210)):
        write(out, "gguf_fuzz", "k%d.gguf" % ty, gguf_bytes([], [("t", [256], ty, bytes(range(size)))]))
    nested = struct.pack("<IQ", 9, 2) + (struct.pack("<IQ", 4, 1) + u32(7)) * 2
    write(out, "gguf_fuzz", "nested.gguf", gguf_bytes([("a", 9, nested), ("general.alignment", 4, u32(64))], []))


def write(out, target, name, data):
    d = os.path.join(out, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def main():
    qrepack, out = sys.argv[1], sys.argv[2]
    f32 = struct.pack("<4f", 1.0, -2.0, 0.5, 3.0)
    write(out, "safetensors_fuzz", "two.safetensors",
          safetensors_bytes([("a.weight", "F32", [2, 2], f32), ("a.bias", "BF16", [2], b"\x80\x3f\x00\x40")],
                            {"format": "pt"}))
    write(out, "safetensors_fuzz", "fp8.safetensors",
          safetensors_bytes([("w", "F8_E4M3", [2, 4], bytes(range(0x30, 0x38))),
                             ("w_scale_inv", "F32", [1, 1], struct.pack("<f", 0.25))]))
    write(out, "safetensors_fuzz", "empty.safetensors", safetensors_bytes([]))

    index = {"metadata": {"total_size": 48},
             "weight_map": {"a.weight": "model-00001-of-00002.safetensors",
                            "a.bias": "model-00001-of-00002.safetensors",
                            "b.weight": "model-00002-of-00002.safetensors",
                            "b.bias": "model-00002-of-00002.safetensors"}}
    write(out, "index_fuzz", "index.json", json.dumps(index, indent=2).encode())

    # hub_api_fuzz: first byte 0 revision, 1 tree page, 2 Link header, 3 response headers.
    sha = "7c639cb32c34d0e39a4076ba6487bd13e786af21"
    write(out, "hub_api_fuzz", "revision.json", b"\x00" + json.dumps(
        {"id": "org/repo", "sha": sha, "siblings": [{"rfilename": "config.json"}]}).encode())
    tree = [{"type": "file", "path": "config.json", "size": 1100, "oid": sha},
            {"type": "directory", "path": "sub", "oid": sha},
            {"type": "file", "path": "model-00001-of-00002.safetensors", "size": 4096,
             "oid": sha, "lfs": {"oid": "ab" * 32, "size": 4096, "pointerSize": 134}}]
    write(out, "hub_api_fuzz", "tree.json", b"\x01" + json.dumps(tree).encode())
    write(out, "hub_api_fuzz", "link.txt",
          b'\x02<https://hub.example/api/models/o/r/tree/main?cursor=abc>; rel="next"')
    write(out, "hub_api_fuzz", "headers.txt",
          b"\x03HTTP/1.1 302 Found\r\nLocation: https://cdn.example/x\r\n"
          b'X-Linked-Etag: "' + b"cd" * 32 + b'"\r\nX-Linked-Size: 4096\r\n\r\n'
          b"HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 0-1023/4096\r\n"
          b"Content-Length: 1024\r\n\r\n")

    with tempfile.TemporaryDirectory() as tmp:
        fx = os.path.join(tmp, "fx")
        subprocess.run([qrepack, "fixture", "moe-fp8", "-o", fx, "--max-shard-size", "200kB"],
                       check=True, stdout=subprocess.DEVNULL)
        with open(os.path.join(fx, "config.json"), "rb") as f:
            write(out, "config_fuzz", "config.json", f.read())
        with open(os.path.join(fx, "model.safetensors.index.json"), "rb") as f:
            write(out, "index_fuzz", "fixture_index.json", f.read())
        # Every family's config.json, each in an encoding whose quantization_config differs.
        for fam, enc in (("deepseek-v3", "fp8-block-ue8m0"), ("kimi-k2", "fp8-block"),
                         ("minimax", "nvfp4-ct"), ("qwen3-moe", "nvfp4-modelopt"),
                         ("llama", "fp8-tensor"), ("qwen2", "bf16"), ("qwen3", "mlx-affine"),
                         ("mistral", "bf16")):
            d = os.path.join(tmp, fam)
            subprocess.run([qrepack, "fixture", fam, "--encoding", enc, "-o", d], check=True,
                           stdout=subprocess.DEVNULL)
            with open(os.path.join(d, "config.json"), "rb") as f:
                write(out, "config_fuzz", fam + ".json", f.read())
        gguf_seeds(qrepack, out, tmp)
        pack = os.path.join(tmp, "pack.pt")
        subprocess.run([qrepack, "fixture", "omega-pack", "--small", "-o", pack], check=True,
                       stdout=subprocess.DEVNULL)
        with open(pack, "rb") as f:
            pack_bytes = f.read()

    saved = {
        "state_dict.pt": torch_saved({"w": torch.arange(6, dtype=torch.float16).reshape(2, 3),
                                      "b": torch.ones(3), "n": torch.zeros(2, dtype=torch.int64)}),
        "nested.pt": torch_saved({"meta": {"k": [1, 2, "x", None, True]},
                                  "t": torch.arange(8, dtype=torch.bfloat16)[::2]}),
        "tied.pt": (lambda t: torch_saved({"a": t, "b": t}))(torch.ones(4)),
    }
    if len(pack_bytes) <= (4 << 20):
        saved["omega_small.pt"] = pack_bytes
    for name, data in saved.items():
        write(out, "zip_fuzz", name, data)
        write(out, "pt_fuzz", name, data)
        p = pickle_input(data)
        if p is not None:
            write(out, "pickle_fuzz", name + ".in", p)
    p = pickle_input(pack_bytes)
    if p is not None:
        write(out, "omega_pack_fuzz", "omega_small.in", p)
        write(out, "pickle_fuzz", "omega_small.in", p)


if __name__ == "__main__":
    main()
