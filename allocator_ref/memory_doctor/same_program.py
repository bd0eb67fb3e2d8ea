"""Devices that recorded the same program: what-if replays made once per program, not per device.

DDP ranks with static shapes make the same allocations and frees, of the same sizes, on the same
streams, in the same order.  A what-if replay (``trace/whatif.py``'s ``anchored_replay``, the
runner) reads only

* the device's trace: each event's action, address, size and stream (``program_of``; the start
  state ``rebuild.infer_initial_state`` and the pools ``replay_pools.PoolRouter`` read the same
  events), and of a release's stack only whether it names ``empty_cache`` (``user_flushes``);
* the device's segments as dumped (the start state is rebuilt from them and the events);
* the recorded ``PYTORCH_CUDA_ALLOC_CONF`` and the design (the runner's ``Stage``), and the
  doctor's own arguments: the simulated GPU, ``device_memory``, whether remedies are tried.

``program_key`` digests exactly those, with every other field kept too (a newer PyTorch's field
counts until shown not to matter); only what a what-if never reads is left out: ``time_us``, the
stacks (but for the ``empty_cache`` mark), and a segment's ``device`` (the simulated device's
number only names it: ``SimDevice``).  Recorded addresses are in the key: the what-if restores the
start state and places new segments at PyTorch's addresses.  Two devices with one key replay the
same what-ifs to the same rows, so the doctor runs them once; each device is still verified on its
own (``diagnose``), and ``same_program`` checks the program read off its own verify replay.
"""
from __future__ import annotations

import hashlib
import pickle

from ..events import RELEASES

LEFT_OUT = frozenset(("time_us", "frames"))     # fields of an event no what-if reads
HEAD = ("action", "addr", "size", "stream")      # read by name: every event has them


def _key_order(e) -> tuple:
    """The event's field names in order (a compact record keeps one shared tuple: trace_record.py)."""
    keys = getattr(e, "_keys", None)
    return keys if keys is not None else tuple(e)


def program_key(device_recording, *arguments) -> str:
    """The digest of what a what-if replay of this device reads (see the module doc), with
    ``arguments`` (config, design, GPU, device_memory, remedies) added."""
    h = hashlib.sha256(pickle.dumps(arguments, protocol=4))
    named: dict = {}              # one answer per stack list: a big file shares them (trace_record.StackPool)
    others: dict = {}             # per key order: the fields beyond the four every event has
    batch = []
    for e in device_recording.raw:
        action = e["action"]
        keys = _key_order(e)
        extra = others.get(keys)
        if extra is None:
            extra = others[keys] = tuple(k for k in keys if k not in LEFT_OUT and k not in HEAD)
        fields = (keys, action, e.get("addr"), e.get("size"), e.get("stream")) + tuple(e[k] for k in extra)
        if action in RELEASES:    # whatif.user_flushes reads a release's stack for empty_cache
            frames = e.get("frames")
            mark = named.get(id(frames))
            if mark is None:
                mark = named[id(frames)] = any(f.get("name") == "empty_cache" for f in frames or ())
            fields += (mark,)
        batch.append(fields)
        if len(batch) == 4096:
            h.update(pickle.dumps(batch, protocol=4))
            batch = []
    h.update(pickle.dumps(batch, protocol=4))
    h.update(pickle.dumps([_segment_fields(s) for s in device_recording.segments], protocol=4))
    return h.hexdigest()


def _segment_fields(segment: dict) -> tuple:
    rest = tuple((k, v) for k, v in segment.items() if k not in ("device", "frames", "blocks"))
    blocks = tuple(tuple((k, v) for k, v in b.items() if k != "frames") for b in segment.get("blocks", ()))
    return rest + (("blocks", blocks),)


def program_digest(program) -> str:
    """The digest of a program read off a verify replay (``whatif.program_of``): two devices that
    share a key must share it too, or the follower gets its own what-ifs."""
    actions = [(a.kind, a.pos, a.addr, a.size, a.stream, a.deferred, a.segments, a.sample_at)
               for a in program.actions]
    return hashlib.sha256(pickle.dumps((actions, program.user_empty_caches, program.ladder_flushes,
                                        program.ooms), protocol=4)).hexdigest()


def groups(keys: dict) -> dict:
    """``{device: key}`` -> ``{leader: [followers]}``: each key's first device leads its group
    (the devices in the order given: the busiest first)."""
    leaders: dict = {}
    out: dict = {}
    for device, key in keys.items():
        lead = leaders.setdefault(key, device)
        out.setdefault(lead, [])
        if lead != device:
            out[lead].append(device)
    return out


def spans(devices: list) -> str:
    """``[1, 2, 3, 5]`` -> ``"1-3, 5"``: the followers named in one short line."""
    devices = sorted(devices)
    out, i = [], 0
    while i < len(devices):
        j = i
        while j + 1 < len(devices) and devices[j + 1] == devices[j] + 1:
            j += 1
        out.append(str(devices[i]) if i == j else f"{devices[i]}-{devices[j]}")
        i = j + 1
    return ", ".join(out)


__all__ = ["program_key", "program_digest", "groups", "spans"]
