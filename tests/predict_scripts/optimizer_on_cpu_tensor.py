"""An optimizer that steps a tensor predict never sees on the GPU (made and trained on the CPU here)."""
import torch

extra = torch.nn.Parameter(torch.zeros(512, 1024))        # 2 MiB of float32, never moved to "cuda"


def step(batch_size=8):
    model = torch.nn.Linear(1024, 1024).cuda()
    opt = torch.optim.Adam(list(model.parameters()) + [extra])
    model(torch.randn(batch_size, 1024, device="cuda")).sum().backward()
    (extra ** 2).sum().backward()
    opt.step()
