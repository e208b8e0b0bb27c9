"""Data-parallel training over processes started by ``torchrun``.

Every process embeds its block of the global batch; the sub-document vectors of all processes are
gathered *with their gradients*, so every process computes the loss over the whole global batch (every
sub-document a negative for every pair) and back-propagates into its own block. Weight gradients are
then averaged over the processes, which gives exactly the single-process gradient: process ``r``'s
vectors receive ``world_size`` times their share (one copy of the loss per process), and the average
divides it out.

Gradients are averaged by one all-reduce over the flattened gradients after the whole step, rather than
by wrapping the model in ``DistributedDataParallel``: gradient caching runs the model several times per
step outside its ``forward``, which DDP's hooks do not expect. The effect is DDP's.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any, Callable, Iterable

import torch
import torch.distributed as dist

from graphdoc.device import resolve_device
from graphdoc.errors import GraphDocError

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class DistContext:
    """This process's place among the training processes (``world_size == 1``: not distributed)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def init_from_env(device: str | torch.device | None = None) -> tuple[DistContext, torch.device]:
    """Join the process group described by torchrun's ``RANK``/``WORLD_SIZE``/``LOCAL_RANK`` variables.

    Uses NCCL on CUDA (one GPU per process, by local rank) and gloo on the CPU. Without those variables
    (or with ``WORLD_SIZE=1``) nothing is initialised.
    """
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size <= 1:
        return DistContext(), resolve_device(device)
    rank, local_rank = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    local_size = int(os.environ.get("LOCAL_WORLD_SIZE", world_size))  # processes on this machine
    if torch.cuda.is_available() and (device is None or str(device) == "cuda"):
        # the local rank's GPU; a launcher may leave each process one GPU (CUDA_VISIBLE_DEVICES): then that one
        count = torch.cuda.device_count()
        if count > 1 and local_rank >= count:
            raise GraphDocError(f"process {rank} has local rank {local_rank} but sees {count} GPUs: start at most "
                                f"{count} processes a machine (torchrun --nproc-per-node)")
        device = f"cuda:{local_rank if count > 1 else 0}"
    elif torch.cuda.is_available() and str(device).startswith("cuda:") and local_size > 1:
        raise GraphDocError(f"--device {device} under torchrun would put all {local_size} processes of this machine "
                            "on one GPU: give --device cuda (or none), and each process takes the GPU of its local "
                            "rank")
    resolved = resolve_device(device or "cpu")
    if resolved.type == "cuda":
        torch.cuda.set_device(resolved)
    if not dist.is_initialized():
        backend = "nccl" if resolved.type == "cuda" else "gloo"
        dist.init_process_group(backend=backend, rank=rank, world_size=world_size)
    if dist.get_world_size() != world_size:
        raise GraphDocError(f"process group has {dist.get_world_size()} processes, WORLD_SIZE says {world_size}")
    logger.info("process %d of %d on %s", rank, world_size, resolved)
    return DistContext(rank, world_size, local_rank), resolved


def gather_with_grad(z: torch.Tensor, ctx: DistContext) -> torch.Tensor:
    """All processes' rows of ``z``, in rank order, differentiable: ``[n_r, d] -> [sum_r n_r, d]``.

    The blocks may differ in size (e.g. the last, smaller batch of an epoch).
    """
    if not ctx.enabled:
        return z
    sizes = gather_tensors(torch.tensor([len(z)], device=z.device), ctx)
    longest = int(max(s.item() for s in sizes))
    padded = torch.cat([z, z.new_zeros((longest - len(z), *z.shape[1:]))]) if len(z) < longest else z
    blocks = _AllGather.apply(padded)
    return torch.cat([block[:int(size.item())] for block, size in zip(blocks, sizes)])


class _AllGather(torch.autograd.Function):
    """Every process's tensor; the backward pass sums each block's gradient over the processes and hands
    each process its own block's (as ``torch.distributed.nn.functional.all_gather``, deprecated in torch
    2.13 for a private replacement)."""

    @staticmethod
    def forward(ctx, tensor: torch.Tensor) -> tuple[torch.Tensor, ...]:
        out = [torch.empty_like(tensor) for _ in range(dist.get_world_size())]
        dist.all_gather(out, tensor.contiguous())
        return tuple(out)

    @staticmethod
    def backward(ctx, *grads: torch.Tensor) -> torch.Tensor:
        stacked = torch.stack([g.contiguous() for g in grads])  # [world, ...]
        dist.all_reduce(stacked)
        return stacked[dist.get_rank()]


def gather_tensors(t: torch.Tensor, ctx: DistContext) -> list[torch.Tensor]:
    """Equal-shape tensors from every process, without gradients (``[t]`` when not distributed)."""
    if not ctx.enabled:
        return [t]
    out = [torch.empty_like(t) for _ in range(ctx.world_size)]
    dist.all_gather(out, t.contiguous())
    return out


def average_gradients(parameters: Iterable[torch.nn.Parameter], ctx: DistContext) -> None:
    """Average the gradients of ``parameters`` over the processes (missing ones count as zero)."""
    if not ctx.enabled:
        return
    params = [p for p in parameters if p.requires_grad]
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)
    flat /= ctx.world_size
    offset = 0
    for p in params:
        n = p.numel()
        p.grad = flat[offset:offset + n].view_as(p).clone()
        offset += n


def from_main(compute: Callable[[], Any], ctx: DistContext) -> Any:
    """``compute()`` run by process 0 alone, its result handed to every process (e.g. a digest of the corpus
    files: one read of them, not one per process)."""
    if not ctx.enabled:
        return compute()
    box = [compute() if ctx.is_main else None]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def barrier(ctx: DistContext) -> None:
    if ctx.enabled:
        dist.barrier()


def shutdown(ctx: DistContext) -> None:
    """Leave the process group, if this module joined one."""
    if ctx.enabled and dist.is_initialized():
        dist.destroy_process_group()
