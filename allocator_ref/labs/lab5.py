"""Lab 5 -- grow it: a growable buffer from the raw VMM calls (reserve once, map pages on demand).

The learner writes a class ``Buffer(dev, max_size)`` with ``ptr``, ``grow(nbytes)`` and
``close()``, using only the device's VMM calls (``vmm_granularity``, ``address_reserve``,
``mem_create``, ``mem_map``, ``mem_set_access``, ``mem_unmap``, ``mem_release``,
``address_free``).  The check runs it on a fresh SimDevice that logs every VMM call and judges
what happened, step by step, against the reference :class:`allocator_ref.vmm.GrowableBuffer`
run now on another fresh device with the same granularity:

* ``__init__`` reserves one range (at least ``max_size``) and creates no memory;
* after each ``grow(n)``: the address did not move; the bytes mapped in the range are exactly the
  pages needed (``n`` rounded up to the granularity, never less than before); the physical memory
  the device holds equals what is mapped (no orphaned handle); nothing already mapped was unmapped
  or created again; no more VMM calls than the reference made; the new pages are writable (access
  granted); the bytes written before the growth read back intact; writing one byte past the mapped
  end fails on the device;
* ``grow`` past the reservation raises and leaves the device as it was (no leaked handle);
* after ``close()`` the device's free memory (``mem_get_info``) is back where it started and no
  handle, mapping or reservation is left.

Hidden cases draw ``max_size``, the growth sequence, the device profile and the granularity
(2 or 4 MiB: never hard-code 2 MiB) from the seed.
"""
from __future__ import annotations

import random
from dataclasses import replace

from ..editions.messages import translator
from ..device import CudaError
from ..device.sim import SimDevice
from ..vmm import GrowableBuffer
from .check import Case, Exercise, Fail, MiB, fmt, observed, register
from .guard import show

tr = translator("labs")                  # what a learner reads, in the learner's language
later = translator("labs", later=True)  # marked now, said when shown (check.shown)

VMM_CALLS = ("address_reserve", "address_free", "mem_create", "mem_release", "mem_map", "mem_unmap",
             "mem_set_access")


class VmmLogDevice(SimDevice):
    """A fresh SimDevice that logs every successful VMM call as ``(name, args, result)``."""

    def __init__(self, profile: str = "h100-80gb", granularity: int = 0) -> None:
        super().__init__(profile)
        if granularity:
            self.info = replace(self.info, vmm_granularity=granularity)
        self.log: list = []


def _logged(name):
    real = getattr(SimDevice, name)

    def call(self, *args, **kwargs):
        result = real(self, *args, **kwargs)
        self.log.append((name, args + tuple(kwargs.values()), result))
        return result
    call.__name__ = name
    call.__doc__ = real.__doc__
    return call


for _name in VMM_CALLS:
    setattr(VmmLogDevice, _name, _logged(_name))


def _pages(n: int, g: int) -> int:
    return -(-n // g) * g


def _mapped_in(dev, ptr: int, size: int) -> int:
    return sum(m.size for m in dev._pages.overlapping(ptr, size) if m.kind == "vmm")


def _reference_steps(profile: str, g: int, max_size: int, grows: list) -> list:
    """[(mapped after grow, VMM calls of that grow)] by the reference GrowableBuffer, measured now."""
    dev = VmmLogDevice(profile, g)
    ref = GrowableBuffer(dev, max_size)
    steps = []
    for n in grows:
        before = dev.counters.vmm_calls
        ref.reserve(n)
        steps.append((ref.mapped, dev.counters.vmm_calls - before))
    ref.close()
    return steps


def _calls(log, names):
    return [c for c in log if c[0] in names]


class _Stop(Exception):
    """A wrong behaviour the runner saw at one stage of one step (it needs no expected value)."""

    def __init__(self, stage: str, message: str, safe: str) -> None:
        super().__init__(message)
        self.stage, self.message, self.safe = stage, message, safe


def run_buffer(cls, max_size: int, grows: list, profile: str, g: int, data_seed: int) -> dict:
    """The runner (check.observed): the learner's class on a fresh device that logs every VMM call.

    It returns, per grow, what the device saw (``steps``), and the first wrong behaviour it saw with no
    expected value needed (``stop``: the step, the stage of that step and the explanation), or None.
    ``judge_buffer`` reads them in order next to the reference's steps."""
    if not isinstance(cls, type):
        raise Fail(tr("check() needs your class itself (e.g. check('lab5.growable_buffer', Buffer)), got "
                      "{cls_type}",
                      cls_type=type(cls).__name__),
                   tr("check() needs your class itself"))
    dev = VmmLogDevice(profile, g)
    g = dev.vmm_granularity()
    rng = random.Random(data_seed)
    where = tr("max_size {max_size}, granularity {g}, grows {grows}",
               max_size=fmt(max_size), g=fmt(g), grows=[fmt(n) for n in grows])
    free0 = dev.mem_get_info()[0]

    buf = cls(dev, max_size)
    reserves = _calls(dev.log, ("address_reserve",))
    if len(reserves) != 1:
        raise Fail(tr("__init__ must reserve one virtual range with dev.address_reserve; it made {reserves} "
                      "reservation(s) ({where})",
                      reserves=len(reserves), where=where),
                   tr("__init__ did not reserve exactly one virtual range"))
    _, (reserved, *_), start = reserves[0]
    if reserved < max_size:
        raise Fail(tr("__init__ reserved {reserved} of addresses for max_size {max_size}: reserve max_size "
                      "rounded up to the granularity ({pages_max_size_g})",
                      reserved=fmt(reserved), max_size=fmt(max_size), pages_max_size_g=fmt(_pages(max_size, g))),
                   tr("__init__ reserved fewer addresses than max_size"))
    created = sum(c[1][0] for c in _calls(dev.log, ("mem_create",)))
    if created or _mapped_in(dev, start, reserved):
        raise Fail(tr("__init__ mapped the whole range up front: it created {created} of physical memory before "
                      "any grow() asked for it ({where}). Reserving addresses costs no memory; create and map "
                      "pages only when grow() needs them.",
                      created=fmt(created), where=where),
                   tr("__init__ mapped the whole range up front (created physical memory before any grow())"))
    if getattr(buf, "ptr", None) != start:
        raise Fail(tr("buf.ptr is {ptr}; it must be the start of your reservation ({start:#x}, "
                      "what dev.address_reserve returned)",
                      ptr=show(getattr(buf, 'ptr', None)), start=start),
                   tr("buf.ptr is not the start of the reservation"))

    steps: list = []
    seen = {"reserved": reserved, "steps": steps, "stop": None}
    shadow = bytearray()                     # what the buffer must hold
    try:
        for n in grows:
            mark = len(dev.log)
            calls0 = dev.counters.vmm_calls
            buf.grow(n)
            new = dev.log[mark:]
            step = tr("grow({n}) after {len_shadow} in use ({where})",
                      n=fmt(n), len_shadow=fmt(len(shadow)), where=where)
            now = _mapped_in(dev, start, reserved)
            held = dev.vmm_physical_bytes()
            steps.append({"step": step, "undone": len(_calls(new, ("mem_unmap", "mem_release"))),
                          "made": sum(c[1][0] for c in _calls(new, ("mem_create",))), "held": held, "now": now,
                          "used": dev.counters.vmm_calls - calls0})
            if buf.ptr != start or _calls(new, ("address_reserve", "address_free")):
                raise _Stop("moved", tr("{step}: the address changed (or the range was reserved again). A "
                                        "growable buffer keeps its one reservation: only map pages at its end.",
                                        step=step),
                            tr("the buffer's address changed while growing"))
            if held != now:
                raise _Stop("mapped", tr("{step}: the device holds {held} of physical memory but only {now} is "
                                         "mapped: a handle was created and never mapped (or never released)",
                                         step=step, held=fmt(held), now=fmt(now)),
                            tr("physical memory was created that is not mapped (a leaked handle)"))
            # The new bytes become usable: write them (fails on pages without access rights).
            extra = rng.randbytes(max(0, n - len(shadow)))
            if extra:
                try:
                    dev.write(start + len(shadow), extra)
                except CudaError as e:
                    grant = tr(" Call dev.mem_set_access(ptr, size) after dev.mem_map.") if "access" in str(e) else ""
                    raise _Stop("used", tr("{step}: writing the new bytes failed: {e}.{grant}",
                                           step=step, e=e, grant=grant),
                                tr("the new bytes cannot be written") +
                                (" (mapped without mem_set_access)" if grant else "")) from None
                shadow += extra
            got = dev.read(start, len(shadow)) if shadow else b""
            if got != bytes(shadow):
                i = next(k for k in range(len(shadow)) if got[k] != shadow[k])
                raise _Stop("used", tr("{step}: byte {i} changed (0x{shadow_i:02X} was written, 0x{got_i:02X} "
                                       "reads back): the bytes written before a growth must stay where they are",
                                       step=step, i=i, shadow_i=shadow[i], got_i=got[i]),
                            tr("bytes written before the growth were lost"))
            if now < reserved:
                try:
                    dev.write(start + now, b"\x01")
                except CudaError:
                    pass
                else:
                    raise _Stop("used", tr("{step}: writing one byte past the mapped end ({now}) succeeded: only "
                                           "mapped pages may be usable",
                                           step=step, now=fmt(now)), tr("writing past the mapped end succeeded"))
        mapped = _mapped_in(dev, start, reserved)

        # Misuse: growing past the reservation must raise and change nothing on the device.
        mark = len(dev.log)
        held = dev.vmm_physical_bytes()
        try:
            buf.grow(reserved + 1)
        except Exception:
            pass
        else:
            raise _Stop("end", tr("grow({reserved} + 1 B) past the {reserved} reservation returned without an "
                                  "error ({where}): it must raise (e.g. ValueError)",
                                  reserved=fmt(reserved), where=where),
                        tr("growing past the reservation did not raise"))
        if dev.vmm_physical_bytes() != held or _mapped_in(dev, start, reserved) != mapped:
            creates = len(_calls(dev.log[mark:], ("mem_create",)))
            raise _Stop("end", tr("grow({reserved} + 1 B) past the {reserved} reservation raised but leaked "
                                  "physical memory: the device now holds {value} more than before it ({creates} "
                                  "mem_create call(s) before the error; {where}). Check the size (and raise "
                                  "ValueError) before any device call.",
                                  reserved=fmt(reserved), value=fmt(dev.vmm_physical_bytes() - held),
                                  creates=creates, where=where),
                        tr("growing past the reservation raised but leaked physical memory"))

        buf.close()
        free1 = dev.mem_get_info()[0]
        left = []
        if dev._handles or dev._dying:
            left.append(f"{len(dev._handles) + len(dev._dying)} physical handle(s) (mem_release)")
        if dev._pages.overlapping(start, reserved):
            left.append("mappings (mem_unmap)")
        if dev._reservations:
            left.append(f"{len(dev._reservations)} reservation(s) (address_free)")
        if free1 != free0 or left:
            raise _Stop("end", tr("leak after close(): mem_get_info reports {missing} less free memory than "
                                  "before the buffer ({where}); still held: {held}. close() must "
                                  "unmap every page, release every handle and free the range.",
                                  missing=fmt(free0 - free1), where=where,
                                  held=', '.join(left) or 'memory'),
                        tr("leak after close(): the device did not get everything back"))
    except _Stop as stop:
        seen["stop"] = {"at": len(steps) - 1 if stop.stage != "end" else len(steps), "stage": stop.stage,
                        "message": stop.message, "safe": stop.safe}
    return seen


def judge_buffer(cls, max_size: int, grows: list, profile: str, g: int, data_seed: int) -> None:
    seen = observed(cls, run_buffer, max_size, grows, profile, g, data_seed)
    stop, reserved = seen["stop"], seen["reserved"]

    def stopped(at: int, stage: str) -> None:
        if stop is not None and stop["at"] == at and stop["stage"] == stage:
            raise Fail(stop["message"], stop["safe"])

    # The reference's steps: measured after the learner's code ran (in a graded check, in another process).
    g = VmmLogDevice(profile, g).vmm_granularity()
    expected = _reference_steps(profile, g, max_size, grows)
    mapped = 0
    for i, (n, (ref_mapped, ref_calls)) in enumerate(zip(grows, expected)):
        if i >= len(seen["steps"]):
            break
        rec = seen["steps"][i]
        step, now, held, made = rec["step"], rec["now"], rec["held"], rec["made"]
        stopped(i, "moved")
        if rec["undone"] or made > ref_mapped - mapped:
            leaked = held - now
            leak = (tr(" The old handles were never released: a leak of {leaked} (the device still holds "
                       "{held} of physical memory for {mapped} mapped).", leaked=fmt(leaked), held=fmt(held),
                       mapped=fmt(now)) if leaked > 0 else "")
            raise Fail(tr("{step}: re-created pages that were already mapped: it created {made} of physical "
                          "memory (mem_create) and unmapped {unmaps} time(s), but only {missing} "
                          "of new pages were missing.{leak} Keep the pages you have; map new ones after them.",
                          step=step, made=fmt(made), unmaps=rec['undone'],
                          missing=fmt(ref_mapped - mapped), leak=leak),
                       tr("grow() re-created pages that were already mapped and leaked the old handles "
                          "(never released)") if leaked > 0 else tr("grow() re-created pages that were already mapped"))
        if now != ref_mapped:
            more = now > ref_mapped
            why = (tr("the pages already mapped") if ref_mapped == mapped
                   else tr("{size} rounded up to {page} pages", size=fmt(n), page=fmt(g)))
            raise Fail(tr("{step}: {mapped} is mapped in your range; it needs exactly {needed} ({why})",
                          step=step, mapped=fmt(now), needed=fmt(ref_mapped), why=why)
                       + (tr(": map only the pages grow() needs") if more else ""),
                       tr("grow() mapped more pages than needed") if more else tr("grow() mapped fewer pages than needed"))
        stopped(i, "mapped")
        if rec["used"] > ref_calls:
            raise Fail(tr("{step}: {calls} VMM calls; the reference makes {ref_calls} (create, map and grant "
                          "each new page once, nothing for pages already mapped)",
                          step=step, calls=rec['used'], ref_calls=ref_calls),
                       tr("grow() made more VMM calls than needed"))
        stopped(i, "used")
        mapped = now
    stopped(len(seen["steps"]), "end")


PUBLIC = [
    # (max_size, grows, profile, granularity, data seed, label)
    (64 * MiB, [3 * MiB, 3 * MiB + 1, 9 * MiB], "h100-80gb", 0, 1,
     later("64 MiB range; grow to 3 MiB, by one byte, to 9 MiB")),
    (16 * MiB, [1, 2 * MiB, 2 * MiB + 100, 16 * MiB], "tiny-1gb", 0, 2,
     later("16 MiB range grown to the full reservation")),
    (40 * MiB, [10 * MiB, 5 * MiB, 13 * MiB], "h100-80gb", 4 * MiB, 3,
     later("granularity 4 MiB; a smaller grow maps nothing")),
]


def _cases(rng=None):
    if rng is None:
        specs = PUBLIC
    else:
        specs = []
        for k in range(3):
            # k=0 a 4 MiB granularity; k=2 a max_size that is not a multiple of it
            g = 4 * MiB if k == 0 else rng.choice([2 * MiB, 2 * MiB, 4 * MiB])
            max_size = rng.randint(4 * MiB, 48 * MiB)
            if k == 2:
                max_size = max_size // g * g + rng.randint(1, g - 1)
            reserved = _pages(max_size, g)
            grows, n = [], 0
            for _ in range(rng.randint(2, 5)):
                n = min(reserved, n + rng.choice([1, rng.randint(1, g), rng.randint(g, 3 * g)]))
                grows.append(n if rng.random() < 0.85 else max(1, n // 2))
            if k == 0:                           # one byte past a page, then a grow that maps nothing
                grows += [grows[-1] // g * g + 1 if grows[-1] // g * g + 1 <= reserved else reserved,
                          max(1, grows[-1] // 2)]
            if k == 1:                           # the whole reservation
                grows.append(reserved)
            specs.append((max_size, grows, rng.choice(["h100-80gb", "t4-16gb", "tiny-1gb"]), g,
                          rng.randrange(1 << 30), tr("seeded growth sequence ({grows} grows)",
                                                     grows=len(grows))))
    return [Case(s[5], (lambda cls, s=s: judge_buffer(cls, *s[:5])), data=s[:5]) for s in specs]


register(Exercise(
    id="lab5.growable_buffer", observed=True, lab=5,
    title=later("a growable buffer: reserve once, map pages on demand, release everything"),
    public=lambda: _cases(), hidden=lambda rng: _cases(rng), what=later("class"),
    nudge=(later("Compare the step named above with the reference: which VMM call is missing, extra, or made with "
                 "the wrong size?"),
           later("A page is made usable in three calls and given back in two: count how many pages a grow to "
                 "that size needs, and which of those pages you already have.")),
    hint=later("__init__: g = dev.vmm_granularity(); reserve max_size rounded up to g with dev.address_reserve "
               "(no memory yet). grow(n): for each missing page i (from len(self.handles) up to ceil(n / g)): h "
               "= dev.mem_create(g); dev.mem_map(ptr + i*g, g, h); dev.mem_set_access(ptr + i*g, g); keep h. "
               "Raise ValueError before any device call when n is past the reservation. close(): mem_unmap and "
               "mem_release every page, then address_free(ptr, reserved)."),
))


# ------------------------------------------------------------------ the rules' edges and states
# Each is met by the hidden cases of every seed (make check-labs proves it): see spec.edges.
from .spec import Edge, edges  # noqa: E402


def _mapped_after(grows, g):
    pages, out = 0, []
    for n in grows:
        pages = max(pages, -(-n // g))
        out.append(pages)
    return out


edges("lab5.growable_buffer",
      Edge("a granularity other than 2 MiB", lambda d: d[3] not in (0, 2 * MiB)),
      Edge("a max_size that is not a multiple of the granularity", lambda d: d[3] and d[0] % d[3] != 0),
      Edge("a grow one byte past a page boundary (one more page)", lambda d: any(n % d[3] == 1 for n in d[1])),
      Edge("a grow that needs no new page (at or below what is mapped)",
           lambda d: any(b == a for a, b in zip(_mapped_after(d[1], d[3]), _mapped_after(d[1], d[3])[1:]))),
      Edge("a grow to the whole reservation", lambda d: _pages(d[0], d[3]) in d[1]))
