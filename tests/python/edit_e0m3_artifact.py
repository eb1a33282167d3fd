# Damages an omega_e0m3_v1 artifact in one way, for the checker's rejection tests.
# Usage: /usr/bin/python3 edit_e0m3_artifact.py IN OUT ACTION LAYER
import sys

import torch

src, out, action, layer = sys.argv[1:5]
a = torch.load(src, weights_only=True)
if action == "drop_aux":
    del a["aux"][layer]
elif action == "zero_packed":
    a["weights"][layer]["packed"].zero_()
elif action == "packed_shape":
    w = a["weights"][layer]["packed"]
    a["weights"][layer]["packed"] = w[:, : w.shape[1] // 2].clone()
elif action == "fold_mismatch":
    a["aux"][layer]["fold"] = "mean"
elif action == "drop_act_out_scale":
    del a["aux"][layer]["act_out_scale"]
elif action == "bad_format":
    a["format"] = "omega_e0m3_v0"
else:
    raise SystemExit("unknown action " + action)
torch.save(a, out)
