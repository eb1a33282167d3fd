# Checks a qrepack e0m3-sfb artifact against its pack with torch.load(weights_only=True) and an
# independent re-derivation of FlashRT's quantizer (reference/flashrt_omega.md §2.2-2.3) in
# torch float32 ops. Usage: /usr/bin/python3 check_e0m3_artifact.py PACK ARTIFACT
import sys

import torch

# The pack holds float scalars, which torch 1.13's weights_only rejects; it is our own test file.
pack = torch.load(sys.argv[1], weights_only=False)
art = torch.load(sys.argv[2], weights_only=True)
names = sorted(k for k in pack if k != "__meta__")
assert art["format"] == "omega_e0m3_v1" and art["schema_version"] == 1
assert art["fold"] == "none"
assert art["selected_layers"] == names, art["selected_layers"]
assert set(art["weights"]) == set(art["aux"]) == set(names)
assert art["source_record_count"] == len(names) and art["selected_record_count"] == len(names)
assert art["source_pack_meta"]["recipe"] == pack["__meta__"]["recipe"]

# E4M3FN positive grid (codes 0..126) for an RNE search with ties to the even code.
grid = []
for c in range(127):
    e, m = c >> 3, c & 7
    grid.append((m / 8) * 2.0 ** -6 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7))
grid_t = torch.tensor(grid, dtype=torch.float64)


def e4m3_sat(x):  # x: float32 >= 0 tensor -> codes
    x = x.double().clamp(max=448.0)
    idx = torch.searchsorted(grid_t, x).clamp(max=126)
    lo = (idx - 1).clamp(min=0)
    dlo, dhi = (x - grid_t[lo]).abs(), (grid_t[idx] - x).abs()
    pick_hi = (dhi < dlo) | ((dhi == dlo) & (idx % 2 == 0))
    return torch.where(pick_hi, idx, lo)


def sf_offset(r, kb, kblocks):
    kt = (kblocks + 3) // 4
    return ((r // 128) * kt + kb // 4) * 512 + (r % 32) * 16 + ((r % 128) // 32) * 4 + kb % 4


for name in names:
    w = pack[name]["weight_res_q"].float()
    n, k = w.shape
    blocks = w.reshape(n, k // 16, 16)
    amax = blocks.abs().nan_to_num(0.0).amax(dim=2)
    d = (amax / torch.tensor(7.0)).clamp(min=1e-12)
    codes = e4m3_sat(d)
    scale = grid_t[codes].float()
    inv = torch.tensor(1.0) / scale
    t = blocks * inv.unsqueeze(2)
    mag = torch.round(t.abs().nan_to_num(0.0, posinf=7.0)).clamp(max=7).to(torch.uint8)
    code = mag | (((t < 0) & (mag > 0)).to(torch.uint8) << 3)
    code = code.reshape(n, k)
    packed = code[:, 0::2] | (code[:, 1::2] << 4)
    got = art["weights"][name]
    assert got["N"] == n and got["K"] == k
    assert torch.equal(got["packed"], packed), name
    sfb = torch.zeros(((n + 127) // 128) * 128 * ((k // 16 + 3) // 4) * 4, dtype=torch.uint8)
    for r in range(n):
        for kb in range(k // 16):
            sfb[sf_offset(r, kb, k // 16)] = int(codes[r, kb])
    assert torch.equal(got["sfb"], sfb), name
    aux = art["aux"][name]
    assert torch.equal(aux["duquant_rotation_perm"], pack[name]["duquant_rotation_perm"])
    assert torch.equal(aux["act_scale_table"], pack[name]["act_scale_table"])
    assert aux["fold"] == "none" and aux["rank"] == 0 and aux["weight_bits"] == 4
print("ok", len(names))
