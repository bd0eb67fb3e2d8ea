"""One FSDP training step as a GPU script writes it (nccl, fully_shard per layer, or FSDP1's wrapper)."""
import torch
import torch.distributed as dist
from torch.distributed.fsdp import FullyShardedDataParallel, fully_shard


def step(version=2):
    dist.init_process_group("nccl")
    model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 1024)).cuda()
    if version == 2:
        for layer in model:
            if isinstance(layer, torch.nn.Linear):
                fully_shard(layer)
        fully_shard(model)
    else:
        model = FullyShardedDataParallel(model)
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.randn(8, 1024, device="cuda")).sum().backward()
    optimizer.step()
