# Damages an omega_e0m3_v1 artifact in one way, for the checker's rejection tests, or reshapes
# it as another FlashRT producer writes it (pr179: no schema_version, source/selected counts or
# selected_layers, as flashrt-project/FlashRT PR #179's converter writes).
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
elif action == "pr179":
    for key in ("schema_version", "source_record_count", "selected_record_count",
                "selected_layers"):
        del a[key]
elif action == "bad_count":
    a["selected_record_count"] = a["selected_record_count"] + 1
elif action == "rotate_qat":  # a QAT artifact whose aux says the weight was rotated
    a["aux"][layer]["duquant_rotation_perm"] = a["aux"][layer]["duquant_rotation_perm"].flip(0)
elif action == "bad_format":
    a["format"] = "omega_e0m3_v0"
else:
    raise SystemExit("unknown action " + action)
torch.save(a, out)
