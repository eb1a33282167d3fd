#!/usr/bin/python3
"""Makes a tied-embeddings copy of a checkpoint directory, as Qwen2-0.5B / Qwen3-0.6B ship:
every shard rewritten without lm_head.weight (the other tensors' bytes unchanged, in their
order; a shard left empty is dropped and the rest renumbered model-0000i-of-0000M), the index's
weight_map without it, config.json (and text_config) with tie_word_embeddings true; every other
file copied but the source's oracles (ref*.json).

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


def without_head(header, data):
    """(bytes of lm_head dropped, the new padded header JSON or None when no tensor is left,
    the data)."""
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
    if len(out) == ("__metadata__" in out):
        return dropped, None, b""
    text = json.dumps(out, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return dropped, text, b"".join(blobs)


def main():
    src, out = sys.argv[1], sys.argv[2]
    os.makedirs(out)
    dropped, kept, index = 0, [], None
    for fn in sorted(os.listdir(src)):
        s, d = os.path.join(src, fn), os.path.join(out, fn)
        if fn.endswith(".safetensors"):
            header, data = read_header(s)
            drop, text, blob = without_head(header, data)
            dropped += drop
            if text is not None:
                kept.append((fn, text, blob))
        elif fn == "config.json":
            cfg = json.load(open(s))
            cfg["tie_word_embeddings"] = True
            if "text_config" in cfg:
                cfg["text_config"]["tie_word_embeddings"] = True
            json.dump(cfg, open(d, "w"), indent=2)
        elif fn.endswith(".index.json"):
            index = (json.load(open(s)), d)
        elif os.path.isfile(s) and not (fn.startswith("ref") and fn.endswith(".json")):
            shutil.copyfile(s, d)
    if not dropped:
        sys.exit(f"{src}: no {HEAD} to tie")
    names = {fn: fn for fn, _, _ in kept}
    if index is not None and len(kept) > 1:
        names = {fn: f"model-{i + 1:05d}-of-{len(kept):05d}.safetensors"
                 for i, (fn, _, _) in enumerate(kept)}
    elif index is not None:
        names = {kept[0][0]: "model.safetensors"}
    for fn, text, blob in kept:
        with open(os.path.join(out, names[fn]), "wb") as f:
            f.write(struct.pack("<Q", len(text)) + text + blob)
    if index is not None and len(kept) > 1:
        ix, d = index
        ix["weight_map"] = {k: names[v] for k, v in ix["weight_map"].items() if k != HEAD}
        if "total_size" in ix.get("metadata", {}):
            ix["metadata"]["total_size"] -= dropped
        json.dump(ix, open(d, "w"), indent=2)


if __name__ == "__main__":
    main()
