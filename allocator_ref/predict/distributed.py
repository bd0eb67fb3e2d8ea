"""One rank of a distributed job, recorded on a fake process group (no GPU, no peers).

A script that calls ``torch.distributed.init_process_group("nccl")`` and wraps its model in
``DistributedDataParallel`` is recorded as rank 0 of ``world_size`` ranks: the group becomes
PyTorch's test backend ``"fake"`` (torch/testing/_internal/distributed/fake_pg.py: every
collective succeeds at once and moves no data), so DDP's own allocations on that rank are
recorded as on a GPU:

* the gradient buckets (``Reducer::initialize_buckets``, torch/csrc/distributed/c10d/reducer.cpp:
  one flat buffer per bucket, ``bucket_cap_mb`` each): a second copy of the gradients, unless
  ``gradient_as_bucket_view=True`` makes the gradients views into them;
* the flattened copy ``_sync_module_states`` broadcasts at construction.

Two stand-ins make DDP run there: its shape check across ranks
(``_verify_param_shape_across_processes``, an all-gather of metadata the fake group answers with
nothing) is skipped, and every DDP gets a comm hook that returns its bucket as the reduced result,
which is what the default hook's in-place ``allreduce`` and ``div_`` leave in memory
(torch/distributed/algorithms/ddp_comm_hooks/default_hooks.py ``allreduce_hook``).  NCCL's own
buffers are beside the allocator and not recorded (unseen.py).

FSDP is not modelled.  FSDP2 (``fully_shard``) all-gathers each unit's parameters and
reduce-scatters its gradients on streams of their own (``FSDPCommContext.lazy_init`` in
torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py, read in torch 2.13: an all-gather
copy-in, an all-gather and a reduce-scatter stream), and the allocator keeps a separate pool per
stream, while this recording has one stream; FSDP1 (``FullyShardedDataParallel``) flattens and
shards on its own streams as well.  Wrapping a module in either is refused by name, with the
parameter bytes it would have sharded, instead of recording something else.
"""
from __future__ import annotations

import os
from contextlib import contextmanager

import torch

from ..editions.messages import translator
from . import caveats
from .caveats import NoAnswer

tr = translator("doctor")


def _parameter_bytes(module) -> int:
    """Bytes of the parameters a wrapper would shard (each counted once, as FSDP groups them)."""
    seen = {id(p): p for p in module.parameters()} if isinstance(module, torch.nn.Module) else {}
    return sum(p.numel() * p.element_size() for p in seen.values())


def _refuse_fsdp(name: str, world: int):
    def refuse(module=None, *args, **kwargs):
        import torch.distributed as dist
        ranks = dist.get_world_size() if dist.is_initialized() else world
        at_stake = _parameter_bytes(module)
        mib = at_stake / 2**20
        refusal = NoAnswer(tr("{line}: {name} is not modelled by predict: it would shard {mib} MiB of parameters "
                          "over {world} ranks and gather them back per unit on streams of its own, which this "
                          "one-stream recording does not have; predict records one rank of DDP, or the step "
                          "without FSDP", line=caveats.user_line(), name=name, mib=f"{mib:,.1f}",
                          world=ranks))
        refusal.parameter_bytes = at_stake
        raise refusal
    return refuse


def _bucket_as_reduced(state, bucket):
    """The default allreduce hook reduces the bucket in place: hand the bucket back."""
    future = torch.futures.Future()
    future.set_result(bucket.buffer())
    return future


def _fsdp_refusals(world: int) -> list:
    """fully_shard (both places a script imports it from) and FullyShardedDataParallel refuse by
    name while recording; returns the originals to put back."""
    import importlib
    patches = []
    for module_name in ("torch.distributed.fsdp", "torch.distributed._composable.fsdp"):
        try:
            owner = importlib.import_module(module_name)
        except ImportError:
            continue
        if hasattr(owner, "fully_shard"):
            patches.append((owner, "fully_shard", _refuse_fsdp("fully_shard (FSDP2)", world)))
        if hasattr(owner, "FullyShardedDataParallel"):
            cls = owner.FullyShardedDataParallel
            refuse = _refuse_fsdp("FullyShardedDataParallel (FSDP1)", world)
            patches.append((cls, "__init__", lambda self, module=None, *a, **k: refuse(module)))
    originals = [(owner, name, owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name))
                 for owner, name, _ in patches]
    for owner, name, value in patches:
        setattr(owner, name, value)
    return originals


@contextmanager
def one_rank(world_size: int | None = None):
    """init_process_group -> rank 0 of a fake group of ``world_size`` (default: $WORLD_SIZE or 1);
    DDP as above.  The group is destroyed afterwards if this made it."""
    import torch.distributed as dist
    if not dist.is_available():
        yield
        return
    import torch.nn.parallel.distributed as ddp_module
    from torch.testing._internal.distributed.fake_pg import FakeStore
    ranks = world_size or int(os.environ.get("WORLD_SIZE", "1") or 1)
    made: list = []
    original_init = dist.init_process_group
    original_verify = ddp_module._verify_param_shape_across_processes
    original_ddp_init = ddp_module.DistributedDataParallel.__init__

    def init_process_group(backend=None, *args, **kwargs):
        if dist.is_initialized():
            return None
        made.append(True)
        asked = kwargs.get("world_size", -1)
        world = asked if asked and asked > 0 else ranks
        watch = caveats.current()
        if watch is not None:
            watch.caveats.append(caveats.Caveat("distributed", None, False, caveats.user_line(), str(world)))
        return original_init("fake", store=FakeStore(), rank=0, world_size=world)

    def ddp_init(self, module, device_ids=None, output_device=None, *args, **kwargs):
        # device_ids only makes forward() move the inputs to that GPU (_to_kwargs, on a CUDA side
        # stream the CPU build lacks); here they are on the simulated GPU already.
        original_ddp_init(self, module, None, None, *args, **kwargs)
        self.register_comm_hook(None, _bucket_as_reduced)

    dist.init_process_group = init_process_group
    ddp_module._verify_param_shape_across_processes = lambda *a, **k: None
    ddp_module.DistributedDataParallel.__init__ = ddp_init
    fsdp = _fsdp_refusals(ranks)
    try:
        yield
    finally:
        for owner, name, value in fsdp:
            setattr(owner, name, value)
        dist.init_process_group = original_init
        ddp_module._verify_param_shape_across_processes = original_verify
        ddp_module.DistributedDataParallel.__init__ = original_ddp_init
        if made and dist.is_initialized():
            dist.destroy_process_group()
