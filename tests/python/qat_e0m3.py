# MIP-QAT pi0.5 checkpoints and their omega_e0m3_v1 artifacts (docs/formats/omega-e0m3.md §8).
#   make CKPT [bf16|f16|f32] [VARIANT]
#                             writes a checkpoint in the real tensor names: the action expert's
#                             126 projections (18 layers x q, k, v, o, gate, up, down) at reduced
#                             widths (hidden 64, attention 128, KV 64, MLP 192), plus tensors
#                             the converter leaves alone (a PaliGemma projection, action_in_proj);
#                             VARIANT breaks one rule: missing, extra, nan, overflow, shape, width
#   check CKPT ARTIFACT       loads ARTIFACT with torch.load(weights_only=True) and checks it
#                             against an independent derivation, in torch ops, of what the
#                             QAT converter writes: fp16 RNE cast, FlashRT's E0M3 quantizer
#                             (reference/flashrt_omega.md §2.2-2.3), identity aux, fold none.
import json
import struct
import sys

import torch

PREFIX = "paligemma_with_expert.gemma_expert.model.layers."
PROJ = ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
        "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"]
HIDDEN, ATTN, KV, MLP = 64, 128, 64, 192
SHAPES = {"self_attn.q_proj": (ATTN, HIDDEN), "self_attn.k_proj": (KV, HIDDEN),
          "self_attn.v_proj": (KV, HIDDEN), "self_attn.o_proj": (HIDDEN, ATTN),
          "mlp.gate_proj": (MLP, HIDDEN), "mlp.up_proj": (MLP, HIDDEN),
          "mlp.down_proj": (HIDDEN, MLP)}
DTYPES = {"bf16": (torch.bfloat16, "BF16"), "f16": (torch.float16, "F16"),
          "f32": (torch.float32, "F32")}
ST_DTYPES = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32}


def raw_bytes(t):
    t = t.contiguous()
    n = t.numel() * t.element_size()
    return bytes(t.view(torch.uint8).reshape(n).tolist()) if n else b""


def write_safetensors(path, tensors):
    header, blobs, off = {}, [], 0
    for name, (t, dt) in tensors.items():
        b = raw_bytes(t)
        header[name] = {"dtype": dt, "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def read_safetensors(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    out = {}
    for name, e in json.loads(raw[8:8 + n]).items():
        if name == "__metadata__":
            continue
        b0, b1 = e["data_offsets"]
        data = torch.tensor(list(raw[8 + n + b0:8 + n + b1]), dtype=torch.uint8)
        out[name] = data.view(ST_DTYPES[e["dtype"]]).reshape(e["shape"])
    return out


def make(path, dtype, variant=""):
    torch_dtype, st = DTYPES[dtype]
    g = torch.Generator().manual_seed(37)
    tensors = {}
    for i in range(18):
        for p in PROJ:
            n, k = SHAPES[p]
            # QAT weights sit near a 4-bit grid: a per-row step times small integers, plus noise.
            step = torch.exp(torch.randn(n, 1, generator=g) * 0.5) * 0.01
            q = torch.randint(-7, 8, (n, k), generator=g).float()
            w = step * (q + 0.05 * torch.randn(n, k, generator=g))
            if i == 0 and p == "self_attn.q_proj":
                w[0, :16] = 0.0  # an all-zero block: scale byte 0
                w[1, :16] = 1e-5  # a block below the UE4M3 subnormal floor
            tensors[f"{PREFIX}{i}.{p}.weight"] = (w.to(torch_dtype), st)
    l17 = f"{PREFIX}17."
    if variant == "missing":
        del tensors[l17 + "mlp.down_proj.weight"]
    elif variant == "extra":
        tensors[f"{PREFIX}18.mlp.up_proj.weight"] = tensors[l17 + "mlp.up_proj.weight"]
    elif variant == "nan":
        tensors[l17 + "mlp.up_proj.weight"][0][3, 5] = float("nan")
    elif variant == "overflow":  # finite in f32, beyond fp16's 65504
        w = tensors[l17 + "mlp.up_proj.weight"][0].float()
        w[2, 7] = 1e6
        tensors[l17 + "mlp.up_proj.weight"] = (w, "F32")
    elif variant == "shape":
        tensors[l17 + "self_attn.k_proj.weight"] = (torch.zeros(KV, 96, dtype=torch_dtype), st)
    elif variant == "width":
        tensors[l17 + "self_attn.o_proj.weight"] = (torch.zeros(128, ATTN, dtype=torch_dtype), st)
    # Tensors the converter does not touch.
    tensors["paligemma_with_expert.paligemma.model.language_model.layers.0.mlp.gate_proj.weight"] = (
        torch.randn(128, 64, generator=g).to(torch.bfloat16), "BF16")
    tensors["action_in_proj.weight"] = (torch.randn(64, 32, generator=g).to(torch.bfloat16), "BF16")
    write_safetensors(path, tensors)


# E4M3FN positive grid (codes 0..126) for an RNE search with ties to the even code.
GRID = torch.tensor([(c & 7) / 8 * 2.0 ** -6 if c >> 3 == 0 else
                     (1 + (c & 7) / 8) * 2.0 ** ((c >> 3) - 7) for c in range(127)],
                    dtype=torch.float64)


def e4m3_sat(x):
    x = x.double().clamp(max=448.0)
    idx = torch.searchsorted(GRID, x).clamp(max=126)
    lo = (idx - 1).clamp(min=0)
    dlo, dhi = (x - GRID[lo]).abs(), (GRID[idx] - x).abs()
    return torch.where((dhi < dlo) | ((dhi == dlo) & (idx % 2 == 0)), idx, lo)


def e0m3(w16):
    n, k = w16.shape
    blocks = w16.float().reshape(n, k // 16, 16)
    amax = blocks.abs().nan_to_num(0.0).amax(dim=2)
    codes = e4m3_sat((amax / torch.tensor(7.0)).clamp(min=1e-12))
    inv = torch.tensor(1.0) / GRID[codes].float()
    t = blocks * inv.unsqueeze(2)
    mag = torch.round(t.abs().nan_to_num(0.0, posinf=7.0)).clamp(max=7).to(torch.uint8)
    code = (mag | (((t < 0) & (mag > 0)).to(torch.uint8) << 3)).reshape(n, k)
    packed = code[:, 0::2] | (code[:, 1::2] << 4)
    kb = k // 16
    kt = (kb + 3) // 4
    r = torch.arange(n).unsqueeze(1)
    c = torch.arange(kb).unsqueeze(0)
    off = ((r // 128) * kt + c // 4) * 512 + (r % 32) * 16 + ((r % 128) // 32) * 4 + c % 4
    sfb = torch.zeros(((n + 127) // 128) * 128 * kt * 4, dtype=torch.uint8)
    sfb[off.reshape(-1)] = codes.reshape(-1).to(torch.uint8)
    return packed, sfb


def check(ckpt, artifact):
    sd = read_safetensors(ckpt)
    art = torch.load(artifact, weights_only=True)
    names = sorted(k[: -len(".weight")] for k in sd if k.startswith(PREFIX))
    assert len(names) == 126, len(names)
    assert art["format"] == "omega_e0m3_v1" and art["fold"] == "none"
    assert art["schema_version"] == 1
    assert art["source_pack_meta"] == {"format": "mip_qat_ckpt_v1", "ckpt": ckpt}
    assert art["selected_layers"] == names and art["selected_record_count"] == 126
    assert art["source_record_count"] == 126
    assert list(art["weights"]) == names and list(art["aux"]) == names
    for name in names:
        w16 = sd[name + ".weight"].to(torch.float16)
        n, k = w16.shape
        packed, sfb = e0m3(w16)
        got = art["weights"][name]
        assert type(got["N"]) is int and (got["N"], got["K"]) == (n, k), name
        assert torch.equal(got["packed"], packed), name
        assert torch.equal(got["sfb"], sfb), name
        if "weight_fp16_folded" in got:
            assert torch.equal(got["weight_fp16_folded"], w16), name
        aux = art["aux"][name]
        assert list(aux) == ["duquant_rotation_blocks", "duquant_rotation_out_blocks",
                             "duquant_rotation_perm", "act_scale_table", "weight_bits", "a_bits",
                             "in_features", "out_features", "rank", "fold"], list(aux)
        eye = torch.eye(64, dtype=torch.float16)
        assert torch.equal(aux["duquant_rotation_blocks"], eye.repeat(k // 64, 1, 1))
        assert torch.equal(aux["duquant_rotation_out_blocks"], eye.repeat(n // 64, 1, 1))
        assert torch.equal(aux["duquant_rotation_perm"], torch.arange(k, dtype=torch.int64))
        assert torch.equal(aux["act_scale_table"], torch.ones(1, k, dtype=torch.float32))
        assert (aux["weight_bits"], aux["a_bits"], aux["rank"], aux["fold"]) == (4, 4, 0, "none")
        assert (aux["in_features"], aux["out_features"]) == (k, n)
    print("ok", len(names))


if __name__ == "__main__":
    if sys.argv[1] == "make":
        make(sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else "bf16",
             sys.argv[4] if len(sys.argv) > 4 else "")
    else:
        check(sys.argv[2], sys.argv[3])
