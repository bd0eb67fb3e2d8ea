"""A model run through torch.compile (default mode, or one that adds CUDA graphs)."""
import torch


def step(mode=None):
    model = torch.nn.Linear(256, 256).cuda()
    fast = torch.compile(model, mode=mode)
    fast(torch.randn(8, 256, device="cuda")).sum().backward()
    return fast is model
