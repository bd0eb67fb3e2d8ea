"""Lab 9 -- the casebook: find the memory a segment list strands.

Chapter 9's colocated-training case (and every "reserved but unallocated" OOM) comes down to one
rule: ``empty_cache()`` (PyTorch's ``release_cached_blocks`` in ``CUDACachingAllocator.cpp``) first
waits for every pending event (``synchronize_and_free_events``), so a block freed with a pending
``record_stream`` use becomes free; then it releases every segment that holds no allocated block
(``release_blocks`` frees only unsplit free blocks, and a segment's free blocks merge into one once
nothing else lives in it).  What it cannot give back is the free memory of a segment that still holds
a live block: that memory is *stranded*.

* ``lab9.stranded``: ``stranded_bytes(segments) -> int`` -- the bytes that stay reserved but
  unallocated after ``empty_cache()``, from a snapshot's ``segments`` list (plain, non-expandable
  segments; each block's ``state`` is ``"active_allocated"``, ``"active_pending_free"`` or
  ``"inactive"``, as in ``torch.cuda.memory_snapshot()``).
"""
from __future__ import annotations

import copy
import random

from ..editions.messages import translator
from .check import MiB, fmt
from .spec import Drawn, Edge, edges, function_exercise

tr = translator("labs")                  # what a learner reads, in the learner's language
later = translator("labs", later=True)  # marked now, said when shown (check.shown)

ALLOCATED, PENDING, FREE = "active_allocated", "active_pending_free", "inactive"


def stranded_bytes(segments: list) -> int:
    """The reference: free bytes (free or pending) of every segment that still holds an allocated block."""
    total = 0
    for seg in segments:
        states = [b["state"] for b in seg["blocks"]]
        if ALLOCATED in states:               # the segment stays; its free parts cannot be released
            total += sum(b["size"] for b in seg["blocks"] if b["state"] != ALLOCATED)
    return total


def segment(address: int, *blocks: tuple) -> dict:
    """A snapshot segment from (size, state) pairs, blocks laid end to end from ``address``."""
    out, at = [], address
    for size, state in blocks:
        out.append({"address": at, "size": size, "requested_size": size if state == ALLOCATED else 0,
                    "state": state})
        at += size
    return {"address": address, "total_size": at - address, "segment_type": "large",
            "is_expandable": False, "blocks": out}


_BASE = 0x7F0000000000

# A small device after a colocated cycle: one segment wholly free, one split by a kept tensor, one
# whose only free block waits on a side stream, one full.
_PUBLIC = [
    ([segment(_BASE, (20 * MiB, FREE))],),
    ([segment(_BASE, (8 * MiB, ALLOCATED), (12 * MiB, FREE))],),
    ([segment(_BASE, (20 * MiB, PENDING)),
      segment(_BASE + 64 * MiB, (6 * MiB, ALLOCATED), (10 * MiB, PENDING), (4 * MiB, FREE))],),
    ([segment(_BASE, (20 * MiB, ALLOCATED)),
      segment(_BASE + 64 * MiB, (2 * MiB, FREE), (30 * MiB, ALLOCATED), (8 * MiB, FREE))],),
]


def _random_segment(rng: random.Random, address: int, states: list) -> dict:
    """A segment whose blocks carry ``states`` in a shuffled order, sizes in 2 MiB steps."""
    rng.shuffle(states)
    return segment(address, *((rng.randint(1, 16) * 2 * MiB, state) for state in states))


def _hidden(rng: random.Random):
    """Every seed draws each kind of segment the rule tells apart, in a shuffled list."""
    kinds = [
        [FREE],                                   # released whole
        [PENDING, FREE],                          # released once the event is waited for
        [ALLOCATED, FREE],                        # stranded: the free part
        [ALLOCATED, PENDING, FREE],               # stranded: the pending part too
        [ALLOCATED, ALLOCATED],                   # full: nothing to strand
    ]
    drawn = []
    for _ in range(3):
        picked = [list(k) for k in kinds] + [list(rng.choice(kinds)) for _ in range(rng.randint(1, 4))]
        rng.shuffle(picked)
        segs = [_random_segment(rng, _BASE + i * 256 * MiB, states) for i, states in enumerate(picked)]
        drawn.append(Drawn((segs,), tr("a seeded snapshot of {segs} segments",
                                       segs=len(segs))))
    return drawn


def _label(args) -> str:
    segs = args[0]
    kinds = ["+".join(sorted({b["state"].replace("active_", "") for b in s["blocks"]})) for s in segs]
    return tr("stranded_bytes of {segs} segment(s): {kinds}",
              segs=len(segs), kinds=', '.join(kinds))


def _explain(args, expected) -> str:
    parts = []
    for seg in args[0]:
        live = any(b["state"] == ALLOCATED for b in seg["blocks"])
        free = sum(b["size"] for b in seg["blocks"] if b["state"] != ALLOCATED)
        parts.append(tr("{free} free in a segment that keeps a live block (stranded)", free=fmt(free)) if live
                     else tr("{free} free in a segment that empty_cache releases", free=fmt(free)))
    return tr("; ").join(parts)


def _any_segment(test):
    return lambda data: any(test([b["state"] for b in seg["blocks"]]) for seg in data[0])


function_exercise(
    id="lab9.stranded", lab=9, title=later("stranded_bytes(segments)"), name="stranded_bytes", pure=True,
    reference=stranded_bytes, public=_PUBLIC, hidden=_hidden, label=_label, explain=_explain,
    call=lambda args: (copy.deepcopy(args[0]),), returns=(int, "an int (bytes)"),
    nudge=(later("Which segments does empty_cache() give back whole, and what does it wait for first?"),
           later("Go segment by segment: does it hold an allocated block? If so, which of its other blocks "
                 "stay with it, pending ones included?")),
    hint=later("For each segment: if any block is 'active_allocated', add the sizes of its other blocks "
               "('inactive' and 'active_pending_free': empty_cache waits for pending events first); a segment "
               "with no allocated block is released whole and strands nothing."),
)

edges(
    "lab9.stranded",
    Edge("a segment with no live block (released whole)", _any_segment(lambda s: set(s) == {FREE})),
    Edge("a pending free in a segment with no live block (released after the wait)",
         _any_segment(lambda s: PENDING in s and ALLOCATED not in s)),
    Edge("a live block beside a free one (stranded)", _any_segment(lambda s: ALLOCATED in s and FREE in s)),
    Edge("a live block beside a pending free (the pending part is stranded too)",
         _any_segment(lambda s: ALLOCATED in s and PENDING in s)),
    Edge("a fully allocated segment (nothing stranded)", _any_segment(lambda s: set(s) == {ALLOCATED})),
)
