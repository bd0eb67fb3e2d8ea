"""torch_npu's ``NPUCachingAllocator``: PyTorch's caching allocator with Ascend's own rules.

torch_npu (Ascend/pytorch, branch v2.11.0-26.1.0, for PyTorch 2.11) ports
``CUDACachingAllocator.cpp`` to ``torch_npu/csrc/core/npu/NPUCachingAllocator.cpp``: the same pools,
best fit, splitting, merging, expandable segments and stats.  So this design *is* the course's
caching core (../device_caching_allocator.py) with only what differs overridden here:

1. rounding: 32 bytes of padding before the 512 B rounding (rounding.py, ``round_size``);
2. alignment: with expandable segments, a large block starts ``base_addr_aligned_kb``-aligned
   (16 KiB by default; ``malloc``, after the block is found);
3. expandable pages: the large pool's page follows ``large_segment_size_mb``, or the deprecated
   ``segment_size_mb`` (``get_custom_expandable_segment_size``; config.py);
4. settings: ``PYTORCH_NPU_ALLOC_CONF`` and its own parser (config.py); oversize requests may take a
   cached block up to ``kLargeBuffer`` (20 MiB) bigger, never ``max_non_split_rounding_mb``;
5. stats: ``memory_stats()`` without the three counters torch_npu does not keep (stats.py);
6. out of memory: torch_npu's own words, "NPU out of memory. Tried to allocate ..." (oom.py).

Not modelled: ``page_size:1g`` (1 GiB huge pages need the Ascend driver to say yes; the parser
accepts the key), ``multi_stream_lazy_reclaim``'s deferred event polling, the HCCL memory
registration of expandable segments, and the workspace allocator (``NPUWorkspaceAllocator.cpp``:
one growing buffer per stream for operator scratch space, outside these pools).
"""
from __future__ import annotations

from typing import Any, Optional

from ...editions.messages import translator
from ..allocator import CachingAllocator
from ..block import Block
from ..device_caching_allocator import AllocParams, DeviceCachingAllocator
from ..config import kRoundLarge
from ..summary import memory_summary
from .config import NPUAllocatorConfig
from .oom import EXABYTE_MESSAGE, NPU_WORDING
from .rounding import ASCEND_PAD, PADS, aligned_offset, npu_round_size
from .stats import npu_memory_stats

tr = translator("doctor")


class NPUDeviceCachingAllocator(DeviceCachingAllocator):
    """``c10_npu::NPUCachingAllocator::DeviceCachingAllocator``: PyTorch's, with Ascend's rules."""

    pad = ASCEND_PAD                       # AddPadSize(): 32, or 0 on an Ascend950 with CANN >= 9.1.0

    exabyte_message = EXABYTE_MESSAGE      # NpuCachingAllocator::allocate: "NPU out of memory. ... 1EB"

    oom_wording = NPU_WORDING              # NPUCachingAllocator.cpp, malloc: torch_npu's own wording (npu/oom.py)

    def round_size(self, size: int) -> int:
        # NPUCachingAllocator.cpp, round_size: "size += AddPadSize();" before the 512 B rounding.
        return npu_round_size(size, self.config, self.pad)

    def alloc_found_block(self, p: AllocParams, orig_size: int, split: bool,
                          context: Optional[list] = None) -> Block:
        # NPUCachingAllocator.cpp, malloc: "if (params.size() >= kRoundLarge &&
        # CachingAllocatorConfig::expandable_segments() && align_round != 0 && ptr % align_round != 0)"
        # the front of the block up to the next aligned address stays free in the pool.
        offset = 0
        if p.size >= kRoundLarge and self.config.expandable_segments:
            offset = aligned_offset(p.block.ptr, p.size, p.block.size, self.config.base_addr_aligned_size)
        if offset:
            front = p.block
            block = Block(front.ptr + offset, front.size - offset, front.stream, front.stream_key, p.pool,
                          expandable_segment=front.expandable_segment)
            block.splice(front, front.next)
            front.size = offset
            p.pool.insert_into_blocks(front)
            p.block = block
            split = self.should_split(block, p.size, p.expandable)   # asked again, of the aligned block
        return super().alloc_found_block(p, orig_size, split, context)


class NPUCachingAllocator(CachingAllocator):
    """torch_npu's caching allocator for one NPU, with torch.npu's functions as methods.

    ``config`` is a ``PYTORCH_NPU_ALLOC_CONF`` string (or an NPUAllocatorConfig); ``read_env=True``
    reads the real environment variable instead, as torch_npu does when it loads.  ``pad`` is what
    ``AddPadSize()`` adds before rounding: 32 (every SoC before the Ascend950, or CANN before 9.1.0) or
    0 (an Ascend950 with CANN 9.1.0 or later: ``rounding.add_pad_size`` says which)."""

    device_allocator_class = NPUDeviceCachingAllocator

    def __init__(self, device: Any = None, config: "str | NPUAllocatorConfig" = "", *,
                 read_env: bool = False, pad: int = ASCEND_PAD) -> None:
        if pad not in PADS or isinstance(pad, bool):
            raise ValueError(tr("pad is what torch_npu's AddPadSize() adds: 32 (an Ascend SoC before the "
                                "Ascend950, or CANN before 9.1.0) or 0 (an Ascend950 with CANN 9.1.0 or later); "
                                "got {pad}", pad=repr(pad)))
        if read_env:
            config = NPUAllocatorConfig.from_env()
        elif not isinstance(config, NPUAllocatorConfig):
            config = NPUAllocatorConfig.parse(config)
        super().__init__(device, config)
        self.device_allocator.pad = pad

    def memory_stats(self) -> dict:
        """``torch.npu.memory_stats()``: PyTorch's keys less the counters torch_npu does not keep (stats.py)."""
        return npu_memory_stats(super().memory_stats())

    def memory_summary(self, abbreviated: bool = False) -> str:
        """``torch.npu.memory_summary()``: the same table, headed "PyTorch NPU memory summary"."""
        return memory_summary(self.memory_stats(), self.device.info.index, abbreviated, kind="NPU",
                              malloc="npuMalloc")
