"""Lab 4 -- make it fit: a workload runs out of memory on the 1 GiB teaching device.

The workload (``training_like_workload``): big activations are allocated and
freed (they stay cached), then medium buffers are allocated -- best fit carves
them out of the cached big blocks, splitting them -- then big activations are
needed again and no cached block is big enough, while the split segments
cannot be returned to the device.  Live memory never exceeds the device: the
OOM is fragmentation.

Exercises:

* ``lab4.diagnose``: ``diagnose(stats, snapshot, request, device_free) -> dict`` with
  ``reserved_but_unallocated``, ``largest_free_block`` and ``cause``
  ("fragmentation" or "too much live memory"), judged on the state at the OOM
  of public and seeded workloads; the expected answers are computed now from
  that state.
* ``lab4.config``: ``choose_config() -> str``, a PYTORCH_CUDA_ALLOC_CONF string;
  the check replays the workload and seeded variants of it with that config on
  a fresh tiny-1gb device: it must not run out of memory.
"""
from __future__ import annotations

import random

from ..editions.messages import translator
from ..caching import AllocatorConfig, OutOfMemoryError
from .reference import CachingAllocator
from .check import Case, Exercise, Fail, MiB, fmt, lab_device, register, same, show

tr = translator("labs")                  # what a learner reads, in the learner's language
later = translator("labs", later=True)  # marked now, said when shown (check.shown)

PROFILE = "tiny-1gb"


def training_like_workload(big: int = 100 * MiB, n_big_first: int = 8, medium: int = 30 * MiB,
                           n_medium: int = 8, n_big_again: int = 7) -> list:
    """Ops (see allocator_ref.labs.workload): big tensors cached, medium ones split them, big ones again."""
    ops = [("malloc", f"act{i}", big, 0) for i in range(n_big_first)]
    ops += [("free", f"act{i}") for i in range(n_big_first)]
    ops += [("malloc", f"buf{i}", medium, 0) for i in range(n_medium)]
    ops += [("malloc", f"act2_{i}", big, 0) for i in range(n_big_again)]
    return ops


def too_big_workload(size: int = 100 * MiB, n: int = 10) -> list:
    """Ops that cannot fit whatever the configuration: more live bytes than the device has."""
    return [("malloc", f"t{i}", size, 0) for i in range(n)]


def run_until_oom(ops: list, config: str = "", profile: str = PROFILE) -> dict:
    """Replay ``ops`` on a fresh device; report where it ran out of memory (if it did).

    Returns a dict: ``ok`` (bool), ``failed_op`` (index or None), ``request`` (bytes asked for at the
    OOM), ``error`` (the OutOfMemoryError text), ``stats`` (memory_stats() at the end or at the OOM),
    ``snapshot`` (the allocator's snapshot() there), ``allocator`` and ``device``.
    """
    from .workload import _apply          # every workload op (record, sleep, pool_begin ...), as the other labs
    dev = lab_device(profile)
    alloc = CachingAllocator(dev, config)
    live, streams = {}, {0: None}

    def stream(n):
        if n not in streams:
            streams[n] = dev.create_stream()
        return streams[n]
    result = {"ok": True, "failed_op": None, "request": None, "error": None, "allocator": alloc, "device": dev}
    for i, op in enumerate(ops):
        try:
            _apply(op, alloc, dev, stream, live)
        except OutOfMemoryError as exc:
            result.update(ok=False, failed_op=i, request=op[2], error=str(exc))
            break
    result["stats"] = alloc.memory_stats()
    result["snapshot"] = alloc.snapshot()
    return result


# ------------------------------------------------------------------ diagnose
def expected_diagnosis(state: dict) -> dict:
    stats, snapshot = state["stats"], state["snapshot"]
    reserved = stats["reserved_bytes.all.current"]
    allocated = stats["allocated_bytes.all.current"]
    free_blocks = [b["size"] for s in snapshot["segments"] for b in s["blocks"] if b["state"] == "inactive"]
    device_free, _ = state["device"].mem_get_info()
    usable = device_free + (reserved - allocated)
    cause = "fragmentation" if usable >= state["request"] else "too much live memory"
    return {"reserved_but_unallocated": reserved - allocated,
            "largest_free_block": max(free_blocks, default=0), "cause": cause,
            "_why": (tr("{reserved_allocated} is reserved but unallocated and the device has {device_free} free: "
                        "{usable} in all, {value} for the {state_request} request",
                        reserved_allocated=fmt(reserved - allocated), device_free=fmt(device_free),
                        usable=fmt(usable), value=tr('enough') if cause == 'fragmentation' else tr('not enough'),
                        state_request=fmt(state['request'])))}


def _diagnose_case(ops, label, data=None, config=""):
    def judge(fn):
        state = run_until_oom(ops, config)
        assert not state["ok"], "lab 4 workload generator: this workload should run out of memory"
        expected = expected_diagnosis(state)
        got = fn(state["stats"], state["snapshot"], state["request"], state["device"].mem_get_info()[0])
        if type(got) is not dict:
            raise Fail(tr("diagnose returned {got}; it must return a dict with the keys "
                          "reserved_but_unallocated, largest_free_block, cause",
                          got=show(got)),
                       tr("diagnose did not return a dict"))
        for key, words in (("reserved_but_unallocated", tr("reserved_bytes minus allocated_bytes (current, 'all' "
                                                           "pool)")),
                           ("largest_free_block", tr("the largest block whose state is 'inactive' in the "
                                                     "snapshot's segments")),
                           ("cause", expected["_why"])):
            if key not in got:
                raise Fail(tr("diagnose's dict has no key {key!r}",
                              key=key),
                           tr("diagnose's dict has no key {key!r}",
                              key=key))
            if not same(got[key], expected[key]):
                shown = fmt(expected[key]) if isinstance(expected[key], int) else repr(expected[key])
                raise Fail(tr("at the OOM (op {state_failed_op}, a {state_request} request): {key} is {expected}, "
                              "yours is {got}: {words}",
                              state_failed_op=state['failed_op'], state_request=fmt(state['request']), key=key,
                              expected=shown, got=_show(got[key]), words=words),
                           tr("your {key} differs from the value computed from the state at this OOM",
                              key=key))
    return Case(label, judge, data=data or (ops, config))


def _show(value) -> str:
    return f"{fmt(value)} ({value})" if type(value) is int else show(value)


def _diagnose_public():
    return [_diagnose_case(training_like_workload(), tr("the training-like workload (100 MiB / 30 MiB tensors)")),
            _diagnose_case(too_big_workload(), tr("ten 100 MiB tensors on a 1 GiB device"))]


def _diagnose_hidden(rng):
    cases = [_diagnose_case(_device_free_workload(rng), tr("a seeded workload: fragmented, the device still has "
                                                           "room")),
             _diagnose_case(_seeded_workload(rng), tr("a seeded training-like workload")),
             _diagnose_case(_open_pool_workload(rng), tr("a seeded workload: the OOM comes while a pool is open "
                                                         "and a freed block waits for another stream")),
             _diagnose_case(_cached_cover_workload(rng), tr("a seeded workload: fragmented, enough cached bytes")),
             _diagnose_case(_exact_fit_workload(rng), tr("a seeded workload: the free bytes exactly cover the "
                                                         "request")),
             _diagnose_case(_expandable_workload(rng), tr("a seeded workload with expandable_segments:True"),
                            config="expandable_segments:True")]
    size = rng.randint(60, 200) * MiB
    cases.append(_diagnose_case(too_big_workload(size, 960 * MiB // size + 1), tr("a seeded workload too big for the device")))
    cases.append(_diagnose_case(_small_free_workload(rng), tr("a seeded workload: every large block in use, free "
                                                              "blocks only in a small-pool segment")))
    return cases


def _small_free_workload(rng: random.Random) -> list:
    """Small tensors share one 2 MiB small-pool segment and every other one is freed; then large tensors
    whose sizes are whole 2 MiB multiples over 10 MiB fill their own segments exactly, until the device
    runs out. At the OOM the free blocks are all in the small segment (the ladder's release_cached_blocks
    keeps a segment with a live block): a diagnosis that looks at large segments only finds none."""
    small = [rng.randint(200, 330) * 1024 for _ in range(6)]
    big = 2 * MiB * rng.randint(30, 60)
    ops = [("malloc", f"s{i}", n, 0) for i, n in enumerate(small)]
    ops += [("free", "s1"), ("free", "s3")]
    ops += [("malloc", f"big{i}", big, 0) for i in range(1024 * MiB // big + 1)]
    return ops


register(Exercise(
    id="lab4.diagnose", pure=True, lab=4, title=later("diagnose(stats, snapshot, request, device_free): why did "
                                                      "it run out of memory?"),
    public=_diagnose_public, hidden=_diagnose_hidden, what=later("diagnose function"),
    nudge=(later("Which bytes could serve the request if they were in one piece: the cached ones only, or the "
                 "device's free ones too?"),
           later("Compute the three values from the stats and the snapshot one at a time, and compare each "
                 "with the expected one named above before you decide the cause.")),
    hint=later("reserved_but_unallocated = stats['reserved_bytes.all.current'] - "
               "stats['allocated_bytes.all.current']; largest_free_block = max size of the blocks with state "
               "'inactive' over snapshot['segments']; the cause is fragmentation when reserved-but-unallocated "
               "bytes plus the device's free bytes would cover the request (the memory exists, not in one "
               "piece), else too much live memory."),
))


def _device_free_workload(rng: random.Random) -> list:
    """A training-like workload that OOMs although cached-but-unused bytes plus the device's free bytes
    would cover the request, while the cached ones alone would not: only a diagnosis that counts the
    device's free memory calls it fragmentation (about one draw in four qualifies)."""
    for _ in range(200):
        big, medium = 2 * MiB * rng.randint(40, 64), 2 * MiB * rng.randint(11, 20)
        ops = training_like_workload(big, rng.randint(3, 800 * MiB // big), medium, rng.randint(4, 12),
                                     rng.randint(3, 10))
        state = run_until_oom(ops)
        if state["ok"]:
            continue
        expected = expected_diagnosis(state)
        if expected["cause"] == "fragmentation" and expected["reserved_but_unallocated"] < state["request"]:
            return ops
    raise RuntimeError("lab 4: no seeded workload found (report this to the instructor)")


def _usable_bytes(state: dict) -> int:
    stats = state["stats"]
    return (state["device"].mem_get_info()[0] + stats["reserved_bytes.all.current"]
            - stats["allocated_bytes.all.current"])


def _exact_fit_workload(rng: random.Random) -> list:
    """A seeded training-like workload cut before its OOM, then one request of exactly the bytes that are
    free (cached but unallocated, plus the device's): the memory exists, not in one piece, so the cause is
    fragmentation (the comparison is >=, and a > answers 'too much live memory' here).  Releasing cached
    segments at the OOM moves bytes from the cache to the device's free bytes, so their sum is unchanged."""
    ops = _seeded_workload(rng)
    prefix = ops[:run_until_oom(ops)["failed_op"]]
    return prefix + [("malloc", "exact", _usable_bytes(run_until_oom(prefix)), 0)]


def _expandable_workload(rng: random.Random) -> list:
    """With expandable segments, free pages are unmapped at the OOM but a page partly in use stays mapped:
    its free bytes are reserved but unallocated, yet not in inactive_split_bytes (which counts only split
    segments' free blocks), so reading that stat as 'reserved but unallocated' goes wrong here."""
    odd = [rng.randint(1, 8) * MiB + rng.randint(1, MiB - 1) for _ in range(3)]
    return [("malloc", "a", odd[0], 0), ("malloc", "s", rng.randint(200, 400) * MiB + 7, 0),
            ("malloc", "b", odd[1], 0), ("free", "a"), ("malloc", "c", odd[2], 0), ("free", "b"),
            ("malloc", "huge", rng.randint(800, 1000) * MiB, 0)]


def _open_pool_workload(rng: random.Random) -> list:
    """The OOM comes while a pool context is open (as during a graph capture): a block freed with a use on
    another stream is held back (DeviceCachingAllocator::free defers it while captures_underway is not empty,
    CUDACachingAllocator.cpp, 2.11), so it is still *active* at the OOM, though no longer allocated.
    Reserved minus active misses it; reserved minus allocated counts it."""
    held = rng.randint(20, 200) * MiB + rng.randint(1, MiB - 1)
    return [("pool_begin", 1), ("malloc", "kept", rng.randint(20, 100) * MiB, 0),
            ("malloc", "held", held, 0), ("record", "held", 1), ("sleep", 1, 500_000), ("free", "held"),
            ("malloc", "huge", rng.randint(900, 1000) * MiB, 0)]


def _cached_cover_workload(rng: random.Random) -> list:
    """A seeded training-like workload whose cached-but-unallocated bytes alone cover the failed request."""
    for _ in range(200):
        big, medium = 2 * MiB * rng.randint(40, 64), 2 * MiB * rng.randint(11, 20)
        ops = training_like_workload(big, 800 * MiB // big, medium, rng.randint(4, 12), rng.randint(3, 10))
        state = run_until_oom(ops)
        if not state["ok"] and expected_diagnosis(state)["reserved_but_unallocated"] >= state["request"]:
            return ops
    raise RuntimeError("lab 4: no seeded workload found (report this to the instructor)")


# ------------------------------------------------------------------ config
def _seeded_workload(rng: random.Random) -> list:
    """A variant of the training-like workload that OOMs by default and fits with the usual remedies."""
    for _ in range(200):
        big = 2 * MiB * rng.randint(40, 64)          # 80..128 MiB
        medium = 2 * MiB * rng.randint(11, 20)       # 22..40 MiB
        n_first = (800 * MiB) // big
        n_medium = rng.randint(6, 10)
        n_again = (940 * MiB - n_medium * medium) // big
        ops = training_like_workload(big, n_first, medium, n_medium, n_again)
        if (not run_until_oom(ops)["ok"] and run_until_oom(ops, "expandable_segments:True")["ok"]
                and run_until_oom(ops, "max_split_size_mb:41")["ok"] and run_until_oom(ops, "max_split_size_mb:79")["ok"]):
            return ops
    raise RuntimeError("lab 4: no seeded workload found (report this to the instructor)")


def _config_case(ops, label):
    def judge(fn):
        text = fn()
        if not isinstance(text, str):
            raise Fail(tr("choose_config() returned {text!r}; return a PYTORCH_CUDA_ALLOC_CONF string such as "
                          "'max_split_size_mb:128'",
                          text=text),
                       tr("choose_config() did not return a string"))
        name, sep, value = text.partition("=")
        if sep and name.strip() == "PYTORCH_CUDA_ALLOC_CONF":
            raise Fail(tr("choose_config() returned the whole environment line {text!r}: return only its value, "
                          "{value!r} (what you would put after PYTORCH_CUDA_ALLOC_CONF=)",
                          text=text, value=value.strip()),
                       tr("choose_config() returned a whole PYTORCH_CUDA_ALLOC_CONF=... line, not its value"),
                       hint=tr("the option itself may be right: return only the part after the = sign."))
        try:
            AllocatorConfig.parse(text)
        except ValueError as exc:
            raise Fail(tr("the config {text!r} is not valid: {exc}",
                          text=text, exc=exc),
                       tr("the config is not valid: {exc}",
                          exc=exc),
                       hint=tr("fix the syntax first: comma-separated key:value pairs, as PyTorch parses "
                               "PYTORCH_CUDA_ALLOC_CONF; the error above names the part it could not read.")) from None
        state = run_until_oom(ops, text)
        if not state["ok"]:
            st = state["stats"]
            reserved, allocated = st["reserved_bytes.all.current"], st["allocated_bytes.all.current"]
            raise Fail(tr("with {text!r} the workload still runs out of memory at op {state_failed_op} (a "
                          "{state_request} request): {reserved} reserved, {allocated} allocated, "
                          "{reserved_allocated} reserved but unallocated",
                          text=text, state_failed_op=state['failed_op'], state_request=fmt(state['request']),
                          reserved=fmt(reserved), allocated=fmt(allocated),
                          reserved_allocated=fmt(reserved - allocated)),
                       tr("with your config a seeded variant of the workload still runs out of memory"))
        peak = state["stats"]["reserved_bytes.all.peak"]
        capacity = state["device"].info.total_memory - state["device"].info.context_reserve
        assert peak <= capacity
    return Case(label, judge, data=ops)


register(Exercise(
    id="lab4.config", pure=True, lab=4, title=later("choose_config(): the PYTORCH_CUDA_ALLOC_CONF that makes it "
                                                    "fit"),
    public=lambda: [_config_case(training_like_workload(), tr("the training-like workload on tiny-1gb"))],
    hidden=lambda rng: [_config_case(_seeded_workload(rng), tr("a seeded variant (other tensor sizes)")) for _ in range(2)],
    what=later("choose_config function"),
    nudge=(later("Which option stops the big cached blocks from being carved up by the medium requests?"),
           later("Chapter 4 tries the knobs on a workload like this one: which of them keeps a cached block "
                 "from serving a much smaller request, and which value lies between the medium and the big "
                 "sizes?")),
    hint=later("The medium buffers are carved out of cached big blocks (best fit splits them), and a split "
               "segment is never returned to the device. Either stop big blocks from being split for smaller "
               "requests (max_split_size_mb: blocks at least that big are never split and never handed to "
               "smaller requests; pick a value between the medium and the big sizes), or let the allocator grow "
               "one segment page by page and unmap free pages (expandable_segments:True)."),
))


# ------------------------------------------------------------------ the rules' edges and states
# Each is met by the hidden cases of every seed (make check-labs proves it): see spec.edges.
from .spec import Edge, edges  # noqa: E402

_DIAGNOSED: dict = {}


def _diagnosis_of(data) -> tuple:
    """(expected diagnosis, request, state) at the OOM of a case's (ops, config) (cached: every edge reads
    the same run)."""
    key = repr(data)
    if key not in _DIAGNOSED:
        state = run_until_oom(*data)
        _DIAGNOSED[key] = (expected_diagnosis(state), state["request"], state)
    return _DIAGNOSED[key]


def _usable(ops) -> int:
    expected, request, state = _diagnosis_of(ops)
    return expected["reserved_but_unallocated"] + state["device"].mem_get_info()[0]


edges("lab4.diagnose",
      Edge("fragmentation, the cached free bytes alone cover the request",
           lambda ops: _diagnosis_of(ops)[0]["reserved_but_unallocated"] >= _diagnosis_of(ops)[1]),
      Edge("fragmentation only when the device's free bytes count too",
           lambda ops: _diagnosis_of(ops)[0]["cause"] == "fragmentation"
           and _diagnosis_of(ops)[0]["reserved_but_unallocated"] < _diagnosis_of(ops)[1]),
      Edge("too much live memory", lambda ops: _diagnosis_of(ops)[0]["cause"] == "too much live memory"),
      Edge("free bytes exactly equal to the request (fragmentation: >= is not >)",
           lambda ops: _usable(ops) == _diagnosis_of(ops)[1]),
      Edge("the largest free block lies in a small-pool (2 MiB) segment",
           lambda d: _largest_free_segment_type(_diagnosis_of(d)[2]["snapshot"]) == "small"),
      Edge("a freed block still active at the OOM (held back while a pool is open): active is not allocated",
           lambda d: _diagnosis_of(d)[2]["stats"]["active_bytes.all.current"]
           != _diagnosis_of(d)[2]["stats"]["allocated_bytes.all.current"]),
      Edge("reserved-but-unallocated bytes that are not in inactive_split_bytes (expandable segments)",
           lambda d: _diagnosis_of(d)[0]["reserved_but_unallocated"]
           != _diagnosis_of(d)[2]["stats"]["inactive_split_bytes.all.current"]))

edges("lab4.config",
      Edge("a variant that runs out of memory with the default config", lambda ops: not run_until_oom(ops)["ok"]),
      Edge("a variant that fits with max_split_size_mb between the medium and the big size",
           lambda ops: run_until_oom(ops, "max_split_size_mb:41")["ok"]),
      Edge("a variant that fits with expandable_segments:True",
           lambda ops: run_until_oom(ops, "expandable_segments:True")["ok"]))


def _largest_free_segment_type(snapshot: dict):
    """'small' or 'large': the pool of the segment holding the largest free ('inactive') block."""
    best = max(((b["size"], seg["segment_type"]) for seg in snapshot["segments"] for b in seg["blocks"]
                if b["state"] == "inactive"), default=(0, None))
    return best[1]
