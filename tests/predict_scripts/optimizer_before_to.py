"""An optimizer built before model.to("cuda"), as many real scripts do (the same Parameter objects move)."""
import torch


def step(batch_size=8, optimizer_first=True):
    model = torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024))
    if optimizer_first:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model.to("cuda")
    if not optimizer_first:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randn(batch_size, 1024, device="cuda")
    model(x).sum().backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
