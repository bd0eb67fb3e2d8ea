"""Every device capability the allocators probe with getattr / hasattr is declared in device/protocol.py.

A device that lacks an optional call (capture, a destroyed flag on its streams) is still a device:
the allocator asks before it calls.  But a probe for a name that no protocol declares is a
capability nobody can find when writing a new device.  So the probes are read from caching/'s
source (``getattr(<x>.device | stream..., "name"...)``, ``hasattr(...)``) and each name must be a
member of ``Device``, ``Stream``, ``DestroyableStream`` or ``CaptureDevice``."""
from __future__ import annotations

import ast
import re
from pathlib import Path

from allocator_ref.device import protocol
from allocator_ref.device.sim import SimDevice

CACHING = Path(__file__).resolve().parents[1] / "allocator_ref" / "caching"


def _declared() -> set:
    names = set()
    for proto in (protocol.Device, protocol.Stream, protocol.DestroyableStream, protocol.CaptureDevice):
        names |= {n for n in dir(proto) if not n.startswith("_")}
        names |= set(getattr(proto, "__annotations__", {}))
    return names


def _probes():
    """(file, name) for getattr/hasattr on something named device or stream."""
    for path in sorted(CACHING.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id in ("getattr", "hasattr") and len(node.args) >= 2):
                continue
            target, name = node.args[0], node.args[1]
            text = ast.unparse(target)
            # \bdevice\b: a device (self.device, p.device), not the DeviceCachingAllocator a MemPool
            # asks its allocator for (allocator.device_allocator is no device capability)
            if isinstance(name, ast.Constant) and (re.search(r"\bdevice\b", text)
                                                   or text in ("stream", "s", "self.stream")):
                yield path.name, name.value


def test_caching_probes_device_capabilities():
    probes = set(_probes())
    # the three kinds the issue names are probed today: a destroyed stream, capture
    assert {n for _, n in probes} >= {"destroyed", "capture_info", "is_capturing", "begin_capture"}


def test_every_probed_capability_is_declared():
    declared = _declared()
    missing = sorted(f"{f}: {n}" for f, n in _probes() if n not in declared)
    assert not missing, "probed but not declared in device/protocol.py:\n" + "\n".join(missing)


def test_the_simulated_device_has_every_optional_capability():
    dev = SimDevice("tiny-1gb")
    assert isinstance(dev, protocol.CaptureDevice)
    assert isinstance(dev.create_stream(), protocol.DestroyableStream)
    assert all(callable(getattr(dev, name)) for name in protocol.VMM_CALLS)
    dev.close()
