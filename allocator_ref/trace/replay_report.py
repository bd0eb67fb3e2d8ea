"""What a replay reports: per device, and for the whole snapshot (``--json``)."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Optional


class DidNotReproduce(ValueError):
    """The reference allocator does not reproduce PyTorch's decisions on this trace, so nothing
    can be replayed from the run that happened.  Callers catch the type, never the words (the
    message is in the reader's language); ``index`` is the first trace event that differs."""

    def __init__(self, message: str, index: Optional[int] = None) -> None:
        super().__init__(message)
        self.index = index


@dataclass
class Divergence:
    index: int                 # position in the device's trace
    expected: dict             # the trace's event
    got: Optional[dict]        # what the reference allocator did instead (None: nothing)
    context: list              # a few trace events around it
    state: list                # the segments around the address at that moment


@dataclass
class DeviceReplay:
    device: int
    events: int
    allocs: int = 0
    allocs_exact: int = 0
    segment_allocs_expected: int = 0
    segment_allocs_made: int = 0
    segment_frees_expected: int = 0
    segment_frees_made: int = 0
    ooms_expected: int = 0
    ooms_raised: int = 0
    first_divergence: Optional[Divergence] = None
    final_state_equal: Optional[bool] = None
    final_state_diff: str = ""
    inferred: list = field(default_factory=list)
    peak_reserved: int = 0
    peak_allocated: int = 0
    fragmentation_at_peak: int = 0
    device_calls: int = 0
    simulated_time_us: float = 0.0
    pool_requests: int = 0          # requests routed to a private pool (MemPool / CUDA graph)
    pools: list = field(default_factory=list)   # the private pool ids the replay kept
    work: int = 0              # replay steps + events examined: linear in the trace (tests bound it)
    # How a --verify replay read the program's own actions (for the anchored what-if, whatif.py):
    # trace position -> "ready" / "sync" (a malloc's group: were its frees complete before it, or
    # completed by its retry's sync?) or "deferred" (a free completed by the next malloc's sync);
    # and where the user called empty_cache().
    readings: dict = field(default_factory=dict)
    user_empty_caches: list = field(default_factory=list)
    state_only: bool = False   # no trace events: the segments were rebuilt and compared alone
    snapshot_entries: int = 0  # 'snapshot' entries in the trace (someone looked; left out of the replay)
    segments_compared: int = 0  # the snapshot's segments the final state was compared with (verify)

    @property
    def allocs_exact_pct(self) -> float:
        return 100.0 * self.allocs_exact / self.allocs if self.allocs else 100.0

    @property
    def reproduced(self) -> bool:
        """This device's replay matched PyTorch: no divergence, every allocation at its recorded
        address and the final state equal (an equal final state alone proves little: an empty
        snapshot equals an empty replay whatever happened in between)."""
        return (self.first_divergence is None and self.allocs_exact == self.allocs
                and self.final_state_equal is True)


@dataclass
class ReplayResult:
    source: str
    policy: str
    config: str
    verify: bool
    devices: list
    course_made: bool = False      # the course recorded it (provenance.py): its decisions are not PyTorch's

    def _sum(self, name: str) -> int:
        return sum(getattr(d, name) for d in self.devices)

    @property
    def first_divergence(self) -> Optional[Divergence]:
        return next((d.first_divergence for d in self.devices if d.first_divergence), None)

    @property
    def final_state_equal(self) -> Optional[bool]:
        values = [d.final_state_equal for d in self.devices if d.final_state_equal is not None]
        return all(values) if values else None

    @property
    def fits(self) -> bool:
        """No request ran out of memory (meaningful with ``device_memory``)."""
        return self._sum("ooms_raised") == 0

    @property
    def perfect(self) -> bool:
        """Everything matched: no divergence, every allocation exact and, when verifying,
        every device's final state equal (a device left unchecked is not a match)."""
        if self.first_divergence is not None or self._sum("allocs_exact") != self._sum("allocs"):
            return False
        if self.verify:
            return all(d.final_state_equal is True for d in self.devices)
        return self.final_state_equal is not False

    def to_json(self) -> dict:
        div = self.first_divergence
        return {
            "source": self.source, "policy": self.policy, "config": self.config, "verify": self.verify,
            "allocs": self._sum("allocs"), "allocs_exact": self._sum("allocs_exact"),
            "segment_allocs_expected": self._sum("segment_allocs_expected"),
            "segment_allocs_made": self._sum("segment_allocs_made"),
            "segment_frees_expected": self._sum("segment_frees_expected"),
            "segment_frees_made": self._sum("segment_frees_made"),
            "ooms_expected": self._sum("ooms_expected"), "ooms_raised": self._sum("ooms_raised"),
            "fits": self.fits,
            "first_divergence": asdict(div) if div else None,
            "final_state_equal": self.final_state_equal,
            "peak_reserved": max((d.peak_reserved for d in self.devices), default=0),
            "peak_allocated": max((d.peak_allocated for d in self.devices), default=0),
            "fragmentation_at_peak": max((d.fragmentation_at_peak for d in self.devices), default=0),
            "device_calls": self._sum("device_calls"),
            "simulated_time_us": self._sum("simulated_time_us"),
            "inferred": [note for d in self.devices for note in d.inferred],
            "pool_requests": self._sum("pool_requests"),
            "pools": sorted({tuple(p) for d in self.devices for p in d.pools}),
            "devices": [{k: v for k, v in asdict(d).items() if k not in ("first_divergence", "readings")}
                        for d in self.devices],
        }


@dataclass
class Anchored:
    """What one anchored replay measured."""
    positions: list               # trace event of each sample
    reserved: list                # memory_reserved() after that program action
    allocated: list
    peak_reserved: int = 0
    peak_reserved_at: int = -1    # trace event
    fragmentation: int = 0        # reserved - allocated at that peak
    peak_allocated: int = 0
    start_reserved: int = 0
    start_live: int = 0
    ooms: int = 0
    oom_at: list = field(default_factory=list)       # trace events whose request failed here
    alloc_retries: int = 0        # num_alloc_retries: each a full flush and a device-wide sync
    device_calls: int = 0
    device_call_us: float = 0.0   # simulated time in cudaMalloc/cudaFree/VMM calls
    syncs: int = 0                # device-wide syncs (cudaFree's implicit one, the flush's own)
    start_does_not_fit: bool = False
    notes: list = field(default_factory=list)
    same_address: int = 0         # mallocs placed where PyTorch placed them
    pool_requests: int = 0        # mallocs routed to a private pool (MemPool / CUDA graph)
    first_oom: str = ""           # the first line of the first out-of-memory error
    largest_segment: int = 0      # the largest cudaMalloc made, start segments included
