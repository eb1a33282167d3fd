#!/usr/bin/python3
"""Makes a tied-embeddings copy of a checkpoint directory, as Qwen2-0.5B / Qwen3-0.6B ship:
every shard rewritten without lm_head.weight (the other tensors' bytes unchanged, in their
order), the index's weight_map without it, config.json (and text_config) with
tie_word_embeddings true; every other file copied.

usage: tie_embeddings.py SRC_DIR OUT_DIR   (OUT_DIR must not exist)
"""
import json
import os
import shutil
import struct
import sys

HEAD = "lm_head.weight"


def read_header(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        return header, f.read()


def rewrite_shard(src, dst):
    header, data = read_header(src)
    entries = [(k, v) for k, v in header.items() if k != "__metadata__"]
    entries.sort(key=lambda kv: kv[1]["data_offsets"][0])
    out, blobs, at, dropped = {}, [], 0, 0
    if "__metadata__" in header:
        out["__metadata__"] = header["__metadata__"]
    for name, e in entries:
        b, end = e["data_offsets"]
        if name == HEAD:
            dropped = end - b
            continue
        out[name] = {"dtype": e["dtype"], "shape": e["shape"], "data_offsets": [at, at + end - b]}
        blobs.append(data[b:end])
        at += end - b
    text = json.dumps(out, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(dst, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))
    return dropped


def main():
    src, out = sys.argv[1], sys.argv[2]
    os.makedirs(out)
    dropped, index_files = 0, []
    for fn in sorted(os.listdir(src)):
        s, d = os.path.join(src, fn), os.path.join(out, fn)
        if fn.endswith(".safetensors"):
            dropped += rewrite_shard(s, d)
        elif fn == "config.json":
            cfg = json.load(open(s))
            cfg["tie_word_embeddings"] = True
            if "text_config" in cfg:
                cfg["text_config"]["tie_word_embeddings"] = True
            json.dump(cfg, open(d, "w"), indent=2)
        elif fn.endswith(".index.json"):
            ix = json.load(open(s))
            ix["weight_map"].pop(HEAD, None)
            index_files.append((ix, d))
        elif os.path.isfile(s) and not (fn.startswith("ref") and fn.endswith(".json")):
            shutil.copyfile(s, d)
    for ix, d in index_files:  # total_size without the head, written once it is known
        if "total_size" in ix.get("metadata", {}):
            ix["metadata"]["total_size"] -= dropped
        json.dump(ix, open(d, "w"), indent=2)
    if not dropped:
        sys.exit(f"{src}: no {HEAD} to tie")


if __name__ == "__main__":
    main()
