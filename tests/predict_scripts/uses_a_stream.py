"""A step that makes its own CUDA stream: the recording has one stream and no CUDA runtime."""
import torch


def step():
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        return torch.empty(1024, device="cuda")
