"""Lab 1 -- measure it: cudaMalloc/cudaFree in a loop versus a cached allocation.

The learner writes ``measure(dev, nbytes, repeats, kernel_us) -> dict`` timing, on
the device's own clock (``dev.now_us()``: virtual on the SimDevice, wall clock on
a GPU), ``repeats`` iterations of "allocate, launch a kernel that uses the
buffer, free" done two ways: straight on the device (cudaMalloc/cudaFree) and
through a CachingAllocator.  It returns the host time per iteration of each and
their ratio.

The check runs it on a fresh SimDevice and judges behaviour, not only the
numbers: the device really saw ``repeats`` cudaMalloc calls and the kernels,
cudaFree really synchronised the device, and the figures match what the device's
clock gives for the same loop (the reference loop is timed now, on a fresh device
of the same profile).

``lab1.explain``: ``dominant_cost(dev, nbytes, kernel_us) -> "api" | "sync"``:
which part of the direct loop's time dominates -- the host time spent inside
cudaMalloc/cudaFree, or the waiting that cudaFree's implicit device-wide
synchronisation causes.  The expected answer is measured now from the
device's counters.
"""
from __future__ import annotations

import math

from ..editions.messages import translator
from .reference import CachingAllocator
from .check import Case, Exercise, Fail, MiB, fmt, lab_device, observed, register, same, show

tr = translator("labs")                  # what a learner reads, in the learner's language
later = translator("labs", later=True)  # marked now, said when shown (check.shown)


def reference_measure(dev, nbytes, repeats=20, kernel_us=100.0):
    t0 = dev.now_us()
    for _ in range(repeats):
        ptr = dev.malloc(nbytes)
        dev.fill(ptr, nbytes, 1)
        dev.sleep(None, kernel_us)
        dev.free(ptr)
    direct = (dev.now_us() - t0) / repeats
    dev.synchronize()
    alloc = CachingAllocator(dev)
    alloc.free(alloc.malloc(nbytes))              # warm the cache
    t0 = dev.now_us()
    for _ in range(repeats):
        buf = alloc.malloc(nbytes)
        dev.fill(buf.ptr, nbytes, 1)
        dev.sleep(None, kernel_us)
        alloc.free(buf)
    cached = (dev.now_us() - t0) / repeats
    dev.synchronize()
    alloc.close()
    return {"direct_us": direct, "cached_us": cached, "ratio": direct / cached}


def run_measure(fn, nbytes, repeats, kernel_us, profile) -> dict:
    """The runner (check.observed): the learner's measure on a fresh device; what the device saw, and
    what it returned (its figures, when they are numbers)."""
    dev = lab_device(profile)
    before = dev.counters.malloc_calls, dev.counters.implicit_syncs, dev.counters.kernels
    got = fn(dev, nbytes, repeats, kernel_us)
    seen = {"mallocs": dev.counters.malloc_calls - before[0], "syncs": dev.counters.implicit_syncs - before[1],
            "kernels": dev.counters.kernels - before[2], "shown": show(got), "figures": None}
    if type(got) is dict and {"direct_us", "cached_us", "ratio"} <= set(got):
        seen["figures"] = {key: got[key] if type(got[key]) in (int, float) else show(got[key])
                           for key in ("direct_us", "cached_us", "ratio")}
    return seen


def _measure_case(nbytes, repeats, kernel_us, profile, label):
    def judge(fn):
        seen = observed(fn, run_measure, nbytes, repeats, kernel_us, profile)
        got = seen["figures"]
        if got is None:
            raise Fail(tr("measure returned {got}; return a dict with direct_us, cached_us and ratio",
                          got=seen['shown']),
                       tr("measure did not return a dict with direct_us, cached_us and ratio"))
        mallocs, syncs, kernels = seen["mallocs"], seen["syncs"], seen["kernels"]
        if mallocs < repeats:
            raise Fail(tr("the device saw {mallocs} cudaMalloc call(s) for {repeats} repeats: the direct loop "
                          "must call dev.malloc and dev.free once per iteration (do not reuse one buffer)",
                          mallocs=mallocs, repeats=repeats),
                       tr("the device did not see one cudaMalloc per iteration of the direct loop"))
        if syncs < repeats:
            raise Fail(tr("only {syncs} cudaFree synchronisation(s) for {repeats} iterations: free each buffer "
                          "with dev.free inside the loop",
                          syncs=syncs, repeats=repeats),
                       tr("the direct loop did not cudaFree every buffer"))
        if kernels < 2 * repeats:
            raise Fail(tr("the device ran {kernels} kernel(s): each iteration of both loops must launch the "
                          "kernel that uses the buffer (dev.fill or dev.sleep)",
                          kernels=kernels),
                       tr("the loops did not launch a kernel per iteration"))
        # Measured after the learner's code ran (in a graded check, in another process than it).
        ref = reference_measure(lab_device(profile), nbytes, repeats, kernel_us)
        for key, words in (("direct_us", tr("host time per iteration of the cudaMalloc/cudaFree loop")),
                           ("cached_us", tr("host time per iteration of the caching-allocator loop"))):
            value = got[key]
            if type(value) not in (int, float) or not math.isclose(value, ref[key], rel_tol=0.15):
                raise Fail(tr("{key} = {value}, but the device's clock gives {measured:.2f} us for the same loop "
                              "({nbytes}, {repeats} repeats, {kernel_us:g} us kernels, {profile}): {words}, "
                              "measured with dev.now_us() before and after the loop, divided by repeats",
                              key=key, value=value if type(value) is str else repr(value), measured=ref[key],
                              nbytes=fmt(nbytes), repeats=repeats, kernel_us=kernel_us, profile=profile, words=words),
                           tr("{key} is not consistent with the device's clock for this loop",
                              key=key))
        ratio = got["ratio"]
        if type(ratio) not in (int, float) or not math.isclose(ratio, got["direct_us"] / got["cached_us"], rel_tol=0.01):
            raise Fail(tr("ratio = {value} is not direct_us / cached_us",
                          value=ratio if type(ratio) is str else repr(ratio)),
                       tr("ratio is not direct_us / cached_us"))
    return Case(label, judge, data=(nbytes, repeats, kernel_us, profile))


def _measure_public():
    return [_measure_case(4 * MiB, 20, 100.0, "h100-80gb", tr("4 MiB, 20 repeats, 100 us kernels, H100 profile")),
            _measure_case(64 * 1024, 10, 5.0, "t4-16gb", tr("64 KiB, 10 repeats, 5 us kernels, T4 profile"))]


def _measure_hidden(rng):
    # A small-pool size with short kernels, a large size with long kernels, then anything.
    sizes = [512 * rng.randint(1, 2048), rng.randint(2, 64) * MiB,
             rng.choice([512 * rng.randint(1, 2048), rng.randint(1, 64) * MiB])]
    kernels = [float(rng.choice([1, 10])), float(rng.choice([200, 1000])), float(rng.choice([1, 10, 50, 200, 1000]))]
    return [_measure_case(sizes[k], rng.randint(5, 30), kernels[k], rng.choice(["h100-80gb", "t4-16gb", "tiny-1gb"]),
                          tr("a seeded size, repeat count, kernel length and profile")) for k in range(3)]


register(Exercise(
    id="lab1.measure", observed=True, lab=1, title=later("measure(dev, nbytes, repeats, kernel_us): "
                                                         "cudaMalloc/cudaFree vs cached"),
    public=_measure_public, hidden=_measure_hidden, what=later("measure function"),
    nudge=(later("Which loop did the device not see, or which figure is not per iteration of the device's own "
                 "clock?"),
           later("Time each loop with the device's clock (dev.now_us()), not the host's, and divide by the "
                 "number of iterations: do both loops run the same two kernels on their buffer?")),
    hint=later("Loop 1: ptr = dev.malloc(nbytes); dev.fill(ptr, nbytes, 1); dev.sleep(None, kernel_us); "
               "dev.free(ptr). Loop 2 with alloc = CachingAllocator(dev) (warm it with one malloc/free first): "
               "buf = alloc.malloc(nbytes); the same two kernels on buf.ptr; alloc.free(buf). Time each loop "
               "with dev.now_us() and divide by repeats."),
))


# ------------------------------------------------------------------ explain
def expected_dominant(profile, nbytes, kernel_us) -> tuple:
    dev = lab_device(profile)
    api0, wait0 = dev.counters.api_time_us, dev.counters.implicit_sync_wait_us
    for _ in range(5):
        ptr = dev.malloc(nbytes)
        dev.fill(ptr, nbytes, 1)
        dev.sleep(None, kernel_us)
        dev.free(ptr)
    api = dev.counters.api_time_us - api0
    wait = dev.counters.implicit_sync_wait_us - wait0
    return ("sync" if wait > api else "api"), api, wait


def _explain_case(profile, nbytes, kernel_us, label):
    def judge(fn):
        expected, api, wait = expected_dominant(profile, nbytes, kernel_us)
        got = fn(lab_device(profile), nbytes, kernel_us)
        if not same(got, expected):
            raise Fail(tr("dominant_cost returned {got}, expected {expected!r}: in 5 iterations the host spent "
                          "{api:.1f} us inside API calls and {wait:.1f} us waiting in cudaFree's implicit "
                          "synchronisation ({nbytes}, {kernel_us:g} us kernels, {profile})",
                          got=show(got), expected=expected, api=api, wait=wait, nbytes=fmt(nbytes),
                          kernel_us=kernel_us, profile=profile),
                       tr("your answer differs from what the device's counters show for this loop"))
    return Case(label, judge, data=(profile, nbytes, kernel_us))


def _explain_hidden(rng) -> list:
    cases = [_explain_case(rng.choice(["h100-80gb", "t4-16gb"]), rng.randint(1, 256) * MiB,
                           float(rng.choice(kernels)), label)
             for kernels, label in (([0.5, 1, 2], tr("seeded size, short kernels")),
                                    ([1000, 2000, 5000], tr("seeded size, long kernels")),
                                    ([0.5, 2, 20, 100, 2000], tr("seeded size and kernel length")))]
    # The same kernel length on the same device: cudaMalloc's cost grows with the size, so a large
    # buffer's loop is dominated by the API time while a small one's waits in cudaFree.
    profile, kernel_us = rng.choice(["h100-80gb", "t4-16gb"]), float(rng.choice([200, 300, 400]))
    cases.append(_explain_case(profile, rng.randint(1, 8) * MiB, kernel_us, tr("a small buffer, mid-length kernels")))
    cases.append(_explain_case(profile, rng.randint(256, 512) * MiB, kernel_us,
                               tr("a large buffer, the same kernels")))
    return cases


register(Exercise(
    id="lab1.explain", pure=True, lab=1, title=later("dominant_cost(dev, nbytes, kernel_us): API time or "
                                                     "cudaFree's sync?"),
    public=lambda: [_explain_case("h100-80gb", 4 * MiB, 500.0, tr("4 MiB, 500 us kernels")),
                    _explain_case("h100-80gb", 4 * MiB, 1.0, tr("4 MiB, 1 us kernels"))],
    # Kernel lengths from both sides of the balance (short: API time wins; long: the wait wins),
    # so an answer that is always the same, or measured where the wait is not counted, fails here too;
    # and one kernel length with two buffer sizes whose answers differ, so a rule on the kernel length
    # alone (one that never runs the loop) fails too.
    hidden=lambda rng: _explain_hidden(rng),
    what=later("dominant_cost function"),
    nudge=(later("Run the direct loop as the lab describes it (no extra synchronize) and look where the host's "
                 "time goes: inside the API calls, or waiting in cudaFree."),
           later("Read dev.counters before and after the loop: which of the two host-time counters grew more?")),
    hint=later("Run the direct loop a few times on dev and compare dev.counters.api_time_us (host time inside "
               "API calls) with dev.counters.implicit_sync_wait_us (host time waiting for the streams in "
               "cudaFree); read both before and after. Return 'sync' when the waiting is larger, else 'api'."),
))


# ------------------------------------------------------------------ the rules' edges and states
# Each is met by the hidden cases of every seed (make check-labs proves it): see spec.edges.
from .spec import Edge, edges  # noqa: E402

edges("lab1.measure",
      Edge("a small-pool size (at most 1 MiB) with short kernels (10 us or less)",
           lambda d: d[0] <= MiB and d[2] <= 10),
      Edge("a large size (over 1 MiB) with long kernels (200 us or more)", lambda d: d[0] > MiB and d[2] >= 200))

edges("lab1.explain",
      Edge("a loop where the API time is larger (short kernels)", lambda d: expected_dominant(*d)[0] == "api"),
      Edge("a loop where cudaFree's wait is larger (long kernels)", lambda d: expected_dominant(*d)[0] == "sync"),
      Edge("a mid-length kernel (200 to 400 us) where the API time is larger (a large buffer)",
           lambda d: 200 <= d[2] <= 400 and expected_dominant(*d)[0] == "api"),
      Edge("a mid-length kernel (200 to 400 us) where the wait is larger (a small buffer)",
           lambda d: 200 <= d[2] <= 400 and expected_dominant(*d)[0] == "sync"))
