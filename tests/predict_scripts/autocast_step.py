"""One mixed-precision training step: torch.autocast("cuda") with bf16 or fp16, and a GradScaler."""
import torch


def step(dtype="bfloat16", forwards=1, regions=1, scaler=False):
    dtype = getattr(torch, dtype)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10)).cuda()
    opt = torch.optim.AdamW(model.parameters())
    grad_scaler = torch.amp.GradScaler("cuda", enabled=scaler)
    x = torch.randn(32, 64, device="cuda")
    y = torch.randint(0, 10, (32,), device="cuda")
    for _ in range(regions):
        with torch.autocast("cuda", dtype=dtype):
            for _ in range(forwards):
                loss = torch.nn.functional.cross_entropy(model(x), y)
        grad_scaler.scale(loss).backward()
        grad_scaler.step(opt)
        grad_scaler.update()
        opt.zero_grad(set_to_none=True)
