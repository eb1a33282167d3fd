# Loads a .pt written by qrepack with torch.load(weights_only=True) and checks every value
# against what the C++ test wrote. Usage: /usr/bin/python3 check_pt_written.py FILE
import sys

import torch

a = torch.load(sys.argv[1], weights_only=True)
assert a["format"] == "omega_e0m3_v1", a["format"]
assert a["schema_version"] == 1
assert a["flag"] is True and a["none"] is None and a["big"] == 2**40 and a["neg"] == -70000
w = a["weights"]["layer.0"]
assert w["packed"].dtype == torch.uint8 and list(w["packed"].shape) == [2, 3]
assert w["packed"].flatten().tolist() == [0, 1, 2, 253, 254, 255]
assert w["N"] == 2 and w["K"] == 6
assert a["f16"].dtype == torch.float16 and a["f16"].tolist() == [1.0, -2.5]
assert a["bf16"].dtype == torch.bfloat16 and a["bf16"].tolist() == [1.0, -3.5]
assert a["f32"].tolist() == [[0.5, 1.5], [2.5, 3.5]]
assert a["i64"].tolist() == [-1, 2**40]
assert a["bool"].tolist() == [True, False]
assert a["scalar"].shape == () and a["scalar"].item() == 7
assert a["layers"] == ["a", "b"]
assert a["empty"].numel() == 0
print("ok", len(a))
