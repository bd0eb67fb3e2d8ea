"""The names the doctor's sentences use for the machine a run was recorded on: a GPU or an NPU.

A run replayed on torch_npu's design (policy ``npu``: trace/npu_detect.py recognised it, or
``--policy npu``) ran on an Ascend NPU, so its report says NPU, torch_npu, aclrtGetMemInfo,
aclrtMapMem ... where a CUDA run's says GPU, PyTorch, cudaMemGetInfo, cuMemMap.  The sentences name
these as ``{fields}`` (the language seam fills them after the lookup), and the design the run was
replayed on picks the set: nothing reads a message's text to decide.  They are names of devices,
libraries and API calls, the same in every language, so they are not translated.

The NPU names come from ``torch_npu/csrc/core/npu/NPUCachingAllocator.cpp`` (Ascend/pytorch
v2.11.0-26.1.0, for PyTorch 2.11): ``malloc`` asks ``aclrtGetMemInfo(ACL_HBM_MEM, ...)`` for the free
memory it prints in its out-of-memory error; ``ExpandableSegment`` maps and unmaps pages with
``AclrtMapMem``/``AclrtUnmapMem`` (torch_npu's wrappers of aclrtMapMem/aclrtUnmapMem) over an
``aclrtReserveMemAddress`` range; ``alloc_block`` calls ``AclrtMallocAlign32`` (aclrtMalloc, 32 B
aligned) and ``release_block`` calls ``aclrtFree``.  (No doctor sentence names NCCL, so HCCL, which
the expandable segments register with in ``setHcclComm``, has no field here.)

The NPU's default profile is the Atlas 800T A2's Ascend 910B (64 GB, device/profiles/): torch_npu's
training card; an inference card (Atlas 300I Duo, 48 GB) is one ``--profile atlas-300i-duo-48gb`` away.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..editions.messages import translator

tr = translator("doctor")


@dataclass(frozen=True)
class DeviceWords:
    device: str          # what the hardware is called
    library: str         # whose caching allocator made the recorded decisions
    module: str          # the Python module a script calls (empty_cache, memory fraction)
    mem_get_info: str    # the call that says how much device memory is free
    map_calls: str       # the calls expandable segments map and unmap pages with
    malloc: str          # the call a new segment comes from
    free: str            # the call a released segment goes back through
    runtime: str         # the runtime whose context holds memory before the allocator runs
    profile: str         # the simulated device the doctor replays on when no --profile is given


CUDA = DeviceWords(device="GPU", library="PyTorch", module="torch.cuda", mem_get_info="cudaMemGetInfo",
                   map_calls="cuMemMap/cuMemUnmap", malloc="cudaMalloc", free="cudaFree", runtime="CUDA",
                   profile="h100-80gb")
NPU = DeviceWords(device="NPU", library="torch_npu", module="torch.npu", mem_get_info="aclrtGetMemInfo",
                  map_calls="aclrtMapMem/aclrtUnmapMem", malloc="aclrtMalloc", free="aclrtFree", runtime="CANN",
                  profile="atlas-800t-a2-64gb")


def words_for(policy: Any) -> DeviceWords:
    """The names for a run replayed on ``policy``: the NPU's for torch_npu's design, else a GPU's."""
    return NPU if policy == "npu" else CUDA


def words_of(diag: Any) -> DeviceWords:
    """The names for a diagnosis: from the design its recording was replayed on."""
    return words_for(getattr(getattr(diag, "recording", None), "policy", None))


def a_device(words: DeviceWords) -> str:
    """'a GPU' or 'an NPU' in the reader's language (the article is English grammar, so it is translated)."""
    return tr("an NPU") if words is NPU else tr("a GPU")
