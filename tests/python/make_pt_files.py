# Writes .pt files with Debian's real torch for the reader's interoperability tests, plus the
# expected contiguous bytes of every tensor, and a corpus of hostile files.
# Usage: /usr/bin/python3 make_pt_files.py OUTDIR
import collections
import io
import os
import pickle
import sys
import zipfile

import torch

out = sys.argv[1]
os.makedirs(out, exist_ok=True)

base = torch.arange(10, dtype=torch.float32)
good = {
    "f16": torch.tensor([1.0, -2.5, 65504.0], dtype=torch.float16),
    "bf16": torch.tensor([1.0, -3.5, 0.0078125], dtype=torch.bfloat16),
    "f32": torch.arange(6, dtype=torch.float32).reshape(2, 3),
    "f64": torch.tensor([[1.5], [2.5]], dtype=torch.float64),
    "i64": torch.tensor([-1, 2**40], dtype=torch.int64),
    "i32": torch.tensor([-7, 7], dtype=torch.int32),
    "i16": torch.tensor([-300], dtype=torch.int16),
    "i8": torch.tensor([-128, 127], dtype=torch.int8),
    "u8": torch.tensor([0, 255], dtype=torch.uint8),
    "bool": torch.tensor([True, False, True]),
    "transposed": torch.arange(12, dtype=torch.float32).reshape(3, 4).t(),
    "view_a": base[2:8].view(2, 3),
    "view_b": base[5:],
    "scalar": torch.tensor(3.25),
    "nested": {"list": [torch.ones(2, dtype=torch.int16), 5, "text"], "flag": True, "n": -3},
}
torch.save(good, os.path.join(out, "good.pt"))


def expected(name, t):
    t = t.contiguous()
    if t.dtype == torch.bfloat16:
        raw = t.view(torch.int16).numpy().tobytes()
    elif t.dtype == torch.bool:
        raw = t.numpy().astype("uint8").tobytes()
    else:
        raw = t.numpy().tobytes()
    with open(os.path.join(out, name + ".bin"), "wb") as f:
        f.write(raw)


for k, v in good.items():
    if isinstance(v, torch.Tensor):
        expected(k, v)
expected("nested_list0", good["nested"]["list"][0])


def rezip(src, dst, edit):
    """Copies a torch zip, letting edit(name, bytes) change or drop records."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_STORED) as zout:
        for info in zin.infolist():
            data = edit(info.filename, zin.read(info.filename))
            if data is not None:
                zout.writestr(info.filename, data)


small = os.path.join(out, "small.pt")
torch.save({"w": torch.arange(4, dtype=torch.float32)}, small)

# A storage record shorter than numel * itemsize.
rezip(small, os.path.join(out, "short_record.pt"),
      lambda n, d: d[:8] if n.endswith("data/0") else d)
# A missing storage record.
rezip(small, os.path.join(out, "missing_record.pt"),
      lambda n, d: None if n.endswith("data/0") else d)


class Evil:
    def __reduce__(self):
        return (os.system, ("echo pwned",))


def with_pickle(payload, name):
    rezip(small, os.path.join(out, name), lambda n, d: payload if n.endswith("data.pkl") else d)


with_pickle(pickle.dumps({"w": Evil()}, protocol=2), "os_system.pt")


class Marker:
    pass


class OutOfBounds:
    def __reduce__(self):
        return (torch._utils._rebuild_tensor_v2,
                (MARK, 10, (2,), (1,), False, collections.OrderedDict()))


MARK = Marker()


class StoragePickler(pickle.Pickler):
    def persistent_id(self, obj):
        if obj is MARK:
            return ("storage", torch.FloatStorage, "0", "cpu", 4)
        return None


buf = io.BytesIO()
StoragePickler(buf, protocol=2).dump({"w": OutOfBounds()})
with_pickle(buf.getvalue(), "out_of_bounds.pt")

with open(small, "rb") as f:
    whole = f.read()
with open(os.path.join(out, "truncated.pt"), "wb") as f:
    f.write(whole[: len(whole) // 2])
with_pickle(pickle.dumps({"w": 1}, protocol=4), "protocol4.pt")
