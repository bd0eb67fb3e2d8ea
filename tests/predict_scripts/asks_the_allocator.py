"""A script that prints torch.cuda.memory_allocated() inside its step: no allocator runs while recording."""
import torch


def step():
    x = torch.empty(1024, device="cuda")
    print(torch.cuda.memory_allocated())
    return x
