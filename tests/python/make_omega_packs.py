# Small dit_svdquant_v1 packs made with Debian's torch for `qrepack validate` tests: one valid
# pack and one pack per defect. Usage: /usr/bin/python3 make_omega_packs.py OUTDIR
import os
import sys

import torch

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
g = torch.Generator().manual_seed(0)


def blocks(n):
    q, r = torch.linalg.qr(torch.randn(n, 64, 64, generator=g))
    return (q * torch.sign(torch.diagonal(r, dim1=-2, dim2=-1)).unsqueeze(-2)).half()


def record(n, k, t):
    return {
        "format": "dit_svdquant_v1",
        "weight_res_q": (torch.randn(n, k, generator=g) * 0.02).half(),
        "lowrank_A": torch.empty(n, 0, dtype=torch.float16),
        "lowrank_B": torch.empty(k, 0, dtype=torch.float16),
        "rank": 0,
        "act_scale_table": torch.rand(t, k, generator=g) + 0.1,
        "duquant_rotation_blocks": blocks(k // 64),
        "duquant_rotation_perm": torch.randperm(k, generator=g),
        "duquant_rotation_out_blocks": blocks(n // 64),
        "weight_bits": 4,
        "a_bits": 4,
        "in_features": k,
        "out_features": n,
        "n_calib_total": 100 * t,
        "n_calib_per_step": [100] * t,
        "act_percentile": 99.9,
        "gptq_damp_percent": 0.05,
    }


A = "paligemma_with_expert.gemma_expert.model.layers.0.self_attn.q_proj"
B = "paligemma_with_expert.gemma_expert.model.layers.0.mlp.down_proj"


def pack(meta_recipe="synthetic fixture (tests)", edit=None):
    p = {A: record(128, 64, 2), B: record(64, 128, 2)}
    if edit:
        edit(p[B])
    p["__meta__"] = {"recipe": meta_recipe, "suite": "test", "fresh": True}
    return p


torch.save(pack(), os.path.join(out, "good.pt"))
torch.save(pack(meta_recipe="real run"), os.path.join(out, "not_fixture.pt"))

# Records the converter streams in several row blocks (1 MiB of fp16 against its 512 KiB
# blocks, the last one partial), and a weight stored transposed (strided, not contiguous).
strided = record(192, 64, 2)
strided["weight_res_q"] = (torch.randn(64, 192, generator=g) * 0.02).half().t()
assert not strided["weight_res_q"].is_contiguous()
torch.save({A: record(4160, 128, 2), B: strided,
            "__meta__": {"recipe": "synthetic fixture (tests)", "suite": "test"}},
           os.path.join(out, "blocks.pt"))


def nan_weight(r):
    r["weight_res_q"][0, 0] = float("nan")


def zero_table(r):
    r["act_scale_table"][1, 5] = 0.0


def dup_perm(r):
    r["duquant_rotation_perm"][0] = r["duquant_rotation_perm"][1]


defects = {
    "format": lambda r: r.update(format="dit_svdquant_v2"),
    "rank": lambda r: r.update(rank=1),
    "weight_bits": lambda r: r.update(weight_bits=8),
    "weight_res_q": nan_weight,
    "out_features": lambda r: r.update(out_features=65),
    "lowrank_A": lambda r: r.update(lowrank_A=torch.empty(64, 1, dtype=torch.float16)),
    "act_scale_table": zero_table,
    "duquant_rotation_blocks": lambda r: r.update(duquant_rotation_blocks=blocks(1)),
    "duquant_rotation_perm": dup_perm,
    "duquant_rotation_perm_dtype": lambda r: r.update(
        duquant_rotation_perm=r["duquant_rotation_perm"].int()),
}
# Integer fields given as floats or bools: FlashRT's converter accepts them (0.0 == 0).
defects["rank_float"] = lambda r: r.update(rank=0.0)
defects["rank_bool"] = lambda r: r.update(rank=False)
defects["a_bits_float"] = lambda r: r.update(a_bits=4.0)
for name, edit in defects.items():
    torch.save(pack(edit=edit), os.path.join(out, "bad_" + name + ".pt"))
# Two defects in one record: both must be reported.
torch.save(pack(edit=lambda r: (r.update(rank=2), r.update(a_bits=8))),
           os.path.join(out, "two_defects.pt"))
