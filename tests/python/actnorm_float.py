# --fold actnorm's act_out_scale as FlashRT writes it: a Python float pickled as BINFLOAT
# (8-byte big-endian double), one per layer, in the default artifact; the same f32 value as a
# 0-d float32 tensor with --act-out-scale-tensor, every other entry equal. torch 1.13's
# weights_only loader refuses the float (why the tensor form exists) and loads the tensor form.
# Usage: /usr/bin/python3 actnorm_float.py FLOAT.pt TENSOR.pt
import pickletools
import sys
import zipfile

import torch

float_path, tensor_path = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(float_path) as z:
    pkl = z.read("archive/data.pkl")
floats = [arg for op, arg, _ in pickletools.genops(pkl) if op.name == "BINFLOAT"]
f = torch.load(float_path, weights_only=False)
t = torch.load(tensor_path, weights_only=True)
layers = f["selected_layers"]
assert len(floats) == len(layers), (len(floats), len(layers))
try:
    torch.load(float_path, weights_only=True)
    refused = False
except Exception:  # torch 1.13: "Unsupported operand 71" (no BINFLOAT)
    refused = True
assert refused or not torch.__version__.startswith("1."), "torch 1.13 should refuse BINFLOAT"


def same(a, b, path):
    if path.endswith("/act_out_scale"):
        assert type(a) is float, (path, type(a))
        assert isinstance(b, torch.Tensor) and b.dtype == torch.float32 and b.dim() == 0, path
        assert a == b.item() and torch.tensor(a, dtype=torch.float32).item() == a, path
        assert a > 0, path
        return
    assert type(a) is type(b), (path, type(a), type(b))
    if isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and torch.equal(a, b), path
    elif isinstance(a, dict):
        assert list(a) == list(b), path
        for k in a:
            same(a[k], b[k], f"{path}/{k}")
    else:
        assert a == b, path


same(f, t, "")
assert sorted(floats) == sorted(f["aux"][n]["act_out_scale"] for n in layers)
print("ok", len(layers), "float act_out_scale")
