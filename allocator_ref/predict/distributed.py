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
"""
from __future__ import annotations

import os
from contextlib import contextmanager

import torch

from . import caveats


def _bucket_as_reduced(state, bucket):
    """The default allreduce hook reduces the bucket in place: hand the bucket back."""
    future = torch.futures.Future()
    future.set_result(bucket.buffer())
    return future


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
    try:
        yield
    finally:
        dist.init_process_group = original_init
        ddp_module._verify_param_shape_across_processes = original_verify
        ddp_module.DistributedDataParallel.__init__ = original_ddp_init
        if made and dist.is_initialized():
            dist.destroy_process_group()
