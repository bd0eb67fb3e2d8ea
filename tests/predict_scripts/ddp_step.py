"""One DDP training step as a GPU script writes it (nccl, device_ids): predict records rank 0 of WORLD_SIZE."""
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def step(view=False):
    dist.init_process_group("nccl")
    model = torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.Linear(1024, 1024)).cuda()
    ddp = DDP(model, device_ids=[0], gradient_as_bucket_view=view)
    ddp(torch.randn(8, 1024, device="cuda")).sum().backward()
    torch.cuda.memory._record_memory_history()          # a window that opens after backward: what stays live
    torch.cuda.memory._record_memory_history(enabled=None)
    world = dist.get_world_size()
    dist.destroy_process_group()
    return world
