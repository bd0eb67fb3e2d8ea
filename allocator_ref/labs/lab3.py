"""Lab 3 -- fix the race: a two-stream program that corrupts its data on the simulated device.

The learner writes ``pipeline(dev, alloc, data, work_us) -> Allocation``: upload
``data`` into ``x`` on the default stream, let a *side* stream compute for
``work_us`` then copy ``x`` into ``out`` (owned by the side stream), while the
default stream frees ``x`` and reuses memory for its own next buffer.  The
check runs it on a fresh SimDevice (real bytes, virtual clock) and judges:

* the bytes: it reads ``out`` back and compares with ``data``;
* the overlap: the device time of the whole program must stay well below the
  serial time (both reference timings are measured now, on the same device
  profile: the record_stream version and a version that synchronises the
  device before the free) -- "fixing" the race by serialising everything fails;
* no cudaFree-induced device-wide sync, no leak (only ``out`` stays allocated);
* per exercise: ``lab3.record_stream`` must use ``record_stream``;
  ``lab3.event`` must not, and must use an event instead.
"""
from __future__ import annotations

import random

from ..editions.messages import translator
from ..allocation import Allocation
from .reference import CachingAllocator
from .check import Case, Exercise, Fail, fmt, lab_device, observed, register, show

tr = translator("labs")                  # what a learner reads, in the learner's language
later = translator("labs", later=True)  # marked now, said when shown (check.shown)

FILL = 0xEE


class CountingAllocator(CachingAllocator):
    """The reference allocator, counting record_stream calls and probing every free for an unordered reuse.

    The probe is what the next request on the freeing stream would meet: when a copy on *another* stream
    still reads the freed range (queued, or running on the virtual clock) and the free was not told about
    that stream (record_stream), it asks for the same size on the freed block's stream at once. If the
    allocator hands out memory overlapping the freed block, the next buffer of a real program would be
    written while the copy still reads it: the race the exercise is about, shown whatever the two
    streams' timings happen to be (PyTorch's free() reuses a block at once unless record_stream deferred
    it: DeviceCachingAllocator::free -> insert_events only for stream_uses)."""

    def __init__(self, device, config=""):
        super().__init__(device, config)
        self.record_stream_calls = 0
        self.recorded: dict = {}            # id(allocation) -> handles of the streams record_stream named
        self.reads: list = []               # (src, nbytes, stream handle, end us) of every device copy
        self.waited: dict = {}              # stream handle -> latest event time that stream was told to wait for
        self.unordered_reuse = None         # the first race the probe demonstrated, in words

    def record_stream(self, allocation, stream):
        self.record_stream_calls += 1
        result = super().record_stream(allocation, stream)
        self.recorded.setdefault(id(allocation), set()).add(_handle(self.device, stream))
        return result

    def free(self, allocation):
        readers = self._unfinished_readers(allocation)
        super().free(allocation)
        if readers and self.unordered_reuse is None:
            self._probe(allocation, readers[0])

    def _unfinished_readers(self, allocation) -> list:
        if not isinstance(allocation, Allocation) or allocation.freed:
            return []
        lo, hi, now = allocation.ptr, allocation.ptr + allocation.size, self.device.now_us()
        mine = _handle(self.device, allocation.stream)
        told = self.recorded.get(id(allocation), set())
        ordered = self.waited.get(mine, float("-inf"))    # the freeing stream waits for work up to here
        return [r for r in self.reads if r[0] < hi and lo < r[0] + r[1] and r[3] > now
                and r[2] != mine and r[2] not in told and r[3] > ordered]

    def _probe(self, freed, reader) -> None:
        probe = super().malloc(freed.size, stream=freed.stream)
        try:
            if probe.ptr < freed.ptr + freed.size and freed.ptr < probe.ptr + probe.size:
                self.unordered_reuse = tr(
                    "you freed x at {freed_at:.0f} us (simulated host time), but the side stream's copy reads x "
                    "until {read_until:.0f} us, and the allocator did not know: a request made right after your "
                    "free on x's stream got x's own block back (at {probe_ptr:#x}), so the next buffer of the "
                    "program can be written while the side stream still reads x",
                    freed_at=self.device.now_us(), read_until=reader[3], probe_ptr=probe.ptr)
        finally:
            super().free(probe)


def _reference_record_stream(dev, alloc, data, work_us):
    side = dev.create_stream()
    n = len(data)
    x = alloc.malloc(n)
    dev.write(x.ptr, data)
    uploaded = dev.create_event()
    uploaded.record(None)
    dev.wait_event(side, uploaded)
    out = alloc.malloc(n, stream=side)
    dev.sleep(side, work_us)
    dev.copy(out.ptr, x.ptr, n, stream=side)
    alloc.record_stream(x, side)
    alloc.free(x)
    tmp = alloc.malloc(n)
    dev.fill(tmp.ptr, n, FILL)
    dev.sleep(None, work_us)
    alloc.free(tmp)
    return out


def _reference_serial(dev, alloc, data, work_us):
    side = dev.create_stream()
    n = len(data)
    x = alloc.malloc(n)
    dev.write(x.ptr, data)
    uploaded = dev.create_event()
    uploaded.record(None)
    dev.wait_event(side, uploaded)
    out = alloc.malloc(n, stream=side)
    dev.sleep(side, work_us)
    dev.copy(out.ptr, x.ptr, n, stream=side)
    dev.synchronize()                     # correct, but everything after waits for the side stream
    alloc.free(x)
    tmp = alloc.malloc(n)
    dev.fill(tmp.ptr, n, FILL)
    dev.sleep(None, work_us)
    alloc.free(tmp)
    return out


def _watch_host_writes(dev) -> list:
    """Log every host-to-device write (``dev.write``): the output must come from the device, not the host."""
    writes, real_write = [], dev.write

    def write(ptr, data, stream=None):
        writes.append((ptr, len(memoryview(data).cast("B")) if not isinstance(data, (bytes, bytearray)) else len(data)))
        return real_write(ptr, data, stream)
    dev.write = write
    return writes


def _handle(dev, stream) -> int:
    return (dev.default_stream if stream is None else stream).handle


def _watch_reads(dev, alloc) -> None:
    """Log every device copy's source range, stream and end time (what a free must be ordered after),
    and every stream's wait on an event (a wait orders the waiting stream's later work after it)."""
    real_copy, real_wait = dev.copy, dev.wait_event

    def copy(dst, src, nbytes, stream=None):
        real_copy(dst, src, nbytes, stream)
        s = dev.default_stream if stream is None else stream
        alloc.reads.append((src, nbytes, s.handle, s.tail_us))

    def wait_event(stream, event):
        real_wait(stream, event)
        if getattr(event, "time_us", None) is not None:
            h = _handle(dev, stream)
            alloc.waited[h] = max(alloc.waited.get(h, float("-inf")), event.time_us)
    dev.copy, dev.wait_event = copy, wait_event


def _timed(fn, profile, data, work_us):
    dev = lab_device(profile)
    dev.host_writes = _watch_host_writes(dev)
    alloc = CountingAllocator(dev)
    _watch_reads(dev, alloc)
    t0 = dev.now_us()
    out = fn(dev, alloc, data, work_us)
    dev.synchronize()
    return dev, alloc, out, dev.now_us() - t0


def run_pipeline(fn, n: int, work_us: float, profile: str, data_seed: int) -> dict:
    """The runner (check.observed): the learner's pipeline on a fresh device.  What is wrong without any
    reference (the bytes, a leak, a host write, cudaFree) fails here; the timing goes back for the verdict."""
    data = random.Random(data_seed).randbytes(n)
    dev, alloc, out, elapsed = _timed(fn, profile, data, work_us)
    what = tr("{n} of data, {work_us:g} us of work per stream, {profile}", n=fmt(n), work_us=work_us,
              profile=profile)
    if type(out) is not Allocation or out.allocator is not alloc:
        raise Fail(tr("your pipeline returned {out}; it must return `out`, the Allocation the side stream copied "
                      "into (from alloc.malloc)",
                      out=show(out)),
                   tr("your pipeline did not return the output Allocation"))
    if out.freed or out.ptr == 0 or out.size < n:
        raise Fail(tr("the returned `out` was freed (or is too small): return it still allocated"),
                   tr("the returned output allocation was freed or too small"))
    into_out = [(p, k) for p, k in dev.host_writes if p < out.ptr + n and out.ptr < p + k]
    if into_out:
        raise Fail(tr("`out` was written from the host (dev.write at {ptr:#x}, {size}): the "
                      "output must be what the side stream's copy of x produced on the device; the check judges "
                      "what ran on the device, so a host write into `out` does not count",
                      ptr=into_out[0][0], size=fmt(into_out[0][1])),
                   tr("the output was written from the host (dev.write into `out`), not copied on the device"))
    got = dev.read(out.ptr, n, stream=out.stream)
    if got != data:
        i = next(k for k in range(n) if got[k] != data[k])
        bad = sum(1 for k in range(0, n, max(1, n // 4096)) if got[k] != data[k]) / len(range(0, n, max(1, n // 4096)))
        cause = (tr("0x{fill:02X} is what the default stream wrote into its next buffer: that buffer got x's "
                    "memory back from the allocator while the side stream had not copied x yet", fill=FILL)
                 if got[i] == FILL else tr("the side stream read x at the wrong time"))
        raise Fail(tr("corrupted output ({what}): byte {i} of `out` is 0x{got_i:02X} but the input had "
                      "0x{data_i:02X} (about {bad:.0%} of the bytes are wrong). {cause}.",
                      what=what, i=i, got_i=got[i], data_i=data[i], bad=bad, cause=cause),
                   tr("corrupted output: the bytes read back differ from the input (memory was reused too early)"))
    if alloc.unordered_reuse:
        raise Fail(tr("unordered reuse ({what}): the output is right this time, but only by the streams' timing: "
                      "{why}. Free x only once the side stream's copy has completed (wait for "
                      "an event recorded after the copy), or tell the allocator with record_stream.",
                      what=what, why=alloc.unordered_reuse),
                   tr("unordered reuse: x was freed while the side stream's copy still read it, and the "
                      "allocator handed x's block to the next request"))
    leaked = [a for a in alloc.live_allocations() if a is not out]
    if leaked:
        raise Fail(tr("leak: {leaked} allocation(s) besides `out` are still allocated when your pipeline returns "
                      "({value}): free x and tmp",
                      leaked=len(leaked), value=', '.join((fmt(a.requested_size) for a in leaked))),
                   tr("leak: allocations besides `out` are still allocated at the end"))
    if dev.counters.implicit_syncs:
        raise Fail(tr("your pipeline made cudaFree run (empty_cache() or a direct device free): cudaFree waits "
                      "for every stream (an implicit device-wide synchronisation), which serialises the streams"),
                   tr("cudaFree was called during the pipeline (an implicit device-wide synchronisation)"))
    return {"elapsed": float(elapsed), "record_stream_calls": int(alloc.record_stream_calls)}


def judge_pipeline(fn, n: int, work_us: float, profile: str, data_seed: int, mode: str) -> None:
    seen = observed(fn, run_pipeline, n, work_us, profile, data_seed)
    what = tr("{n} of data, {work_us:g} us of work per stream, {profile}", n=fmt(n), work_us=work_us,
              profile=profile)
    # The reference timings: measured after the learner's code ran (in a graded check, in another process).
    data = random.Random(data_seed).randbytes(n)
    _, _, _, t_ref = _timed(_reference_record_stream, profile, data, work_us)
    _, _, _, t_serial = _timed(_reference_serial, profile, data, work_us)
    limit = (t_ref + t_serial) / 2
    if seen["elapsed"] > limit:
        raise Fail(tr("correct bytes, but the streams were serialised ({what}): your program took "
                      "{seen_elapsed:.0f} us of (simulated) device time; the version that synchronizes the "
                      "device before the free takes {t_serial:.0f} us and one that keeps both streams busy at "
                      "once takes {t_ref:.0f} us. Do not make the default stream (or the host, for the whole "
                      "device) wait for the side stream's work: only the reuse of x's memory has to wait.",
                      what=what, seen_elapsed=seen['elapsed'], t_serial=t_serial, t_ref=t_ref),
                   tr("correct bytes, but the streams were serialised: the program took about as long as running "
                      "the two streams one after the other"))
    if mode == "record_stream" and seen["record_stream_calls"] == 0:
        raise Fail(tr("correct and overlapping, but this exercise is about record_stream: your pipeline never "
                      "called alloc.record_stream(x, side)"),
                   tr("your pipeline did not call record_stream"))
    if mode == "event" and seen["record_stream_calls"]:
        raise Fail(tr("this exercise asks for the event fix: do it without alloc.record_stream (record an event "
                      "on the side stream after the copy and free x only once it has completed)"),
                   tr("your event-based pipeline called record_stream"))


def _cases(mode, rng=None):
    if rng is None:
        specs = [(4096, 1000, "h100-80gb", 1, tr("4 KiB (small pool), 1000 us of work")),
                 (12 << 20, 1000, "h100-80gb", 2, tr("12 MiB (large pool), 1000 us of work")),
                 (3 << 20, 400, "t4-16gb", 3, tr("3 MiB on a T4 profile, 400 us of work"))]
    else:
        specs = []
        for k in range(3):
            n = [rng.randint(1, 1 << 20), rng.randint((1 << 20) + 1, 10 << 20), rng.randint(10 << 20, 40 << 20)][k]
            specs.append((n, rng.choice([200, 500, 1500, 3000]), rng.choice(["h100-80gb", "t4-16gb", "tiny-1gb"]),
                          rng.randrange(1 << 30), [tr("a small buffer, seeded"), tr("a medium buffer, seeded"),
                                                   tr("a large buffer, seeded")][k % 3]))
    return [Case(spec[4], (lambda fn, s=spec: judge_pipeline(fn, *s[:4], mode)), data=spec[:4])
            for spec in specs]


register(Exercise(
    id="lab3.record_stream", observed=True, lab=3, title=later("fix the race with record_stream (and keep the "
                                                               "streams overlapping)"),
    public=lambda: _cases("record_stream"), hidden=lambda rng: _cases("record_stream", rng),
    nudge=(later("Who still reads x after the default stream frees it, and does the allocator know?"),
           later("Find the allocator call that tells it another stream uses a block, and make it before the "
                 "free.")),
    hint=later("x is allocated on the default stream but read by the side stream. Before alloc.free(x), tell the "
               "allocator about that use: alloc.record_stream(x, side). The free then waits (without blocking "
               "anyone) for an event on the side stream before x's memory can be handed out again."),
))

register(Exercise(
    id="lab3.event", observed=True, lab=3, title=later("fix the race with an event instead (no record_stream)"),
    public=lambda: _cases("event"), hidden=lambda rng: _cases("event", rng),
    nudge=(later("Which wait is enough: the whole device, a stream, or just the side stream's copy?"),
           later("Record something on the side stream right after its copy, and make only the free of x wait "
                 "for it, after the default stream's own work is queued.")),
    hint=later("Record an event on the side stream right after the copy (done = dev.create_event(); "
               "done.record(side)). Queue the default stream's own work first, then let the host wait only for "
               "that event (done.synchronize()) before alloc.free(x). Do not dev.synchronize() the whole device, "
               "and do not make the default stream wait for the side stream before its own work."),
))


# ------------------------------------------------------------------ the rules' edges and states
# Each is met by the hidden cases of every seed (make check-labs proves it): see spec.edges.
from .spec import Edge, edges  # noqa: E402

for _id in ("lab3.record_stream", "lab3.event"):
    edges(_id,
          Edge("a small-pool buffer (at most 1 MiB)", lambda d: d[0] <= 1 << 20),
          Edge("a mid-sized buffer (1 to 10 MiB: a 20 MiB segment)", lambda d: (1 << 20) < d[0] < 10 << 20),
          Edge("a large buffer (10 MiB or more)", lambda d: d[0] >= 10 << 20))
