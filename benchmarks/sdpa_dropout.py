"""Cost of dropout inside scaled_dot_product_attention on CPU (why QANet's attention_dropout is 0).

    python benchmarks/sdpa_dropout.py

Six self-attention calls at QANet's paper sizes (B=32, h=8, T=400, d_head=16), forward and
backward, with a boolean key mask, a float mask or none, and dropout 0 or 0.1. Each case runs
in a fresh subprocess so peak RSS is its own.
"""

import json
import subprocess
import sys

CHILD = r"""
import json, resource, sys, time
import torch
import torch.nn.functional as F
mode, p = sys.argv[1], float(sys.argv[2])
B, H, T, D = 32, 8, 400, 16
torch.manual_seed(0)
q, k, v = (torch.randn(B, H, T, D, requires_grad=True) for _ in range(3))
real = torch.arange(T)[None] < torch.randint(100, T, (B,))[:, None]  # (B, T)
mask = {"bool": real[:, None, None, :],
        "float": torch.zeros(B, 1, 1, T).masked_fill(~real[:, None, None, :], torch.finfo(torch.float32).min),
        "none": None}[mode]
t = time.perf_counter()
outs = [F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p) for _ in range(6)]
sum(o.sum() for o in outs).backward()
print(json.dumps({"mask": mode, "dropout": p, "seconds": round(time.perf_counter() - t, 2),
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024}))
"""

for mode in ("none", "bool", "float"):
    for p in ("0.0", "0.1"):
        r = subprocess.run([sys.executable, "-c", CHILD, mode, p], capture_output=True, text=True, check=True)
        print(json.loads(r.stdout))
