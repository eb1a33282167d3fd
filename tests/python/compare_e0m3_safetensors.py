# The safetensors container of an E0M3 artifact holds exactly the .pt artifact's content:
# every tensor byte-equal, every scalar in __metadata__. Parses safetensors by its spec
# (8-byte little-endian header length, JSON header, data) with no safetensors package.
# Usage: /usr/bin/python3 compare_e0m3_safetensors.py ART.safetensors ART.pt
import json
import struct
import sys

import torch

st_path, pt_path = sys.argv[1], sys.argv[2]
raw = open(st_path, "rb").read()
(n,) = struct.unpack("<Q", raw[:8])
header = json.loads(raw[8 : 8 + n])
meta = header.pop("__metadata__")
data = raw[8 + n :]
dtypes = {"U8": torch.uint8, "F16": torch.float16, "F32": torch.float32, "I64": torch.int64,
          "BF16": torch.bfloat16, "F64": torch.float64}


def tensor(name):
    e = header[name]
    b, end = e["data_offsets"]
    return torch.frombuffer(bytearray(data[b:end]), dtype=dtypes[e["dtype"]]).reshape(e["shape"])


a = torch.load(pt_path, weights_only=True)
assert meta["format"] == a["format"] == "omega_e0m3_v1"
assert int(meta["schema_version"]) == a["schema_version"] == 1
assert meta["fold"] == a["fold"]
assert int(meta["source_record_count"]) == a["source_record_count"]
assert int(meta["selected_record_count"]) == a["selected_record_count"]
assert json.loads(meta["selected_layers"]) == a["selected_layers"]
assert json.loads(meta["source_pack_meta"]) == a["source_pack_meta"]
aux_meta = json.loads(meta["aux"])
expected = set()
for name in a["selected_layers"]:
    w, x = a["weights"][name], a["aux"][name]
    for field in ("packed", "sfb", "weight_fp16_folded"):
        if field in w:
            expected.add(f"{name}.{field}")
            assert torch.equal(tensor(f"{name}.{field}"), w[field]), (name, field)
    assert aux_meta[name]["N"] == w["N"] and aux_meta[name]["K"] == w["K"]
    for field, v in x.items():
        if isinstance(v, torch.Tensor):
            expected.add(f"{name}.{field}")
            got = tensor(f"{name}.{field}")
            assert got.dtype == v.dtype and torch.equal(got, v), (name, field)
        else:
            assert aux_meta[name][field] == v, (name, field, aux_meta[name].get(field), v)
assert set(header) == expected, set(header) ^ expected
print("safetensors container ok:", len(header), "tensors")
