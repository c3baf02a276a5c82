"""Two processes attend over one sequence that neither holds whole.

Run: torchrun --nproc-per-node 2 examples/context_parallel.py
"""

import torch
import torch.distributed as dist

from attnlab import patterns
from attnlab.distributed import context_parallel_attention, gather, shard

dist.init_process_group("gloo")  # NCCL on GPUs; torchrun sets rank and world size
torch.manual_seed(0)  # every rank makes the same whole tensors here, to compare at the end
q, k, v = (torch.randn(1, 4, 1024, 32, dtype=torch.float64) for _ in range(3))  # (b, h, n, d)

for mode, pattern, layout in [("ring", None, "zigzag"), ("ring", patterns.sliding_window(64, 0), "contiguous"),
                              ("ulysses", None, "contiguous")]:
    q_l, k_l, v_l = (shard(t, layout=layout) for t in (q, k, v))  # (1, 4, 512, 32) on each rank
    out_l, _ = context_parallel_attention(q_l, k_l, v_l, causal=True, pattern=pattern, mode=mode, layout=layout)
    out = gather(out_l, layout=layout)  # (1, 4, 1024, 32) on every rank
    mask = torch.ones(1024, 1024, dtype=torch.bool).tril()
    if pattern is not None:
        mask &= pattern.materialize(1024)
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    err = (out - ref).abs().max().item()
    if dist.get_rank() == 0:
        print(f"{mode:7s} {layout:10s} window={pattern is not None}: max |error| vs one process = {err:.1e}")
    assert err < 1e-10
dist.destroy_process_group()
