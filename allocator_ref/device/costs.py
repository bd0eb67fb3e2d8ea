"""Device profiles and the cost model of the simulated device, read from data files.

``profiles/<name>.json`` describes one simulated GPU (capacity, context
reserve, granularity, bandwidths) and ``profiles/costs.json`` says how long
each CUDA call keeps the host busy.  Every number in those files carries a
``source`` (a public issue, pull request, benchmark or NVIDIA page) so that a learner can
check where it comes from; nothing here invents a figure.

Costs depend on size where the sources say they do: cudaMalloc and cudaFree
pay per 2 MiB page, VMM steps pay per 2 MiB page, pinned host memory per MiB.

A profile may carry its own ``"costs"`` (same keys and shape as
``costs.json``); those entries replace the defaults for a SimDevice of that
profile.  ``tools/calibrate.py`` writes such profiles from a real GPU's
measurements (``profiles/measured-<gpu>.json``), each number's source saying
where and when it was measured.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

PROFILE_DIR = Path(__file__).with_name("profiles")
MiB = 1 << 20
PAGE_2MIB = 2 * MiB


def _read_json(path: Path) -> dict:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def profile_names() -> list[str]:
    """The simulated GPUs one can ask for (``SimDevice(profile=...)``)."""
    return sorted(p.stem for p in PROFILE_DIR.glob("*.json") if p.stem != "costs")


@dataclass(frozen=True)
class Profile:
    """One simulated GPU, as read from ``profiles/<name>.json``."""

    name: str
    description: str
    gpu: str
    total_memory: int
    context_reserve: int
    vmm_granularity: int
    malloc_alignment: int
    memory_bandwidth_gbps: float   # device memory, for fill/copy kernel durations
    host_link_gbps: float          # PCIe per direction, for read/write durations
    sources: dict                  # field -> the text that says where the number comes from
    costs: dict = field(default_factory=dict, hash=False, compare=False)
    # ^ cost entries ({"value", "basis", "source"}) replacing those of costs.json (calibrated profiles)
    allocator: str = "caching"     # the design the card's PyTorch allocates with: "npu" on an Ascend card


@lru_cache(maxsize=None)
def load_profile(name: str | Path) -> Profile:
    """Read a profile by name; an unknown name raises ValueError listing the known ones.

    A ``pathlib.Path`` (not a string) reads that file instead, e.g. a profile
    ``tools/calibrate.py`` wrote somewhere else than ``profiles/``.
    """
    if isinstance(name, str) and "@" in name:
        # "NAME@BYTES": that profile on a GPU of BYTES total memory (device/sizing.py makes
        # these for snapshots recorded on a GPU larger than the profile).
        base, _, size = name.partition("@")
        if not size.isdigit() or int(size) <= 0:
            raise ValueError(f"device profile {name!r}: after '@' comes the GPU's total memory in bytes")
        import dataclasses
        return dataclasses.replace(load_profile(base), name=name, total_memory=int(size))
    if isinstance(name, Path):
        raw = _read_json(name)
    else:
        known = profile_names()
        if not isinstance(name, str) or name not in known:
            raise ValueError(f"unknown device profile {name!r}; choose one of {known}")
        raw = _read_json(PROFILE_DIR / f"{name}.json")
    numbers = ("total_memory", "context_reserve", "vmm_granularity", "malloc_alignment",
               "memory_bandwidth_gbps", "host_link_gbps")
    values = {key: raw[key]["value"] for key in numbers}
    sources = {key: raw[key]["source"] for key in numbers}
    allocator = raw.get("allocator", {}).get("value", "caching")     # only an NPU profile names one
    return Profile(name=raw["name"], description=raw["description"], gpu=raw["gpu"],
                   sources=sources, costs=dict(raw.get("costs", {})), allocator=allocator, **values)


def _pages(nbytes: int) -> int:
    """How many 2 MiB pages ``nbytes`` touches (at least one)."""
    return max(1, -(-nbytes // PAGE_2MIB))


class CostModel:
    """Host time, in microseconds, that each modelled CUDA call costs.

    ``CostModel()`` reads ``profiles/costs.json``; ``source(key)`` tells where
    a figure comes from.  ``overrides`` (a profile's ``costs``) replace single
    entries.  Methods are named after the call they price.
    """

    def __init__(self, path: Path | None = None, overrides: dict | None = None) -> None:
        self.raw = _read_json(path or PROFILE_DIR / "costs.json")
        for key, entry in (overrides or {}).items():
            if key.startswith("_"):
                continue
            if key not in self.raw or not isinstance(entry, dict) or "value" not in entry or "source" not in entry:
                raise ValueError(f"cost override {key!r}: expected a known key of costs.json with "
                                 f"'value' and 'source' (got {entry!r})")
            self.raw[key] = entry

    def value(self, key: str):
        return self.raw[key]["value"]

    def source(self, key: str) -> str:
        return self.raw[key]["source"]

    def source_words(self, key: str) -> str:
        """:meth:`source` in the reader's language: costs.json's notes are sentences of the doctor's
        catalogue (``editions update`` collects them, as xgettext reads a data file); a note a profile
        measured for itself (``tools/calibrate.py``) has no Chinese yet and is said as written."""
        from ..editions.messages import say      # the low module every layer may use (tests/test_import_layers.py)
        return say("doctor", self.source(key))

    # cudaMalloc / cudaFree ------------------------------------------------
    def malloc_us(self, nbytes: int) -> float:
        return self.value("malloc_base_us") + self.value("malloc_per_2mib_us") * _pages(nbytes)

    def free_us(self, nbytes: int) -> float:
        return self.value("free_base_us") + self.value("free_per_2mib_us") * _pages(nbytes)

    @property
    def malloc_syncs_device(self) -> bool:
        return bool(self.value("malloc_syncs_device"))

    @property
    def free_syncs_device(self) -> bool:
        return bool(self.value("free_syncs_device"))

    # cudaMallocAsync pool ---------------------------------------------------
    def pool_hit_us(self) -> float:
        return self.value("pool_hit_us")

    def pool_free_us(self) -> float:
        return self.value("pool_free_us")

    def pool_miss_us(self, nbytes: int) -> float:      # the pool grows: like cudaMalloc
        return self.malloc_us(nbytes)

    def pool_release_us(self, nbytes: int) -> float:   # the pool shrinks: like cudaFree, no device sync
        return self.free_us(nbytes)

    # misc -----------------------------------------------------------------
    def kernel_launch_us(self) -> float:
        return self.value("kernel_launch_us")

    def mem_get_info_us(self) -> float:
        return self.value("mem_get_info_us")

    # VMM ----------------------------------------------------------------
    def vmm_reserve_us(self) -> float:
        return self.value("vmm_reserve_us")

    def vmm_address_free_us(self) -> float:
        return self.value("vmm_address_free_us")

    def vmm_create_us(self, nbytes: int) -> float:
        return self.value("vmm_create_per_2mib_us") * _pages(nbytes)

    def vmm_release_us(self, nbytes: int) -> float:
        return self.value("vmm_release_per_2mib_us") * _pages(nbytes)

    def vmm_map_us(self, nbytes: int) -> float:
        return self.value("vmm_map_per_2mib_us") * _pages(nbytes)

    def vmm_set_access_us(self, nbytes: int) -> float:
        return self.value("vmm_set_access_per_2mib_us") * _pages(nbytes)

    def vmm_unmap_us(self, nbytes: int) -> float:
        return self.value("vmm_unmap_per_2mib_us") * _pages(nbytes)

    # pinned host memory -------------------------------------------------
    def host_alloc_us(self, nbytes: int) -> float:
        return self.value("host_alloc_base_us") + self.value("host_alloc_per_mib_us") * nbytes / MiB

    def host_free_us(self, nbytes: int) -> float:
        return self.value("host_free_per_mib_us") * nbytes / MiB

    def host_register_us(self, nbytes: int) -> float:
        return self.value("host_register_per_mib_us") * nbytes / MiB

    # IPC ----------------------------------------------------------------
    def ipc_open_us(self) -> float:
        return self.value("ipc_open_us")

    def ipc_import_fd_us(self) -> float:
        return self.value("ipc_import_fd_us")
