"""memory_summary(): the 75-column table of torch.cuda.memory_summary (torch/cuda/memory.py)."""
from __future__ import annotations

import pytest

import allocator_ref as ar
from caching_helpers import MiB, make_alloc  # noqa: F401

SEP, THICK = "|" + "-" * 75 + "|", "|" + "=" * 75 + "|"


def row(name, *cells):
    return "| " + f"{name:<21}" + " | " + " | ".join(cells) + " |"


def test_layout_after_a_four_byte_request(make_alloc):
    a = make_alloc()
    a.malloc(4)
    text = a.memory_summary()
    assert text.endswith("|\n")
    lines = text.rstrip("\n").split("\n")
    assert all(len(line) == 77 and line[0] == "|" and line[-1] == "|" for line in lines)
    assert len(lines) == 1 + 5 + 5 * 4 + 4 * 4 + 2 * 2 + 1 - 0   # 47
    assert lines[0] == THICK and lines[2] == SEP and lines[4] == THICK and lines[-1] == THICK
    assert lines[1] == "|" + " " * 17 + " PyTorch CUDA memory summary, device ID 0" + " " * 16 + " |"
    assert lines[3] == "|  " + " " * 9 + " CUDA OOMs: 0" + " " * 11 + " | " + " " * 6 + \
        " cudaMalloc retries: 0" + " " * 7 + "  |"
    assert lines[5] == "|        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  |"
    # byte cells: f"{n:6d} {unit}", unit chosen from the "all" row's value of the same column
    assert row("Allocated memory", "   512 B  ", "   512 B  ", "   512 B  ", "     0 B  ") in lines
    assert row("      from large pool", "     0 B  ", "     0 B  ", "     0 B  ", "     0 B  ") in lines
    assert row("      from small pool", "   512 B  ", "   512 B  ", "   512 B  ", "     0 B  ") in lines
    assert row("Requested memory", "     4 B  ", "     4 B  ", "     4 B  ", "     0 B  ") in lines
    assert row("GPU reserved memory", "  2048 KiB", "  2048 KiB", "  2048 KiB", "     0 B  ") in lines
    assert row("      from large pool", "     0 KiB", "     0 KiB", "     0 KiB", "     0 B  ") in lines
    # 2,096,640 B -> 2047 KiB (integer division)
    assert row("Non-releasable memory", "  2047 KiB", "  2047 KiB", "  2047 KiB", "     0 B  ") in lines
    assert row("Allocations", "      1   ", "      1   ", "      1   ", "      0   ") in lines
    assert row("GPU reserved segments", "      1   ", "      1   ", "      1   ", "      0   ") in lines
    assert row("Non-releasable allocs", "      1   ", "      1   ", "      1   ", "      0   ") in lines
    assert row("Oversize allocations", "      0   ", "      0   ", "      0   ", "      0   ") in lines
    assert row("Oversize GPU segments", "      0   ", "      0   ", "      0   ", "      0   ") in lines
    # order of the sections
    names = [line[2:23].strip() for line in lines[6:] if line not in (SEP, THICK)]
    assert [n for n in names if not n.startswith("from")] == [
        "Allocated memory", "Active memory", "Requested memory", "GPU reserved memory",
        "Non-releasable memory", "Allocations", "Active allocs", "GPU reserved segments",
        "Non-releasable allocs", "Oversize allocations", "Oversize GPU segments"]


def test_rows_of_one_four_byte_request(make_alloc):
    """One 4-byte request: a 512 B block in a new 2 MiB (2048 KiB) small segment, nothing large."""
    a = make_alloc()
    a.malloc(4)
    text = a.memory_summary()
    assert "| Allocated memory      |    512 B   |" in text
    assert "| GPU reserved memory   |   2048 KiB |" in text
    assert "|       from large pool |      0 KiB |" in text


def test_byte_unit_threshold_is_768_kib(make_alloc):
    a = make_alloc()
    a.malloc(786431)                 # requested 786,431 < 768 KiB: bytes; allocated 786,432: KiB
    text = a.memory_summary()
    assert row("Requested memory", "786431 B  ", "786431 B  ", "786431 B  ", "     0 B  ") in text
    assert row("Allocated memory", "   768 KiB", "   768 KiB", "   768 KiB", "     0 B  ") in text
    b = make_alloc()
    b.malloc(3 * 1024 * MiB)         # 3 GiB: KiB (3,145,728 >= 786,432) then MiB (3072 < 786,432): stop
    assert row("Allocated memory", "  3072 MiB", "  3072 MiB", "  3072 MiB", "     0 B  ") in b.memory_summary()


def test_abbreviated_has_no_pool_rows(make_alloc):
    a = make_alloc()
    a.malloc(4)
    lines = a.memory_summary(abbreviated=True).rstrip("\n").split("\n")
    assert len(lines) == 6 + 9 * 2 + 2 * 2 + 1
    assert not any("from large pool" in line or "from small pool" in line for line in lines)
    assert all(len(line) == 77 for line in lines)


def test_oom_and_retries_line(make_alloc):
    a = make_alloc(profile="tiny-1gb")
    with pytest.raises(ar.OutOfMemoryError):
        a.malloc(2 * 1024 * MiB)
    lines = a.memory_summary().split("\n")
    assert lines[3] == "|  " + " " * 9 + " CUDA OOMs: 1" + " " * 11 + " | " + " " * 6 + \
        " cudaMalloc retries: 1" + " " * 7 + "  |"


def test_count_unit_threshold_is_750k():
    from allocator_ref.caching.summary import memory_summary
    stats = {"allocation.all.current": 750_000, "allocation.all.peak": 749_999,
             "allocation.all.allocated": 2_000_000_000, "allocation.all.freed": 0}
    text = memory_summary(stats, 0)
    assert row("Allocations", "    750 K ", " 749999   ", "   2000 M ", "      0   ") in text
