"""Workloads for the checks: a list of operations run through an allocator, observed op by op.

An operation is a tuple:

``("malloc", key, nbytes, stream)``   allocate, remember the Allocation as ``key``
``("free", key)``                     free it
``("record", key, stream)``           record_stream(allocation, stream)
``("sleep", stream, us)``             keep a stream busy (so events stay pending)
``("sync",)``                         device.synchronize()
``("empty_cache",)``                  allocator.empty_cache()
``("pool_begin", n)`` / ``("pool_end", n)``  begin/end_allocate_to_pool((1, n)) with a filter that routes
                                      nothing: requests stay in the default pool, but ``captures_underway``
                                      is not empty, so a free with stream uses is deferred (as in a capture)

``stream`` is a small number: 0 is the default stream, 1.. are created on demand.
Running the same workload on a fresh device with the reference allocator and
with the learner's pieces plugged in, then comparing the observations, gives a
located difference ("after op 7 (free 5 MiB) ...").
"""
from __future__ import annotations

import random
import traceback
from pathlib import Path
from dataclasses import astuple, dataclass
from typing import Any, Callable, Optional

from ..editions.messages import translator
from ..caching import check_stats_consistency
from .check import Fail, MiB, fmt, lab_device, observed
from .plug import PluggedAllocator  # noqa: F401 -- labs import it from here
from .reference import CachingAllocator

tr = translator("labs")                  # what a learner reads, in the learner's language


def describe_op(i: int, op: tuple, sizes: dict) -> str:
    kind = op[0]
    if kind == "malloc":
        where = "" if op[3] == 0 else tr(" on stream {stream}", stream=op[3])
        return tr("op {i} (malloc {size}{where})", i=i, size=fmt(op[2]), where=where)
    if kind == "free":
        return tr("op {i} (free the {size} allocation '{name}')", i=i, size=fmt(sizes.get(op[1], 0)), name=op[1])
    if kind == "record":
        return tr("op {i} (record_stream '{name}' on stream {stream})", i=i, name=op[1], stream=op[2])
    if kind == "sleep":
        return tr("op {i} (stream {stream} busy for {us} us)", i=i, stream=op[1], us=op[2])
    if kind == "pool_begin":
        return tr("op {i} (a pool context begins, as during a graph capture: a free with stream uses is held back)",
                  i=i)
    if kind == "pool_end":
        return tr("op {i} (the pool context ends: held-back frees get their events)", i=i)
    return f"op {i} ({kind})"


@dataclass
class Observation:
    block_size: Optional[int]       # the size handed out (malloc ops)
    segments: int
    reserved: int
    allocated: int
    device_mallocs: int
    layout: tuple                   # per segment: (offset of each block, size, state)

    def words(self) -> str:
        parts = []
        if self.block_size is not None:
            parts.append(tr("a {size} block", size=fmt(self.block_size)))
        parts.append(tr("{n} segment(s)", n=self.segments))
        parts.append(tr("{size} reserved", size=fmt(self.reserved)))
        parts.append(tr("{size} allocated", size=fmt(self.allocated)))
        parts.append(tr("{n} cudaMalloc call(s) so far", n=self.device_mallocs))
        return tr(", ").join(parts)


def _layout(allocator) -> tuple:
    result = []
    for seg in allocator.segments():
        base = seg["address"]
        result.append(tuple((b["address"] - base, b["size"], b["state"]) for b in seg["blocks"]))
    return tuple(result)


def observe(allocator, block_size=None) -> Observation:
    stats = allocator.memory_stats()
    return Observation(block_size, stats["segment.all.current"], stats["reserved_bytes.all.current"],
                       stats["allocated_bytes.all.current"], stats["num_device_alloc"], _layout(allocator))


def run(ops: list, allocator_factory: Callable[[Any], Any], profile: str = "h100-80gb") -> list:
    """Run ``ops`` on a fresh device; one Observation per op, then one after the final cleanup."""
    dev = lab_device(profile)
    allocator = allocator_factory(dev)
    streams = {0: None}
    live: dict = {}
    observations = []
    initial_free = dev.mem_get_info()[0]

    def stream(n):
        if n not in streams:
            streams[n] = dev.create_stream()
        return streams[n]

    sizes = {op[1]: op[2] for op in ops if op[0] == "malloc"}
    for i, op in enumerate(ops):
        try:
            size = _apply(op, allocator, dev, stream, live)
        except Fail:
            raise
        except Exception as exc:
            if not _raised_inside_course(exc):
                raise                              # the learner's own code raised: check() reports it
            raise Fail(tr("at {op} the allocator itself failed with your code plugged in "
                          "({kind}: {error}), where the reference allocator did not. Your code either "
                          "asked for something impossible here, or an earlier step of yours left the blocks "
                          "inconsistent (a block still in the pool after a merge, a pointer or size not updated, "
                          "a link to a neighbour not fixed) and this op is where it showed",
                          op=describe_op(i, op, sizes), kind=type(exc).__name__, error=exc),
                       tr("after op {i} of a seeded workload ({kind}) the allocator's state was broken "
                          "by an earlier step of yours", i=i, kind=op[0])) from None
        observations.append(observe(allocator, size))
    try:
        for a in list(live.values()):
            allocator.free(a)
        dev.synchronize()
        allocator.empty_cache()
    except Exception as exc:
        if not _raised_inside_course(exc):
            raise
        raise Fail(tr("freeing everything at the end of the workload, the allocator itself failed with your code "
                      "plugged in ({kind}: {error}): an earlier step of yours left its blocks "
                      "inconsistent", kind=type(exc).__name__, error=exc),
                   tr("at the end of a seeded workload the allocator's state was broken")) from None
    final = observe(allocator)
    final.block_size = dev.mem_get_info()[0] - initial_free   # bytes not given back to the device (should be 0)
    observations.append(final)
    try:
        check_stats_consistency(allocator.segments(), allocator.memory_stats())
        consistent = None
    except AssertionError as exc:
        consistent = str(exc)
    observations.append(consistent)
    return observations


def _apply(op: tuple, allocator, dev, stream, live: dict):
    kind = op[0]
    if kind == "malloc":
        a = allocator.malloc(op[2], stream(op[3]))
        live[op[1]] = a
        return a.size
    if kind == "free":
        allocator.free(live.pop(op[1]))
    elif kind == "record":
        allocator.record_stream(live[op[1]], stream(op[2]))
    elif kind == "sleep":
        dev.sleep(stream(op[1]), op[2])
    elif kind == "sync":
        dev.synchronize()
    elif kind == "empty_cache":
        allocator.empty_cache()
    elif kind == "pool_begin":
        allocator.device_allocator.begin_allocate_to_pool((1, op[1]), lambda s: False)
    elif kind == "pool_end":
        allocator.device_allocator.end_allocate_to_pool((1, op[1]))
    return None


COURSE = str(Path(__file__).resolve().parents[1])


def _raised_inside_course(exc: BaseException) -> bool:
    """True when the deepest frame is the course's own code (the learner's step broke its state)."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return False
    last = frames[-1].filename
    return last.startswith(COURSE) or "sortedcontainers" in last


def compare(ops: list, learner: Callable, profile: str = "h100-80gb", config: str = "",
            what: Optional[str] = None, plug: Optional[dict] = None) -> None:
    """Run ``ops`` with the reference and with the learner's allocator; raise Fail at the first difference.

    ``learner(dev)`` builds the learner's allocator (the reference with their pieces plugged in);
    ``plug`` ({"round_size": fn, ...}) plugs those decisions instead (see plug.py) when ``learner`` is None.
    """
    what = what or tr("your functions")
    if plug and len(plug) == 1:
        # The submission runs where it lives (the notebook, in a graded check: check.observed) and
        # only its plain observations come here.
        (name, fn), = plug.items()
        mine = from_plain(observed(fn, run_plugged, ops, profile, config, name))
    else:
        if learner is None or plug:
            learner = lambda dev: PluggedAllocator(dev, config, plug=plug)   # noqa: E731
        mine = run(ops, learner, profile)
    # The reference runs after the submission: none of its observations is on the submission's stack.
    reference = run(ops, lambda dev: CachingAllocator(dev, config), profile)
    sizes = {op[1]: op[2] for op in ops if op[0] == "malloc"}
    for i, (op, ref, got) in enumerate(zip(ops, reference, mine)):
        if ref == got:
            continue
        where = describe_op(i, op, sizes)
        diff = _what_differs(ref, got)
        raise Fail(tr("after {op} of the workload, with {what} plugged into the reference allocator:",
                      op=where, what=what) + "\n"
                   + tr("  reference: {ref}", ref=ref.words()) + "\n"
                   + tr("  yours:     {got}", got=got.words()) + _layout_diff(ref, got),
                   tr("after op {i} of a seeded workload ({kind}), {what} differs from the reference allocator's",
                      i=i, kind=op[0], what=diff))
    ref_final, got_final = reference[-2], mine[-2]
    if got_final.reserved or got_final.block_size:
        raise Fail(tr("leak: after freeing everything and empty_cache(), {reserved} is still reserved "
                      "and {kept} was not given back to the device (reference: 0 and 0)",
                      reserved=fmt(got_final.reserved), kept=fmt(got_final.block_size)),
                   tr("leak: after freeing everything and empty_cache() memory stays reserved"))
    if mine[-1] is not None:
        raise Fail(tr("memory_stats() no longer matches the snapshot after the workload: {problem}",
                      problem=mine[-1]),
                   tr("memory_stats() no longer matches the snapshot after a seeded workload"))


def run_plugged(fn, ops: list, profile: str, config: str, name: str) -> list:
    """A runner (check.observed): ``ops`` with ``fn`` plugged in as the decision ``name``, observed as
    plain data (``from_plain`` turns it back into what ``run`` returns)."""
    observations = run(ops, lambda dev: PluggedAllocator(dev, config, plug={name: fn}), profile)
    return [astuple(o) for o in observations[:-1]] + [observations[-1]]


def from_plain(observations: list) -> list:
    return [Observation(*o) for o in observations[:-1]] + [observations[-1]]


def _what_differs(ref: Observation, got: Observation) -> str:
    if ref.block_size != got.block_size:
        return tr("the size of the block handed out")
    if ref.device_mallocs != got.device_mallocs:
        return tr("the number of cudaMalloc calls")
    if ref.reserved != got.reserved:
        return tr("the reserved bytes")
    if ref.allocated != got.allocated:
        return tr("the allocated bytes")
    if ref.segments != got.segments:
        return tr("the number of segments")
    return tr("the layout of blocks inside the segments (splits and merges)")


def _layout_diff(ref: Observation, got: Observation) -> str:
    for n, (a, b) in enumerate(zip(ref.layout, got.layout)):
        if a != b:
            def show(blocks):
                return " | ".join(f"+{off:#x} {fmt(size)} {state.replace('active_', '')}" for off, size, state in blocks)
            free_ref = sum(1 for blk in a if blk[2] == "inactive")
            free_got = sum(1 for blk in b if blk[2] == "inactive")
            extra = ""
            if free_got > free_ref and len(b) > len(a):
                extra = "\n  " + tr("segment {n} should hold {free_ref} free block(s) after merging with free "
                                    "neighbours; yours left {free_got} free block(s): a freed block should have "
                                    "merged with its neighbour", n=n, free_ref=free_ref, free_got=free_got)
            elif len(b) < len(a) and free_got < free_ref + 1:
                extra = "\n  " + tr("segment {n}: yours merged blocks that must stay apart (a neighbour that is "
                                    "allocated, or still pending on another stream's event, must not be absorbed)",
                                    n=n)
            return ("\n  " + tr("segment {n} (blocks as offset size state):", n=n)
                    + "\n    " + tr("reference: {blocks}", blocks=show(a))
                    + "\n    " + tr("yours:     {blocks}", blocks=show(b)) + extra)
    return ""


def random_workload(rng: random.Random, n_ops: int = 80, streams: int = 1, max_live: int = 2 << 30,
                    kinds=("small", "medium", "large"), events: bool = False) -> list:
    """A seeded mix of mallocs and frees (sizes from the chosen ranges), bounded live bytes."""
    ops, live, total, key = [], {}, 0, 0
    for _ in range(n_ops):
        if live and (rng.random() < 0.4 or total > max_live):
            k = rng.choice(sorted(live))
            if events and rng.random() < 0.3 and streams > 1:
                s = rng.randrange(1, streams)
                ops.append(("record", k, s))
                ops.append(("sleep", s, rng.choice([10, 100, 1000])))
            ops.append(("free", k))
            total -= live.pop(k)
            continue
        kind = rng.choice(kinds)
        if kind == "small":
            size = rng.choice([rng.randint(1, 4096), rng.randint(1, 1 * MiB), 1 * MiB, 512 * rng.randint(1, 2048)])
        elif kind == "medium":
            size = rng.choice([rng.randint(MiB + 1, 10 * MiB - 1), 512 * rng.randint(2049, 20479)])
        else:
            size = rng.choice([rng.randint(10 * MiB, 60 * MiB), 2 * MiB * rng.randint(5, 30)])
        key += 1
        name = f"t{key}"
        ops.append(("malloc", name, size, rng.randrange(streams)))
        live[name] = size
        total += size
        if events and rng.random() < 0.1:
            ops.append(("sync",))
    return ops
