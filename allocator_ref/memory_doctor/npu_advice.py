"""The doctor's remedies for a torch_npu run, in PYTORCH_NPU_ALLOC_CONF terms.

The remedies (remedies.py) are PyTorch's knobs, replayed on PyTorch's design.  A run recorded with
torch_npu (trace/npu_detect.py) is replayed on torch_npu's design instead (policy ``npu``,
caching/npu/), and its settings are torch_npu's, which differ (NPUAllocatorConfig.cpp, parseArgs,
Ascend/pytorch v2.11.0-26.1.0):

* the variable is ``PYTORCH_NPU_ALLOC_CONF`` and the fraction call ``torch.npu.set_per_process_memory_fraction``;
* ``expandable_segments:True`` next to ``max_split_size_mb`` or ``garbage_collection_threshold`` is
  refused ("cannot be enabled with `expandable_segments`"), so that combination is never offered;
* there is no ``backend:cudaMallocAsync``: torch_npu has one allocator.

``npu_trials`` turns the planned trials into these; what each replay measures is unchanged.
"""
from __future__ import annotations

from dataclasses import dataclass, fields

from ..editions.messages import translator
from .remedies import Trial, parse_conf

tr = translator("doctor")

# Settings torch_npu refuses next to an explicit expandable_segments:True (parseArgs, at its end).
REFUSED_WITH_EXPANDABLE = ("max_split_size_mb", "garbage_collection_threshold")


@dataclass
class NPUTrial(Trial):
    """A trial replayed on torch_npu's design, its line written for torch_npu."""

    @property
    def line(self) -> str:
        text = f"PYTORCH_NPU_ALLOC_CONF={self.config}"
        if self.allowed is not None:
            text += tr("  # and in the script: {call}", call="torch.npu.set_per_process_memory_fraction("
                       f"{self.allowed} / torch.npu.get_device_properties(0).total_memory)")
        return text


def refused_by_torch_npu(config: str) -> bool:
    """Would torch_npu refuse this PYTORCH_NPU_ALLOC_CONF (expandable segments with a key it forbids)?"""
    conf = parse_conf(config)
    return conf.get("expandable_segments", "") == "True" and any(k in conf for k in REFUSED_WITH_EXPANDABLE)


def npu_trials(trials: list) -> list:
    """The planned trials, replayed on the npu design: the async row and refused combinations skipped."""
    out = []
    for t in trials:
        npu = NPUTrial(**{f.name: getattr(t, f.name) for f in fields(Trial)})
        npu.policy = "npu"
        if t.kind == "async":
            npu.policy = "stream_ordered"
            npu.skipped = tr("torch_npu has no cudaMallocAsync backend: PYTORCH_NPU_ALLOC_CONF has no 'backend' key")
            npu.skip_reason = "not-on-npu"
        elif not npu.skipped and refused_by_torch_npu(npu.config):
            npu.skipped = tr("torch_npu refuses expandable_segments:True together with max_split_size_mb or "
                             "garbage_collection_threshold")
            npu.skip_reason = "refused-by-torch-npu"
        out.append(npu)
    return out
