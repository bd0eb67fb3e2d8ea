"""Lab 7 -- diagnose it: answer questions about a training snapshot from its trace.

Snapshots: the real PyTorch snapshot when the course finds it
(``allocator_ref.trace.fetch.find_trace``: ``ALLOCATOR_REF_TRACES``, the per-user cache
that ``python -m allocator_ref traces fetch`` fills, then ``../shared/traces``) -- loaded only with
``allocator_ref.trace.load_snapshot``, which refuses every pickle global --
else a snapshot the course makes itself with ``CachingAllocator.snapshot()``.
Hidden cases are snapshots the course records now from seeded workloads.

The learner writes functions of the snapshot dict; the expected answers are
computed at check time by replaying the snapshot's trace event by event
(``replay_trace`` below), never stored:

* ``lab7.peaks``: ``peaks(snapshot) -> {"peak_requested": int, "peak_reserved": int}``
  -- the most bytes requested by live tensors at once, and the most bytes held
  in segments at once, over the trace;
* ``lab7.largest_free``: ``largest_free_block(snapshot) -> int`` -- the biggest
  cached free block at the end (segments list).
"""
from __future__ import annotations

import random

from ..editions.messages import translator
from ..events import NEW_MEMORY, RELEASES
from .reference import CachingAllocator
from .check import Case, Exercise, Fail, MiB, fmt, lab_device, register, same, show
from .workload import _apply, random_workload

tr = translator("labs")                  # what a learner reads, in the learner's language
later = translator("labs", later=True)  # marked now, said when shown (check.shown)

REAL_FROM_EMPTY = "small-from-empty.pickle"     # recorded from an empty allocator: peaks are well defined


def course_snapshot(seed: int = 0, n_ops: int = 120, profile: str = "h100-80gb", suffix: tuple = (),
                    config: str = "") -> dict:
    """A snapshot recorded now by the reference allocator (``config``: a PYTORCH_CUDA_ALLOC_CONF)
    on a seeded training-like workload (two streams with record_stream, so some frees are
    deferred), sometimes followed by ``empty_cache()``, then the ops in ``suffix``."""
    rng = random.Random(seed)
    dev = lab_device(profile)
    alloc = CachingAllocator(dev, config)
    alloc.record_memory_history()
    streams, live = {0: None}, {}

    def stream(n):
        if n not in streams:
            streams[n] = dev.create_stream()
        return streams[n]
    ops = random_workload(rng, n_ops, streams=2, events=True, kinds=("small", "medium", "large", "medium"))
    for op in ops:
        _apply(op, alloc, dev, stream, live)
    if rng.random() < 0.5:
        alloc.empty_cache()
    for op in suffix:                   # last, so nothing after it undoes the situation it sets up
        _apply(op, alloc, dev, stream, live)
    return alloc.snapshot()


def deferred_free_suffix(rng: random.Random) -> tuple:
    """A tensor freed while another stream still uses it, then a new one: between 'free_requested' and
    'free_completed' both are live, so the peak of requested bytes counts them together.  Both are
    bigger than the whole seeded workload before them (at most 2 GiB live), so this is the peak."""
    a, b = rng.randint(2048, 3072) * MiB + rng.randrange(512), rng.randint(2048, 3072) * MiB
    return (("malloc", "p_a", a, 0), ("record", "p_a", 1), ("sleep", 1, 5000), ("free", "p_a"),
            ("malloc", "p_b", b, 0), ("sync",), ("malloc", "p_c", 512, 0), ("free", "p_b"))


def peaks_suffix(rng: random.Random) -> tuple:
    """The deferred free above, then the cache emptied and a new segment made: reserved bytes go
    down before they go up again, so a running total that never subtracts a freed segment
    (or an unmapped page range) overshoots the real peak."""
    again = rng.randint(256, 1024) * MiB
    return deferred_free_suffix(rng) + (("empty_cache",), ("malloc", "p_d", again, 0))


def fragmented_suffix(rng: random.Random) -> tuple:
    """A fresh 1.5-2 GiB segment (far bigger than any block before), cached, then carved into three
    blocks and the first and last freed: the segment with the largest free block holds two free
    blocks, so its total minus allocated is not the largest block."""
    whole = rng.randint(1536, 2048) * MiB
    first, last, tail = (rng.randint(100, 200) * MiB, rng.randint(100, 200) * MiB, rng.randint(20, 100) * MiB)
    # the middle (allocated) block is the biggest block of all: "the largest block" is not "the largest free"
    parts = [first, whole - first - last - tail, last]
    # Last, a block bigger than all of them freed while another stream still uses it: it is
    # 'active_pending_free' at the end, not free, so it must not count.
    pending = rng.randint(2560, 3072) * MiB
    return (("malloc", "f_whole", whole, 0), ("free", "f_whole"),
            ("malloc", "f_a", parts[0], 0), ("malloc", "f_b", parts[1], 0), ("malloc", "f_c", parts[2], 0),
            ("free", "f_a"), ("free", "f_c"),
            ("malloc", "f_p", pending, 0), ("record", "f_p", 1), ("sleep", 1, 500_000), ("free", "f_p"))


def small_free_suffix(rng: random.Random) -> tuple:
    """On a fresh allocator (the case runs no seeded workload before it): small tensors share one 2 MiB small-pool segment and two of them are
    freed, while large tensors of whole 2 MiB multiples over 10 MiB fill their own segments exactly and
    one more large block waits for another stream's event. The largest free block is in the small
    segment; the pending one is bigger but not free."""
    small = [rng.randint(200, 330) * 1024 for _ in range(6)]
    big = 2 * MiB * rng.randint(6, 40)
    ops = [("malloc", f"q{i}", n, 0) for i, n in enumerate(small)]
    ops += [("free", "q1"), ("free", "q3")]
    ops += [("malloc", f"qbig{i}", big, 0) for i in range(rng.randint(1, 3))]
    ops += [("malloc", "q_p", big, 0), ("record", "q_p", 1), ("sleep", 1, 500_000), ("free", "q_p")]
    return tuple(ops)


def no_free_suffix(rng: random.Random) -> tuple:
    """On a fresh allocator: large tensors of whole 2 MiB multiples over 10 MiB, each filling its own segment
    exactly (get_allocation_size rounds them to themselves), so no block is free: the answer is 0, and a
    max() without a default raises."""
    return tuple(("malloc", f"full{i}", 2 * MiB * rng.randint(6, 40), 0) for i in range(rng.randint(1, 4)))


def training_snapshot() -> tuple:
    """(snapshot, where it came from): the real one when the course finds it, else a course-made one."""
    from ..trace.fetch import find_trace
    path = find_trace(REAL_FROM_EMPTY)
    if path is not None:
        from ..trace.recording import load_recording
        return load_recording(path).snapshot, tr("real PyTorch snapshot {real_from_empty}",
                                                 real_from_empty=REAL_FROM_EMPTY)
    return course_snapshot(7), tr("course-made snapshot (CachingAllocator.snapshot(), seed 7)")


def replay_trace(snapshot: dict) -> dict:
    """Walk device_traces[0]: peaks of requested and reserved bytes (the reference answer)."""
    requested = reserved = peak_req = peak_res = 0
    for e in snapshot["device_traces"][0] if snapshot["device_traces"] else []:
        action = e["action"]
        if action == "alloc":
            requested += e["size"]
        elif action == "free_completed":
            requested -= e["size"]
        elif action in NEW_MEMORY:
            reserved += e["size"]
        elif action in RELEASES:
            reserved -= e["size"]
        peak_req, peak_res = max(peak_req, requested), max(peak_res, reserved)
    return {"peak_requested": peak_req, "peak_reserved": peak_res}


def largest_free(snapshot: dict) -> int:
    return max((b["size"] for s in snapshot["segments"] for b in s["blocks"] if b["state"] == "inactive"), default=0)


def _peaks_case(get, label):
    def judge(fn):
        snapshot, where = get()
        expected = replay_trace(snapshot)
        got = fn(snapshot)
        if type(got) is not dict:
            raise Fail(tr("peaks returned {got}; return a dict with peak_requested and peak_reserved",
                          got=show(got)),
                       tr("peaks did not return a dict"))
        for key, words in (("peak_requested", tr("the running sum of 'alloc' sizes minus 'free_completed' sizes")),
                           ("peak_reserved", tr("the running sum of 'segment_alloc'/'segment_map' sizes minus "
                                                "'segment_free'/'segment_unmap' sizes"))):
            if not same(got.get(key), expected[key]):
                raise Fail(tr("{where}: {key} is {expected}, yours is {got}: the "
                              "maximum over the trace of {words}",
                              where=where, key=key, expected=fmt(expected[key]),
                              got=show(got.get(key)), words=words),
                           tr("your {key} differs from the value replayed from this snapshot's trace",
                              key=key))
    return Case(label, judge)


def _free_case(get, label):
    def judge(fn):
        snapshot, where = get()
        expected = largest_free(snapshot)
        got = fn(snapshot)
        if not same(got, expected):
            raise Fail(tr("{where}: the largest free block is {expected}, yours is {got}: look at "
                          "the blocks whose state is 'inactive' in every segment of snapshot['segments']",
                          where=where, expected=fmt(expected), got=show(got)),
                       tr("your answer differs from the largest inactive block of this snapshot"))
    return Case(label, judge)


def _hidden(make_case, make_suffix, configs=("",), more_suffixes=()):
    """Three seeded snapshots; the first ones (one per allocator config in ``configs``) end with
    the situation this exercise's classic mistakes get wrong (``make_suffix``), so the hidden
    cases alone catch them for every seed; then one more per ``more_suffixes`` (other situations)."""
    def gen(rng):
        cases = []
        for k in range(3 + len(more_suffixes)):
            seed = rng.randrange(1 << 30)
            n = rng.randint(60, 200) if k < 3 else 0     # the extra situations start from an empty allocator
            suffix = (make_suffix(rng) if k < len(configs) else
                      more_suffixes[k - 3](rng) if k >= 3 else ())
            config = configs[k] if k < len(configs) else ""
            case = make_case(lambda seed=seed, n=n, suffix=suffix, config=config:
                             (course_snapshot(seed, n, suffix=suffix, config=config),
                              tr("a seeded course-made snapshot{config}",
                                 config=' (' + config + ')' if config else '')),
                             tr("a snapshot recorded now from a seeded workload"))
            case.data = (seed, n, suffix, config)
            cases.append(case)
        return cases
    return gen


register(Exercise(
    id="lab7.peaks", pure=True, lab=7, title=later("peaks(snapshot): peak requested and peak reserved bytes from "
                                                   "the trace"),
    public=lambda: [_peaks_case(training_snapshot, tr("the training snapshot")),
                    _peaks_case(lambda: (course_snapshot(3, suffix=peaks_suffix(random.Random(3))),
                                         tr("course-made snapshot (seed 3; ends with a free deferred by "
                                            "record_stream, then empty_cache and a new segment)")),
                                tr("a course-made snapshot with a deferred free and an emptied cache")),
                    _peaks_case(lambda: (course_snapshot(4, suffix=peaks_suffix(random.Random(4)),
                                                         config="expandable_segments:True"),
                                         tr("course-made snapshot (seed 4, expandable_segments:True: pages are "
                                            "mapped and unmapped)")),
                                tr("a course-made snapshot with expandable segments"))],
    hidden=_hidden(_peaks_case, peaks_suffix, configs=("", "expandable_segments:True")), what=later("peaks function"),
    nudge=(later("When does a tensor's memory really stop being in use: when the program frees it, or when the "
                 "allocator completes the free?"),
           later("List the trace's actions that add bytes and those that take them away, for requested bytes "
                 "and for reserved bytes separately, and keep a running maximum of each.")),
    hint=later("Walk snapshot['device_traces'][0] in order, keeping two running totals: requested bytes (+size "
               "on 'alloc', -size on 'free_completed') and reserved bytes (+size on 'segment_alloc' and "
               "'segment_map', -size on 'segment_free' and 'segment_unmap'); return the maximum each reached."),
))

register(Exercise(
    id="lab7.largest_free", pure=True, lab=7, title=later("largest_free_block(snapshot): the biggest cached free "
                                                          "block at the end"),
    public=lambda: [_free_case(training_snapshot, tr("the training snapshot")),
                    _free_case(lambda: (course_snapshot(3, suffix=fragmented_suffix(random.Random(3))),
                                        tr("course-made snapshot (seed 3; one segment holds two free blocks, and "
                                           "a bigger block waits for another stream)")),
                               tr("a course-made snapshot with a fragmented segment"))],
    hidden=_hidden(_free_case, fragmented_suffix, more_suffixes=(small_free_suffix, no_free_suffix)),
    what=later("largest_free_block function"),
    nudge=(later("One segment can hold several free blocks: are you looking at blocks, or at totals?"),
           later("Look at the state of each block, not of each segment, and think about a snapshot in which no "
                 "block is free.")),
    hint=later("snapshot['segments'] lists every segment with its blocks; a cached free block has state "
               "'inactive'. Return the largest size among them (0 when there is none)."),
))


# ------------------------------------------------------------------ the rules' edges and states
# Each is met by the hidden cases of every seed (make check-labs proves it): see spec.edges.
from .spec import Edge, edges  # noqa: E402

_SNAPSHOTS: dict = {}


def _snapshot_of(data) -> dict:
    key = repr(data)
    if key not in _SNAPSHOTS:
        seed, n, suffix, config = data
        _SNAPSHOTS[key] = course_snapshot(seed, n, suffix=suffix, config=config)
    return _SNAPSHOTS[key]


def _trace_has(*pattern):
    def met(data):
        actions = [e["action"] for e in _snapshot_of(data)["device_traces"][0]]
        return all(a in actions for a in pattern)
    return met


def _deferred_then_alloc(data) -> bool:
    """A free requested, another alloc, then that free completed: both live at once."""
    waiting = set()
    for e in _snapshot_of(data)["device_traces"][0]:
        if e["action"] == "free_requested":
            waiting.add(e["addr"])
        elif e["action"] == "alloc" and waiting:
            return True
        elif e["action"] == "free_completed":
            waiting.discard(e["addr"])
    return False


def _segment_free_then_more(data) -> bool:
    actions = [e["action"] for e in _snapshot_of(data)["device_traces"][0]]
    return "segment_free" in actions and "segment_alloc" in actions[actions.index("segment_free"):]


def _blocks(data, state):
    return [b["size"] for s in _snapshot_of(data)["segments"] for b in s["blocks"] if b["state"] == state]


edges("lab7.peaks",
      Edge("a free requested while another stream still uses it, and an alloc before it completes",
           _deferred_then_alloc),
      Edge("a segment freed (empty_cache), then a new one", _segment_free_then_more),
      Edge("pages mapped and unmapped (expandable segments)", _trace_has("segment_map", "segment_unmap")))

edges("lab7.largest_free",
      Edge("a segment holding several free blocks",
           lambda d: any(sum(b["state"] == "inactive" for b in s["blocks"]) > 1 for s in _snapshot_of(d)["segments"])),
      Edge("a block pending free (another stream's event) bigger than every free block",
           lambda d: max(_blocks(d, "active_pending_free"), default=0) > max(_blocks(d, "inactive"), default=0)),
      Edge("the largest free block lies in a small-pool (2 MiB) segment",
           lambda d: max(((b["size"], s["segment_type"]) for s in _snapshot_of(d)["segments"] for b in s["blocks"]
                          if b["state"] == "inactive"), default=(0, None))[1] == "small"),
      Edge("no free block at all (the answer is 0)", lambda d: not _blocks(d, "inactive")),
      Edge("an allocated block bigger than every free block",
           lambda d: max(_blocks(d, "active_allocated"), default=0) > max(_blocks(d, "inactive"), default=0)))
