"""``torch.cuda.memory_summary()``: the 75-column table, byte for byte.

Mirrors ``memory_summary`` in ``torch/cuda/memory.py`` (the 75-column table).
"""
from __future__ import annotations

_BYTE_ROWS = (
    ("allocated_bytes", "Allocated memory"),
    ("active_bytes", "Active memory"),
    ("requested_bytes", "Requested memory"),
    ("reserved_bytes", "GPU reserved memory"),
    ("inactive_split_bytes", "Non-releasable memory"),
)
_COUNT_ROWS = (
    ("allocation", "Allocations"),
    ("active", "Active allocs"),
    ("segment", "GPU reserved segments"),
    ("inactive_split", "Non-releasable allocs"),
)
_SINGLE_ROWS = (
    ("oversize_allocations", "Oversize allocations"),
    ("oversize_segments", "Oversize GPU segments"),
)


def _format_size(sz: int, pref_sz: int) -> str:
    """Bytes: step up a unit while the *reference* value is >= 768 KiB-ish (memory.py's _format_size)."""
    prefixes = ["B  ", "KiB", "MiB", "GiB", "TiB", "PiB"]
    prefix = prefixes[0]
    for new_prefix in prefixes[1:]:
        if pref_sz < 768 * 1024:
            break
        prefix = new_prefix
        sz //= 1024
        pref_sz /= 1024
    return f"{sz:6d} {prefix}"


def _format_count(cnt: int, pref_cnt: int) -> str:
    prefixes = [" ", "K", "M"]
    prefix = prefixes[0]
    for new_prefix in prefixes[1:]:
        if pref_cnt < 750 * 1000:
            break
        prefix = new_prefix
        cnt //= 1000
        pref_cnt /= 1000
    return f"{cnt:7d} {prefix} "


def memory_summary(stats: dict, device: int = 0, abbreviated: bool = False, kind: str = "CUDA",
                   malloc: str = "cudaMalloc") -> str:
    """The summary table for a flat ``memory_stats()`` dict.

    ``kind`` and ``malloc`` name the device and its malloc in the header: torch_npu's
    ``memory_summary`` (torch_npu/npu/memory.py) writes "NPU" and "npuMalloc" in the same 75 columns."""
    metrics = ("current", "peak", "allocated", "freed")
    lines = [
        "=" * 75,
        " {_:16} PyTorch " + kind + " memory summary, device ID {device:<" + str(21 - len(kind)) + "d} ",
        "-" * 75,
        "  {_:9} " + kind + " OOMs: {num_ooms:<" + str(16 - len(kind)) + "d} | {_:6} " + malloc
        + " retries: {num_alloc_retries:<" + str(18 - len(malloc)) + "d}  ",
        "=" * 75,
        "        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  ",
    ]

    def rows(key: str, name: str, formatter, submetrics) -> None:
        lines.append("-" * 75)
        prefix_values = None
        for sub_key, sub_name in submetrics:
            values = [stats.get(f"{key}.{sub_key}.{m}" if sub_key else f"{key}.{m}", 0) for m in metrics]
            if prefix_values is None:
                prefix_values = values           # sub-rows format against the "all" row
                label = name
            else:
                label = " " + sub_name
            cells = [formatter(v, p) for v, p in zip(values, prefix_values)]
            lines.append(" {:<21} | {} | {} | {} | {} ".format(label, *cells))

    pools = [("all", "")]
    if not abbreviated:
        pools += [("large_pool", "     from large pool"), ("small_pool", "     from small pool")]
    for key, name in _BYTE_ROWS:
        rows(key, name, _format_size, pools)
    for key, name in _COUNT_ROWS:
        rows(key, name, _format_count, pools)
    for key, name in _SINGLE_ROWS:
        rows(key, name, _format_count, [(None, "")])
    lines.append("=" * 75)

    fmt = {"_": "", "device": device, "num_ooms": stats.get("num_ooms", 0),
           "num_alloc_retries": stats.get("num_alloc_retries", 0)}
    return "|" + "|\n|".join(lines).format(**fmt) + "|\n"
