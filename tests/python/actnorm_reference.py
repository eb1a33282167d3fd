# The FlashRT converter's --fold actnorm, computed with torch on the CPU as the converter does it
# (reference/flashrt_omega.md §3.3: s = table.mean(0).clamp_min(1e-12); c = float(exp(mean(log
# s))); W * (s / c).half()), against a qrepack artifact made with --fold actnorm --keep-fp16:
#   actnorm_reference.py PACK.pt ARTIFACT.pt [MAX_WEIGHT_DIFF_FRACTION]
# act_scale_static must equal torch's s bit for bit; act_out_scale c is a geometric mean whose
# last bits depend on the reduction order (torch's own depends on the CPU's vector width), so it
# must agree with torch's to 1e-6 relative (a few ulp; exactly equal c folds exactly equal
# weights); the folded fp16 weights may differ from torch's in at most MAX_WEIGHT_DIFF_FRACTION
# of elements (default 1e-3). The artifact must load with weights_only=True. Prints the
# measured differences: per layer, then how many layers' c differ by how many ulp.
import sys

import numpy as np
import torch


def ulps(a, b):
    ia = np.array([a], dtype=np.float32).view(np.int32)[0]
    ib = np.array([b], dtype=np.float32).view(np.int32)[0]
    return abs(int(ia) - int(ib))


def main():
    pack = torch.load(sys.argv[1], weights_only=True)
    art = torch.load(sys.argv[2], weights_only=True)
    limit = float(sys.argv[3]) if len(sys.argv) > 3 else 1e-3
    if art["fold"] != "actnorm":
        print("artifact fold is", art["fold"])
        return 1
    total = differing = 0
    hist = {}
    for name in art["selected_layers"]:
        rec, aux = pack[name], art["aux"][name]
        s = rec["act_scale_table"].float().mean(0).clamp_min(1e-12)
        c = float(torch.exp(torch.log(s).mean()))
        r = s / c
        w = rec["weight_res_q"].to(torch.float16) * r.half()
        static = aux["act_scale_static"]
        out = aux["act_out_scale"]
        out = float(out) if torch.is_tensor(out) else out
        if static.dtype != torch.float32 or not torch.equal(static, s):
            print(f"{name}: act_scale_static differs from torch's mean(0).clamp_min(1e-12)")
            return 1
        d = ulps(out, c)
        hist[d] = hist.get(d, 0) + 1
        folded = art["weights"][name]["weight_fp16_folded"]
        diff = int((folded.view(torch.int16) != w.view(torch.int16)).sum())
        print(f"{name}: act_out_scale {out!r} vs torch {c!r} ({d} ulp); "
              f"folded fp16 weights differing {diff} of {w.numel()}")
        if abs(out - c) > 1e-6 * c or (d == 0 and diff != 0):
            print(f"{name}: beyond the tolerance")
            return 1
        total += w.numel()
        differing += diff
    spread = ", ".join(f"{n} layer(s) {d} ulp" for d, n in sorted(hist.items()))
    print(f"actnorm: act_out_scale vs torch: {spread}; "
          f"{differing} of {total} folded fp16 weights differ from torch's")
    return 0 if differing <= limit * total else 1


if __name__ == "__main__":
    sys.exit(main())
