"""Shortage or fragmentation: could the memory that was reserved but not allocated have served?

The rule, for a request that ran out of memory.  At the moment PyTorch raised the error
(``DeviceCachingAllocator::malloc``, after ``release_cached_blocks`` gave back every wholly
free segment), the memory this process could have held split into three parts:

* ``allocated``: live tensors (``memory_allocated()``), which no allocator setting frees;
* ``pending``: blocks freed by the program but still waiting for another stream's work
  (``record_stream`` events, ``process_events``): not free until that stream catches up;
* ``free``: cached free bytes in segments (``reserved - allocated - pending``) plus what the
  driver still had (``cudaMemGetInfo``'s free, recorded in the trace's ``oom`` entry).

No setting can make a free range larger than ``free``: even a perfect cache that put every
free byte in one run would stop there.  So the request, rounded as PyTorch rounds it
(``round_size``: at least 512 bytes, a multiple of 512), is a **shortage** when it is larger
than ``free``: live memory must shrink by the difference, and no setting is offered.  When
it is not larger, the memory existed but not in one piece: **fragmentation**, which a
setting may fix (the replays say which).

For a run with no OOM asked against a GPU (``--device-memory``): a shortage when the live
peak (``max_memory_allocated()``) is more than the GPU's usable memory, fragmentation when
only the reserved peak is.

For a state-only dump (no trace): the failed request when the dump records one; else the live
bytes against the GPU when ``--device-memory`` gives it; else no claim at all -- a state with no
failure in it does not say that memory ran short, however full its cache was.

**Materiality.**  A gain counts when it is at least ``MATERIAL_SHARE`` (5%) of the recorded
peak reserved and at least ``MATERIAL_FLOOR`` (64 MiB): smaller differences are what a run's
own variation moves (input shapes, library workspaces, the CUDA context).  Two results closer
than that are a tie.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from ..editions.messages import translator
from ..units import format_bytes
from .device_words import CUDA, NPU, DeviceWords, a_device

tr = translator("doctor")

MATERIAL_SHARE = 0.05
MATERIAL_FLOOR = 64 * 2**20
ROUND = 512                    # kMinBlockSize: round_size never gives less, and rounds to multiples of it



def rule(words: DeviceWords = CUDA) -> str:
    """The rule in words, in the reader's language (torch_npu pads 32 B before it rounds: npu/rounding.py)."""
    padding = tr(", after 32 B of padding") if words is NPU else ""
    return tr("a failed request is a shortage when, rounded as {library} rounds it (a multiple of 512 B{padding}), "
              "it is larger than every byte that was neither live nor waiting for another stream: the cached free "
              "bytes plus what the driver still had; no setting can make a free range larger than that. Otherwise "
              "it is fragmentation", library=words.library, padding=padding)


def material_words() -> str:
    """What counts as a gain, in words."""
    return tr("a gain counts when it is at least {share} of the recorded peak reserved and at least {floor} MiB; "
              "closer results are a tie, which goes to PyTorch's own allocator settings, then to the smaller change",
              share=f"{MATERIAL_SHARE:.0%}", floor=MATERIAL_FLOOR // 2**20)


def program_remedies(words: DeviceWords = CUDA) -> tuple:
    """What helps a shortage: none of it is an allocator setting."""
    return (tr("a smaller batch or sequence length"),
            tr("activation checkpointing (torch.utils.checkpoint: recompute activations in backward)"),
            tr("offloading (optimizer state or activations to CPU memory)"),
            tr("{a_device} with more memory", a_device=a_device(words)))


def rounded(request: int) -> int:
    """The request as ``round_size`` rounds it at the least (no roundup_power2_divisions)."""
    return max(ROUND, -(-int(request) // ROUND) * ROUND)


def material_threshold(base: int) -> int:
    """The smallest gain that counts, against a peak of ``base`` bytes."""
    return max(MATERIAL_FLOOR, int(MATERIAL_SHARE * base))


def is_material(gain: int, base: int) -> bool:
    return gain >= material_threshold(base)


@dataclass
class Judgement:
    kind: str                      # "shortage", "fragmentation", "fits", "undecided", "no-failure"
    what: str                      # "request" (an OOM), "peak" (against a target), "state" (a dump)
    needed: int = 0                # bytes the moment needed: the rounded request, or the live peak
    free: int = 0                  # bytes any setting could have used (cached free + driver free)
    cut: int = 0                   # shortage: bytes of live (or pending) memory that must go
    pending: dict = field(default_factory=dict)     # stream -> bytes waiting for it at that moment
    words: str = ""                # the decision, with its numbers

    @property
    def shortage(self) -> bool:
        return self.kind == "shortage"

    def to_json(self, words: DeviceWords = CUDA) -> dict:
        return {"kind": self.kind, "what": self.what, "needed": self.needed, "free": self.free,
                "cut": self.cut, "pending": {str(k): v for k, v in self.pending.items()}, "words": self.words,
                "rule": rule(words)}


def pending_words(pending: dict) -> str:
    """'1.0 GiB pending on stream 7' for each stream with bytes waiting."""
    return tr(", ").join(tr("{size} pending on stream {stream}", size=format_bytes(b), stream=s)
                         for s, b in sorted(pending.items()) if b)


def judge_request(request: int, allocated: int, reserved: int, device_free: int,
                  pending: Optional[dict] = None) -> Judgement:
    """The rule for a request that ran out of memory (see the module docstring)."""
    pending = {s: b for s, b in (pending or {}).items() if b}
    held = sum(pending.values())
    cached_free = max(0, reserved - allocated - held)
    free = cached_free + max(0, device_free)
    need = rounded(request)
    wait = tr("; {pending} (freed, but not free until that stream's work completes)",
              pending=pending_words(pending)) if held else ""
    if need > free:
        cut = need - free
        return Judgement("shortage", "request", need, free, cut, pending,
                         tr("the request needed {need} but only {free} was neither live nor pending ({cached} "
                            "cached free in segments + {driver} the driver still had){wait}; {live} was live. No "
                            "allocator setting can serve it: at least {cut} of live memory must go",
                            need=format_bytes(need), free=format_bytes(free), cached=format_bytes(cached_free),
                            driver=format_bytes(device_free), wait=wait, live=format_bytes(allocated),
                            cut=format_bytes(cut)))
    return Judgement("fragmentation", "request", need, free, 0, pending,
                     tr("the request needed {need} and {free} was neither live nor pending ({cached} cached free "
                        "in segments + {driver} the driver still had){wait}, but no single free range was large "
                        "enough", need=format_bytes(need), free=format_bytes(free),
                        cached=format_bytes(cached_free), driver=format_bytes(device_free), wait=wait))


def judge_peak(peak_allocated: int, peak_reserved: int, usable: int) -> Judgement:
    """The rule for a run asked against a GPU of ``usable`` bytes (no OOM in the trace)."""
    if peak_allocated > usable:
        cut = peak_allocated - usable
        return Judgement("shortage", "peak", peak_allocated, usable, cut, {},
                         tr("the live tensors alone peaked at {live}, {cut} more than the {usable} usable; no "
                            "allocator setting can fit them", live=format_bytes(peak_allocated),
                            cut=format_bytes(cut), usable=format_bytes(usable)))
    if peak_reserved > usable:
        return Judgement("fragmentation", "peak", peak_allocated, usable, 0, {},
                         tr("the live tensors peaked at {live}, within the {usable} usable, but reserved memory "
                            "peaked at {reserved}", live=format_bytes(peak_allocated), usable=format_bytes(usable),
                            reserved=format_bytes(peak_reserved)))
    return Judgement("fits", "peak", peak_allocated, usable, 0, {},
                     tr("reserved memory peaked at {reserved}, within the {usable} usable",
                        reserved=format_bytes(peak_reserved), usable=format_bytes(usable)))


def judge_state(reserved: int, allocated: int, pending: dict, largest_free: int,
                request: Optional[int] = None, device_free: Optional[int] = None,
                usable: Optional[int] = None) -> Judgement:
    """The rule for a state-only dump: with the failed request when the dump has it, against the GPU
    when ``usable`` (bytes: ``--device-memory`` less the CUDA context) is given, else no claim.

    A state is one moment.  Without a failed request nothing in it says memory ran short, however
    little of it was cached free: a full cache is what a healthy run looks like too.  So no
    shortage is claimed from the state alone, whatever the share (a verdict that flipped on a
    threshold would say more than the dump does).
    """
    if request is not None and device_free is not None:
        return judge_request(request, allocated, reserved, device_free, pending)
    held = sum(pending.values())
    cached_free = max(0, reserved - allocated - held)
    if request is not None and rounded(request) > cached_free:
        # The driver's free memory is unknown: a shortage only as far as this process's cache goes.
        return Judgement("undecided", "state", rounded(request), cached_free, 0, pending,
                         tr("the request needed {need}, more than all {cached} cached free; whether the driver had "
                            "the rest is not in the dump", need=format_bytes(rounded(request)),
                            cached=format_bytes(cached_free)))
    if request is None and usable is not None:
        judged = judge_peak(allocated, reserved, usable)
        judged.what, judged.pending = "state", pending
        return judged
    if request is None:
        return Judgement("no-failure", "state", 0, cached_free, 0, pending,
                         tr("the dump records no failed request and the GPU's size was not given (--device-memory), "
                            "so nothing in it says memory ran short: {live} live, {cached} cached free and {held} "
                            "waiting for other streams, of {reserved} reserved",
                            live=format_bytes(allocated), cached=format_bytes(cached_free),
                            held=format_bytes(held), reserved=format_bytes(reserved)))
    # The request was no larger than the cached free bytes alone: the memory was there, not in one piece.
    return Judgement("fragmentation", "state", rounded(request), cached_free, 0, pending,
                     tr("the request needed {need} and {cached} was cached free (the largest block {largest}), "
                        "but no single free range was large enough", need=format_bytes(rounded(request)),
                        cached=format_bytes(cached_free), largest=format_bytes(largest_free)))


def judge_diagnosis(diag, usable: Optional[int], asked: bool = False) -> Optional[Judgement]:
    """The rule applied to a replayed run: its first OOM, or (``asked``: --device-memory) its peaks
    against the GPU asked about; None when nothing is asked and nothing failed."""
    if asked and usable is not None:
        return judge_peak(diag.live_need, diag.peak_reserved, usable)
    if diag.oom is not None:
        o = diag.oom
        return judge_request(o.request, o.allocated, o.reserved, o.device_free, o.pending)
    if usable is not None:
        return judge_peak(diag.peak_allocated, diag.peak_reserved, usable)
    return None
