"""Attention scores under autocast: softmax runs in float32 (autocast's fp32_set_opt_dtype policy)."""
import torch


def step(dtype="float16"):
    scores = torch.empty(4, 256, 256, device="cuda", dtype=getattr(torch, dtype))
    with torch.autocast("cuda", dtype=getattr(torch, dtype)):
        probs = torch.softmax(scores, dim=-1)
    return probs
