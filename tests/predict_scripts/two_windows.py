"""Two measured runs in one script, memory history started and stopped, empty_cache() between them."""
import torch

MiB = 2**20


def step(empty=True):
    torch.cuda.memory._record_memory_history(max_entries=100_000)
    big = torch.empty(64 * MiB, dtype=torch.uint8, device="cuda")
    del big
    torch.cuda.memory._record_memory_history(enabled=None)
    if empty:
        torch.cuda.empty_cache()
    torch.cuda.memory._record_memory_history(max_entries=100_000)
    small = torch.empty(16 * MiB, dtype=torch.uint8, device="cuda")
    del small
    torch.cuda.memory._record_memory_history(enabled=None)
