"""How torch_npu sizes a request: 32 bytes of padding before PyTorch's rounding.

``round_size`` in ``torch_npu/csrc/core/npu/NPUCachingAllocator.cpp`` (Ascend/pytorch v2.11.0-26.1.0)
starts with ``size += AddPadSize()``: on every Ascend SoC before the Ascend950, or with CANN older
than 9.1.0, ``AddPadSize`` is 32 ("The current CANN and Soc versions require processing for 32
padding size"), because aclrtMalloc'd operator buffers may be read up to 32 bytes past their end.
Then the rounding is PyTorch's (``round_size`` in ../config.py).  So a 512-byte tensor takes a 1 KiB
block on an Atlas A2, 512 bytes on an H100; every request whose size is a multiple of 512, or
falls 1..32 bytes short of one, takes 512 bytes more than on CUDA.

The pad-free case: ``AddPadSize`` returns 0 only when ``GetSocVersion() >= SocVersion::Ascend950``
*and* ``IsGteCANNVersion("9.1.0", "CANN")`` (``kMinDel32PaddingSizeCannVersion``); it is read once
per process from the card and the installed CANN, not from ``PYTORCH_NPU_ALLOC_CONF``.  So it is a
fact about the machine, given to the allocator as ``pad`` (``add_pad_size`` below says which).
"""
from __future__ import annotations

from ..config import round_size

ASCEND_PAD = 32        # AddPadSize() on pre-Ascend950 SoCs (Atlas 800T A2, 300I ...)
PADS = (ASCEND_PAD, 0)  # the only two values AddPadSize() returns


def add_pad_size(ascend950_or_later: bool, cann_9_1_or_later: bool) -> int:
    """``AddPadSize()``: 0 on an Ascend950 (or later SoC) with CANN 9.1.0 or later, else 32."""
    return 0 if ascend950_or_later and cann_9_1_or_later else ASCEND_PAD


def npu_round_size(size: int, config, pad: int = ASCEND_PAD) -> int:
    """``round_size`` of NPUCachingAllocator.cpp: pad first, then PyTorch's 512 B / power-2 rounding."""
    return round_size(size + pad, config)


def aligned_offset(ptr: int, size: int, block_size: int, align: int) -> int:
    """How many bytes ``malloc`` cuts off the front of a found block to start it ``align``-aligned.

    ``DeviceCachingAllocator::malloc`` after the block is found, with expandable segments on and
    ``params.size() >= kRoundLarge`` (2 MiB): if the block's address is not a multiple of
    ``base_addr_aligned_kb`` (16 KiB by default), the front up to the next multiple becomes a free
    block of its own, provided the request still fits behind it. 0 when nothing is cut."""
    if align == 0 or ptr % align == 0:
        return 0
    offset = align - ptr % align
    return offset if offset + size <= block_size else 0
