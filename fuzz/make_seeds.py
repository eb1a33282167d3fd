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
                         ("llama", "fp8-tensor"), ("qwen2", "bf16"), ("qwen3", "bf16"),
                         ("mistral", "bf16")):
            d = os.path.join(tmp, fam)
            subprocess.run([qrepack, "fixture", fam, "--encoding", enc, "-o", d], check=True,
                           stdout=subprocess.DEVNULL)
            with open(os.path.join(d, "config.json"), "rb") as f:
                write(out, "config_fuzz", fam + ".json", f.read())
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
