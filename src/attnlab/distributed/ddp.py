"""Data-parallel training on ``torch.distributed``: what the training loop needs from torchrun.

``torchrun --nproc-per-node N -m attnlab train ...`` starts N processes with ``RANK``,
``WORLD_SIZE``, ``LOCAL_RANK`` and ``MASTER_ADDR``/``MASTER_PORT`` set. ``World.from_env()``
joins them into one process group (gloo on CPU, NCCL on CUDA) or, outside torchrun, is the
single process of a world of one, so the training loop has one code path:

* ``world.shard(batch_indices)``: this rank's part of a *global* batch (every rank draws the
  same global batch from the same seed, then takes its slice), so N processes with batch B/N
  see exactly the examples of one process with batch B; B need not divide by N, and a batch
  smaller than N leaves some ranks an empty shard: ``world.shard_or_stand_in`` gives those a
  stand-in example whose loss counts 0 (``Runtime.step(..., real=False)``);
* ``world.wrap(model)``: ``DistributedDataParallel`` when there is more than one process
  (gradients are averaged across ranks in the backward);
* ``world.is_main``: rank 0 writes checkpoints and logs;
* ``world.mean(x)``: a float averaged over the ranks (losses for the log).

Losses: each rank's loss is the mean over its own tokens, and DDP averages gradients over
ranks; so the loss of a sum over tokens must be normalised by the *global* token count,
which ``world.sum(n_tokens)`` gives (``loss = loss_sum · world.size / global_tokens``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class World:
    rank: int = 0
    size: int = 1
    local_rank: int = 0

    @classmethod
    def from_env(cls, device: torch.device | str | None = None) -> World:
        """Join torchrun's process group if the environment names one; else a world of one."""
        size = int(os.environ.get("WORLD_SIZE", "1"))
        if size <= 1:
            return cls()
        rank, local = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
        if not dist.is_initialized():
            dev = torch.device(device) if device is not None else torch.device("cpu")
            backend = "nccl" if dev.type == "cuda" else "gloo"
            if dev.type == "cuda":
                torch.cuda.set_device(local)
            dist.init_process_group(backend, rank=rank, world_size=size)
        return cls(rank, size, local)

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def shard(self, indices: list[int]) -> list[int]:
        """This rank's contiguous part of a global batch (sizes differ by at most one)."""
        n = len(indices)
        lo, hi = self.rank * n // self.size, (self.rank + 1) * n // self.size
        return indices[lo:hi]

    def shard_or_stand_in(self, indices: list[int]) -> tuple[list[int], bool]:
        """(this rank's shard, True), or, when the shard is empty (a global batch smaller than the
        world), (the batch's first item, False): a stand-in that the rank runs with weight 0, since
        DDP averages gradients only when every rank runs a forward and a backward."""
        mine = self.shard(indices)
        return (mine, True) if mine or not indices else (indices[:1], False)

    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        if self.size == 1:
            return model
        from torch.nn.parallel import DistributedDataParallel

        dev = next(model.parameters()).device
        return DistributedDataParallel(model, device_ids=[dev.index] if dev.type == "cuda" else None)

    def sum(self, value: float | int) -> float:
        if self.size == 1:
            return float(value)
        t = torch.tensor(float(value), dtype=torch.float64)
        dist.all_reduce(t)
        return float(t)

    def mean(self, value: float) -> float:
        return self.sum(value) / self.size

    def barrier(self) -> None:
        if self.size > 1:
            dist.barrier()

    def close(self) -> None:
        if self.size > 1 and dist.is_initialized():
            dist.destroy_process_group()


__all__ = ["World"]
