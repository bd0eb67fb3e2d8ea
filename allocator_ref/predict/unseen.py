"""What a CPU recording cannot see, and what public sources say it costs.

A program run on ``meta`` tensors shows every storage PyTorch creates for the
model's own tensors.  It does not show what the CUDA libraries take behind
PyTorch's back.  Each item below says where its figure comes from and whether
it goes through the caching allocator (then the replay must see it) or beside
it (then it is only subtracted from the GPU's capacity).

* cuBLAS workspace: goes THROUGH the caching allocator.  PyTorch's
  ``getNewWorkspace`` (aten/src/ATen/cuda/CublasHandlePool.cpp) calls
  ``CUDACachingAllocator::get()->allocate(getChosenWorkspaceSize())`` once per
  (cuBLAS handle, stream) (``setWorkspaceForHandle``, keyed by both), and keeps it until
  ``torch._C._cuda_clearCublasWorkspaces()``.  So each extra stream, and each extra
  thread, that runs a GEMM adds one more.  ``parseChosenWorkspaceSize``:
  ``CUBLAS_WORKSPACE_CONFIG`` (``:SIZE_KiB:COUNT`` pairs) when set, else
  ``:4096:2:16:8`` = 8,519,680 bytes, or 32 MiB on Hopper (sm90) in 2.11.  Blackwell
  (compute capability 10.x and 12.x) gets 32 MiB from 2.12 on (pytorch/pytorch#175344, merged
  after 2.11's branch cut); the course models 2.11.  Handles come from a per-thread pool
  (``DeviceThreadHandlePool``), and autograd runs backward on its own device
  thread: a training step makes TWO workspaces, one at the first forward GEMM
  and one at the first backward GEMM.  The recorder adds them as traced
  allocations (the real snapshots in the course hold exactly those two); the
  report names them as cuBLAS's, not the user's line's.
* CUDA context: BESIDE the allocator; the device profile's ``context_reserve``
  (its JSON file cites the figure) is taken off the GPU's capacity already.  It grows
  as libraries load their kernels (cuBLAS, cuDNN, NCCL, Triton's compiled kernels):
  the profile's figure is one process's, not every process's.
* cuBLASLt workspace: 1 MiB by default (``CUBLASLT_WORKSPACE_SIZE`` in KiB,
  CublasHandlePool.cpp ``parseCUDABlasLtWorkspaceSize``, "default size in KiB
  according to #73328"), per (handle, stream).  In 2.11 it comes from a map of its own
  (``getCUDABlasLtWorkspace``) unless ``TORCH_CUBLASLT_UNIFIED_WORKSPACE=1``;
  from 2.12 on it reuses the cuBLAS workspace unless that variable is 0
  (pytorch/pytorch#175879).  Not added: listed as an estimate (0 when the variable
  asks for the shared workspace).
* Kernel workspaces (cuDNN convolutions, cub sorts inside embedding backward,
  flash attention's scratch): allocated inside one ATen kernel and freed before
  it returns; a dispatch-level recorder never sees them.  No general public
  figure: not estimated, listed.
* NCCL buffers: BESIDE the allocator (NCCL calls cudaMalloc itself), per communicator:
  ``NCCL_BUFFSIZE`` (default 4 MiB) per channel per peer, so it grows with channels and
  peers, and NVLS (NVLink SHARP) adds its own buffers.  Only for distributed runs; not added.
* Distributed training state: DDP's gradient buckets are a second copy of the gradients
  unless ``gradient_as_bucket_view=True``; FSDP's unsharded parameters and reduce buffers
  exist per rank.  Not recorded by a single-process step: listed.
* CUDA graphs and inductor: a captured graph's private pool (``torch.cuda.graphs``,
  ``mode="reduce-overhead"``) and autotuning's trial buffers (``max-autotune``) are not
  recorded (torch.compile is recorded as eager: caveats.py).
* Autocast weight cache: goes through the allocator and IS recorded (autocast.py) while the
  region is open; listed for a run that autocasts in code predict did not follow.
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
                                                                  # (used only when not unified with cuBLAS's)
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
    unified = os.environ.get("TORCH_CUBLASLT_UNIFIED_WORKSPACE", "").lower() in ("1", "true", "on", "yes")
    return [
        Unseen(tr("cuBLAS workspace"), workspaces * workspace_bytes, True, True,
               tr("{n} x {size} B, CublasHandlePool.cpp parseChosenWorkspaceSize (one per (handle, stream): each "
                  "extra stream or thread running GEMMs adds one; forward and backward run on two threads)",
                  n=workspaces, size=f"{workspace_bytes:,}")),
        Unseen(tr("CUDA context"), context_reserve, False, False,
               tr("device profile {profile} context_reserve (taken off the GPU's capacity); grows as cuBLAS, cuDNN, "
                  "NCCL and Triton kernels load", profile=repr(profile))),
        Unseen(tr("cuBLASLt workspace"), 0 if unified else CUBLASLT_WORKSPACE, True, False,
               tr("CublasHandlePool.cpp getCUDABlasLtWorkspace: in 2.11 a map of its own, 1024 KiB per (handle, "
                  "stream), unless TORCH_CUBLASLT_UNIFIED_WORKSPACE=1 shares the cuBLAS workspace (the default "
                  "from 2.12 on)")),
        Unseen(tr("kernel workspaces (cuDNN, cub, flash attention)"), None, True, False,
               tr("allocated and freed inside one kernel: invisible at dispatch level; no general figure")),
        Unseen(tr("NCCL buffers"), None, False, False,
               tr("NCCL docs: NCCL_BUFFSIZE default 4 MiB per channel and peer, per communicator (NVLS adds more); "
                  "distributed runs only")),
        Unseen(tr("DDP buckets / FSDP unsharded parameters"), None, True, False,
               tr("DDP: a second copy of the gradients unless gradient_as_bucket_view=True; FSDP: unsharded "
                  "parameters and reduce buffers per rank; not recorded by a one-process step")),
        Unseen(tr("CUDA-graph pools, inductor autotuning"), None, True, False,
               tr("torch.compile is recorded as eager; graph pools and autotuning buffers are not recorded")),
    ]
