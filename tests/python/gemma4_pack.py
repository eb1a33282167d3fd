#!/usr/bin/env python3
"""Independent derivation of colibri-gemma4's packed directory (numpy only; written from the
Gemma 4 loader's reading as docs/targets.md "colibri-gemma4" states it, not from qrepack's C++).

  gemma4_pack.py check FILE.gguf OUTDIR
      Parses the GGUF, derives manifest.json (json.dumps(indent=2), make_gemma4_tiny.py's key
      order) and every layer-NN.g4ex byte for byte (header, records gate | up | down cut from
      the experts' arrays by rows, zero padding to the 4096-aligned stride), and compares OUTDIR
      with them: the same file names (besides qrepack.json), the same bytes. Exit 0 when equal.
"""

import json
import os
import struct
import sys
from pathlib import Path

import numpy as np

Q4_0, F32 = 2, 0
BLOCK = {0: (1, 4), 1: (1, 2), 2: (32, 18), 8: (32, 34), 14: (256, 210), 30: (1, 2)}
SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q",
          11: "<q", 12: "<d"}
ALIGN = 4096


def parse(path):
    """(metadata dict, {name: (dims, type, absolute offset, bytes)}, file bytes)."""
    b = Path(path).read_bytes()
    p = 0

    def take(fmt):
        nonlocal p
        v = struct.unpack_from(fmt, b, p)[0]
        p += struct.calcsize(fmt)
        return v

    def string():
        nonlocal p
        n = take("<Q")
        s = b[p:p + n].decode("utf-8")
        p += n
        return s

    def value(t):
        if t == 8:
            return string()
        if t == 9:
            et, n = take("<I"), take("<Q")
            return [value(et) for _ in range(n)]
        return take(SCALAR[t])

    assert b[:4] == b"GGUF"
    p = 4
    version, nt, nk = take("<I"), take("<Q"), take("<Q")
    assert version in (2, 3)
    meta = {}
    for _ in range(nk):
        k = string()
        meta[k] = value(take("<I"))
    infos = []
    for _ in range(nt):
        name = string()
        dims = [take("<Q") for _ in range(take("<I"))]
        infos.append((name, dims, take("<I"), take("<Q")))
    align = meta.get("general.alignment", 32)
    start = (p + align - 1) // align * align
    tensors = {}
    for name, dims, ty, off in infos:
        blk, bb = BLOCK[ty]
        tensors[name] = (dims, ty, start + off, int(np.prod(dims)) // blk * bb)
    return meta, tensors, b


def expected(gguf):
    meta, tensors, raw = parse(gguf)
    assert meta["general.architecture"] == "gemma4"
    n_layer = meta["gemma4.block_count"]
    w, f = meta["gemma4.embedding_length"], meta["gemma4.expert_feed_forward_length"]
    e, k = meta["gemma4.expert_count"], meta["gemma4.expert_used_count"]
    row_gu, row_down = w // 32 * 18, f // 32 * 18  # Q4_0 bytes of one row
    files, layers = {}, []
    for n in range(n_layer):
        gu_name, dn_name = f"blk.{n}.ffn_gate_up_exps.weight", f"blk.{n}.ffn_down_exps.weight"
        sc_name = f"blk.{n}.ffn_down_exps.scale"
        gu_dims, gu_ty, gu_at, gu_bytes = tensors[gu_name]
        dn_dims, dn_ty, dn_at, dn_bytes = tensors[dn_name]
        sc_dims, sc_ty, sc_at, _ = tensors[sc_name]
        assert (gu_dims, dn_dims, sc_dims) == ([w, 2 * f, e], [f, w, e], [e])
        assert (gu_ty, dn_ty, sc_ty) == (Q4_0, Q4_0, F32)
        # ggml's outermost dim is the slowest: [E][2F rows][row bytes], [E][W rows][row bytes].
        gu = np.frombuffer(raw, np.uint8, gu_bytes, gu_at).reshape(e, 2 * f, row_gu)
        dn = np.frombuffer(raw, np.uint8, dn_bytes, dn_at).reshape(e, w, row_down)
        gate_bytes, down_bytes = f * row_gu, w * row_down
        payload = 2 * gate_bytes + down_bytes
        stride = -(-payload // ALIGN) * ALIGN
        header = bytearray(ALIGN)
        header[0:8] = b"G4EXPK01"
        struct.pack_into("<IIIII", header, 8, 1, n, e, Q4_0, ALIGN)
        struct.pack_into("<QQQQQQ", header, 32, ALIGN, payload, stride, gate_bytes, gate_bytes,
                         down_bytes)
        out = bytearray(header)
        for x in range(e):
            record = gu[x, :f].tobytes() + gu[x, f:].tobytes() + dn[x].tobytes()
            out += record + bytes(stride - payload)
        name = f"layer-{n:02d}.g4ex"
        files[name] = bytes(out)

        def comp(role, tensor, at, stride_, within, size):
            return {"role": role, "tensor": tensor, "ggml_type": Q4_0, "type_name": "Q4_0",
                    "slice_bytes": size, "source_offset": at, "source_expert_stride": stride_,
                    "source_within_expert_offset": within}

        layers.append({
            "layer": n, "expert_count": e, "model_width": w, "expert_width": f,
            "source_layout": "fused_gate_up", "packed_file": name, "payload_bytes": payload,
            "record_stride": stride,
            "expert_scale": {"tensor": sc_name, "ggml_type": F32, "source_offset": sc_at,
                             "scalar_bytes": 4},
            "components": [
                comp("gate", gu_name, gu_at, gu_bytes // e, 0, gate_bytes),
                comp("up", gu_name, gu_at, gu_bytes // e, gate_bytes, gate_bytes),
                comp("down", dn_name, dn_at, dn_bytes // e, 0, down_bytes)]})
    manifest = {"format": "g4lab-expert-manifest-v2", "architecture": "gemma4",
                "source": os.path.abspath(gguf), "expert_count": e, "expert_used_count": k,
                "layers": layers}
    files["manifest.json"] = json.dumps(manifest, indent=2).encode()
    return files


def cmd_check(gguf, outdir):
    want = expected(gguf)
    have = sorted(p.name for p in Path(outdir).iterdir() if p.name != "qrepack.json")
    ok = have == sorted(want)
    if not ok:
        print(f"files differ: {have} vs {sorted(want)}")
    for name, data in want.items():
        path = Path(outdir) / name
        got = path.read_bytes() if path.exists() else None
        if got != data:
            ok = False
            at = next((i for i, (a, b) in enumerate(zip(got or b"", data)) if a != b),
                      min(len(got or b""), len(data)))
            print(f"{name}: differs at byte {at} ({len(got or b'')} vs {len(data)} bytes)")
    print("gemma4_pack: " + ("every byte as derived" if ok else "MISMATCH"))
    return 0 if ok else 1


def main(argv):
    if len(argv) == 4 and argv[1] == "check":
        return cmd_check(argv[2], argv[3])
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
