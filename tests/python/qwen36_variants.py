# Variants of the qwen36 fixture (`qrepack fixture qwen36`) for the colibri-qwen36 target's
# tests, each written as one model.safetensors (no index) beside an edited config.json:
#   dense        qwen3_5: no num_experts; every layer (and the MTP layer) a dense
#                mlp.{gate,up,down}_proj at intermediate_size, no router, experts or shared expert
#   local        num_local_experts in place of num_experts
#   sides        the release's side files: chat template, tokenizer and preprocessor configs, a
#                Clef head (joint_head_config.json + joint_head.safetensors)
#   clef-half    joint_head_config.json without its weights
#   vision-part  vision_config without num_heads
#   vision-none  no vision_config (the tower's tensors stay)
#   mtp2         a second MTP layer
#   trunk        without the MTP head
#   mtp-src      the MTP head alone in model-00002-of-00002.safetensors, with an index that names
#                the trunk's model-00001-of-00002.safetensors, absent (a partial download)
#   qwen36_variants.py KIND SRC_DIR DST_DIR
import json
import os
import shutil
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from st_formats import read_dir  # noqa: E402

ORDER = ["BOOL", "U8", "I8", "F8_E5M2", "F8_E4M3", "I16", "U16", "F16", "BF16", "I32", "U32",
         "F32", "F64", "I64", "U64"]


def write_st(path, tensors):
    names = sorted(tensors, key=lambda n: (-ORDER.index(tensors[n][0]), n))
    header, blobs, off = {}, [], 0
    for n in names:
        dt, shape, raw = tensors[n]
        data = np.asarray(raw, dtype=np.uint8).tobytes()
        header[n] = {"dtype": dt, "shape": list(shape), "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def bf16(shape, seed):
    w = np.random.default_rng(seed).standard_normal(shape).astype(np.float32) * 0.05
    return ("BF16", list(shape), (w.view(np.uint32) >> 16).astype("<u2").view(np.uint8))


def densify(tensors, text):
    h, inter = text["hidden_size"], text["intermediate_size"]
    for n in list(tensors):
        if ".mlp.experts." in n or ".mlp.shared_expert" in n or n.endswith(".mlp.gate.weight"):
            del tensors[n]
    stacks = sorted({n.split(".input_layernorm.")[0] for n in tensors if ".input_layernorm." in n})
    for i, stack in enumerate(stacks):
        tensors[f"{stack}.mlp.gate_proj.weight"] = bf16((inter, h), 3 * i)
        tensors[f"{stack}.mlp.up_proj.weight"] = bf16((inter, h), 3 * i + 1)
        tensors[f"{stack}.mlp.down_proj.weight"] = bf16((h, inter), 3 * i + 2)
    for k in ("num_experts", "num_experts_per_tok", "moe_intermediate_size",
              "shared_expert_intermediate_size"):
        text.pop(k, None)
    text["model_type"] = "qwen3_5_text"


def main():
    kind, src, dst = sys.argv[1:4]
    tensors = dict(read_dir(src))
    cfg = json.load(open(os.path.join(src, "config.json")))
    text = cfg["text_config"]
    os.makedirs(dst)
    side = {"tokenizer.json": open(os.path.join(src, "tokenizer.json"), "rb").read()}
    if kind == "dense":
        densify(tensors, text)
        cfg["model_type"] = "qwen3_5"
        cfg["architectures"] = ["Qwen3_5ForConditionalGeneration"]
    elif kind == "local":
        text["num_local_experts"] = text.pop("num_experts")
    elif kind in ("sides", "clef-half"):
        side["chat_template.jinja"] = b"{% for m in messages %}{{ m.content }}{% endfor %}\n"
        side["tokenizer_config.json"] = b'{"model_max_length": 512}\n'
        side["preprocessor_config.json"] = b'{"patch_size": 4, "merge_size": 2}\n'
        side["joint_head_config.json"] = b'{"hidden_size": 64, "layers": 1}\n'
        if kind == "sides":
            write_st(os.path.join(dst, "joint_head.safetensors"), {"head.weight": bf16((2, 64), 9)})
    elif kind == "vision-part":
        del cfg["vision_config"]["num_heads"]
    elif kind == "vision-none":
        del cfg["vision_config"]
    elif kind == "mtp2":
        tensors["mtp.layers.1.input_layernorm.weight"] = tensors["mtp.layers.0.input_layernorm.weight"]
    elif kind == "trunk":
        tensors = {n: t for n, t in tensors.items() if not n.startswith("mtp.")}
    elif kind == "mtp-src":
        head = {n: t for n, t in tensors.items() if n.startswith("mtp.")}
        write_st(os.path.join(dst, "model-00002-of-00002.safetensors"), head)
        where = {n: ("model-00002-of-00002.safetensors" if n in head else
                     "model-00001-of-00002.safetensors") for n in sorted(tensors)}
        with open(os.path.join(dst, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {}, "weight_map": where}, f, indent=2)
        tensors = None
    else:
        raise SystemExit(f"unknown variant {kind}")
    if tensors is not None:
        write_st(os.path.join(dst, "model.safetensors"), tensors)
    with open(os.path.join(dst, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    for name, data in side.items():
        with open(os.path.join(dst, name), "wb") as f:
            f.write(data)


main()
