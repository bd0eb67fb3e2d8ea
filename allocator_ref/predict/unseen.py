"""What a CPU recording cannot see, and what public sources say it costs.

A program run on ``meta`` tensors shows every storage PyTorch creates for the
model's own tensors.  It does not show what the CUDA libraries take behind
PyTorch's back.  Each item below says where its figure comes from and whether
it goes through the caching allocator (then the replay must see it) or beside
it (then it is only subtracted from the GPU's capacity).

* cuBLAS workspace: goes THROUGH the caching allocator.  PyTorch's
  ``getNewWorkspace`` (aten/src/ATen/cuda/CublasHandlePool.cpp) calls
  ``CUDACachingAllocator::get()->allocate(getChosenWorkspaceSize())`` once per
  (cuBLAS handle, stream) on the first GEMM, and keeps it until
  ``torch._C._cuda_clearCublasWorkspaces()``.  ``parseChosenWorkspaceSize``:
  ``CUBLAS_WORKSPACE_CONFIG`` (``:SIZE_KiB:COUNT`` pairs) when set, else
  ``:4096:2:16:8`` = 8,519,680 bytes, or 32 MiB on Hopper (sm90) in 2.11.  Blackwell
  (compute capability 10.x and 12.x) gets 32 MiB from 2.12 on (pytorch/pytorch#175344, merged
  after 2.11's branch cut); the course models 2.11.  Handles come from a per-thread pool
  (``DeviceThreadHandlePool``), and autograd runs backward on its own device
  thread: a training step makes TWO workspaces, one at the first forward GEMM
  and one at the first backward GEMM.  The recorder adds them as traced
  allocations (the real snapshots in the course hold exactly those two).
* CUDA context: BESIDE the allocator; the device profile's ``context_reserve``
  (its JSON file cites the figure) is taken off the GPU's capacity already.
* cuBLASLt workspace: 1 MiB by default (``CUBLASLT_WORKSPACE_SIZE`` in KiB,
  CublasHandlePool.cpp ``parseCUDABlasLtWorkspaceSize``, "default size in KiB
  according to #73328").  In 2.11 it comes from a map of its own
  (``getCUDABlasLtWorkspace``) unless ``TORCH_CUBLASLT_UNIFIED_WORKSPACE=1``;
  from 2.12 on it reuses the cuBLAS workspace unless that variable is 0
  (pytorch/pytorch#175879).  Not added: listed as an estimate.
* Kernel workspaces (cuDNN convolutions, cub sorts inside embedding backward,
  flash attention's scratch): allocated inside one ATen kernel and freed before
  it returns; a dispatch-level recorder never sees them.  No general public
  figure: not estimated, listed.
* NCCL buffers: BESIDE the allocator (NCCL calls cudaMalloc itself).  NCCL's
  documentation: ``NCCL_BUFFSIZE`` default 4 MiB per channel per peer.
  Only for distributed runs; not added.
* Autocast weight cache: goes through the allocator, kept until the autocast
  region exits (``torch.clear_autocast_cache``).  Recorded on ``meta`` only if
  the program runs autocast on that device type; listed.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, asdict

from ..editions.messages import translator

tr = translator("doctor")          # what the prediction cannot see, in the reader's language

MiB = 2**20

# parseChosenWorkspaceSize's default without CUBLAS_WORKSPACE_CONFIG: ":4096:2:16:8".
DEFAULT_CUBLAS_WORKSPACE = (4096 * 2 + 16 * 8) * 1024            # 8,519,680 bytes
HOPPER_CUBLAS_WORKSPACE = 4096 * 8 * 1024                         # 32 MiB (sm90 in 2.11; 10.x, 12.x too from 2.12)
CUBLASLT_WORKSPACE = 1024 * 1024                                  # CUBLASLT_WORKSPACE_SIZE default, 1024 KiB
NCCL_BUFFSIZE = 4 * MiB                                           # NCCL_BUFFSIZE default

# The course's device profiles -> the GPU's compute capability major (NVIDIA datasheets).
PROFILE_ARCH = {"h100-80gb": 9, "h200-141gb": 9, "t4-16gb": 7, "tiny-1gb": 7}


def cublas_workspace_bytes(profile: str = "h100-80gb", config: str | None = None) -> int:
    """``getChosenWorkspaceSize()`` for a GPU of ``profile`` (CUBLAS_WORKSPACE_CONFIG wins when given)."""
    if config is None:
        config = os.environ.get("CUBLAS_WORKSPACE_CONFIG")
    if config:
        pairs = re.findall(r":([0-9]+):([0-9]+)", config)
        if not pairs:
            raise ValueError(f"CUBLAS_WORKSPACE_CONFIG={config!r} has no ':SIZE:COUNT' pair "
                             "(e.g. ':4096:8'); fix or unset it")
        return sum(int(size) * 1024 * int(count) for size, count in pairs)
    major = PROFILE_ARCH.get(profile, 9)
    # 2.11's parseChosenWorkspaceSize: properties->major == 9 && minor == 0 (every profile here is x.0)
    return HOPPER_CUBLAS_WORKSPACE if major == 9 else DEFAULT_CUBLAS_WORKSPACE


@dataclass
class Unseen:
    """One thing outside the recording: its name, bytes (None: no public figure), where it lives."""
    name: str
    nbytes: int | None
    through_allocator: bool
    added_to_trace: bool
    source: str

    def to_json(self) -> dict:
        return asdict(self)


def unseen_items(profile: str, context_reserve: int, workspaces: int, workspace_bytes: int) -> list[Unseen]:
    """The list a prediction prints under "not traced" (and the workspaces it did add)."""
    # Names and sources in the reader's language (the figures and PyTorch's function names stay as they are)
    return [
        Unseen(tr("cuBLAS workspace"), workspaces * workspace_bytes, True, True,
               tr("{n} x {size} B, CublasHandlePool.cpp parseChosenWorkspaceSize (one per handle and stream; "
                  "forward and backward run on two threads)", n=workspaces, size=f"{workspace_bytes:,}")),
        Unseen(tr("CUDA context"), context_reserve, False, False,
               tr("device profile {profile} context_reserve (taken off the GPU's capacity)", profile=repr(profile))),
        Unseen(tr("cuBLASLt workspace"), CUBLASLT_WORKSPACE, True, False,
               tr("CUDABlas.cpp _parseChosenWorkspaceSize default 1024 KiB (shared with cuBLAS's in newer PyTorch)")),
        Unseen(tr("kernel workspaces (cuDNN, cub, flash attention)"), None, True, False,
               tr("allocated and freed inside one kernel: invisible at dispatch level; no general figure")),
        Unseen(tr("NCCL buffers"), NCCL_BUFFSIZE, False, False,
               tr("NCCL docs: NCCL_BUFFSIZE default 4 MiB per channel and peer; distributed runs only")),
        Unseen(tr("autocast weight cache"), None, True, False,
               tr("kept until the autocast region exits; traced only if the program autocasts on that device")),
    ]
