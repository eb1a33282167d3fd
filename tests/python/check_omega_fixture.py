# Checks a `qrepack fixture omega-pack` file with Debian's torch against the spec:
# torch.load(weights_only=True) accepts it; the four records have the real names and shapes;
# blocks are exactly orthonormal; perms are permutations; tables positive; weights carry
# per-channel (lognormal) scales; no float scalars anywhere.
# Usage: /usr/bin/python3 check_omega_fixture.py PACK small|default
import sys

import torch

path, variant = sys.argv[1], sys.argv[2]
p = torch.load(path, weights_only=True)
E = "paligemma_with_expert.gemma_expert.model.layers.0."
P = "paligemma_with_expert.paligemma.model.language_model.layers.0."
if variant == "default":
    want = {E + "self_attn.q_proj": (2048, 1024, 10), E + "self_attn.v_proj": (256, 1024, 10),
            E + "mlp.down_proj": (1024, 4096, 10), P + "mlp.gate_proj": (16384, 2048, 1)}
else:
    want = {E + "self_attn.q_proj": (256, 128, 3), E + "self_attn.v_proj": (64, 128, 3),
            E + "mlp.down_proj": (128, 256, 3), P + "mlp.gate_proj": (512, 256, 1)}
names = [k for k in p if k != "__meta__"]
assert set(names) == set(want), names
assert p["__meta__"]["recipe"].startswith("synthetic fixture"), p["__meta__"]


def no_floats(v, where):
    assert not isinstance(v, float), where
    if isinstance(v, dict):
        for k, x in v.items():
            no_floats(x, f"{where}.{k}")
    if isinstance(v, (list, tuple)):
        for x in v:
            no_floats(x, where)


no_floats(p, "pack")
for name, (n, k, t) in want.items():
    r = p[name]
    assert r["format"] == "dit_svdquant_v1" and r["rank"] == 0, name
    assert r["weight_bits"] == 4 and r["a_bits"] == 4
    assert r["in_features"] == k and r["out_features"] == n
    w = r["weight_res_q"]
    assert w.dtype == torch.float16 and tuple(w.shape) == (n, k), (name, w.shape)
    assert torch.isfinite(w).all()
    assert tuple(r["lowrank_A"].shape) == (n, 0) and tuple(r["lowrank_B"].shape) == (k, 0)
    tab = r["act_scale_table"]
    assert tab.dtype == torch.float32 and tuple(tab.shape) == (t, k)
    assert (tab > 0).all() and torch.isfinite(tab).all()
    for key, count in (("duquant_rotation_blocks", k // 64), ("duquant_rotation_out_blocks", n // 64)):
        b = r[key].double()
        assert tuple(b.shape) == (count, 64, 64), key
        eye = torch.eye(64, dtype=torch.float64).expand(count, 64, 64)
        assert torch.equal(b @ b.transpose(1, 2), eye), f"{name} {key} is not exactly orthonormal"
    perm = r["duquant_rotation_perm"]
    assert perm.dtype == torch.int64 and torch.equal(perm.sort().values, torch.arange(k))
    assert not torch.equal(perm, torch.arange(k)), "identity perm"
    # Per-channel lognormal scales: column RMS spread far beyond what sampling noise gives.
    rms = w.float().pow(2).mean(0).sqrt()
    assert rms.max() / rms.min() > 4, float(rms.max() / rms.min())
    logs = rms.log()
    assert 0.5 < float(logs.std()) < 1.1, float(logs.std())  # exp(0.8 g): log-sd about 0.8
print("fixture ok")
