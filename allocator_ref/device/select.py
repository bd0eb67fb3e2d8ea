"""``open_device()``: pick the simulated or the real device, and say why.

The choice comes from the ``kind`` argument, else the course setting ``device``
(``ALLOCATOR_REF_DEVICE`` or ``course-settings.toml``, see ``allocator_ref.settings``;
``sim``, ``cuda`` or ``auto``; default ``auto``):

* ``auto`` -- a CudaDevice when the NVIDIA driver loads and reports a GPU,
  otherwise a SimDevice;
* ``sim``  -- always the simulated device, with the profile from ``profile``
  or the course setting ``profile`` (``ALLOCATOR_REF_PROFILE``; default ``h100-80gb``);
* ``cuda`` -- the real GPU, or a CudaError telling you to use ``sim``.

It prints one line saying what it picked and why, so the first cell of every
notebook shows whether its numbers are measured or simulated.
"""
from __future__ import annotations

from typing import Optional

from .. import settings
from ..editions.messages import translator
from .costs import load_profile, profile_names
from .errors import cuda_error

KINDS = ("auto", "sim", "cuda")
DEFAULT_PROFILE = settings.SETTINGS["profile"][1]
tr = translator("doctor")          # the line every chapter's first cell prints, in the edition's language


def reason_words(reason: str) -> str:
    """``probe_cuda``'s reason for no GPU, in the reader's language (the reason itself stays English:
    code tests it, e.g. ``"no GPU" in reason``)."""
    known = {"no NVIDIA driver found": tr("no NVIDIA driver found"),
             "the NVIDIA driver reports no GPU": tr("the NVIDIA driver reports no GPU")}
    return known.get(reason, reason)


def _kind(kind: Optional[str]) -> tuple[str, str]:
    """(kind, where it came from); a malformed value raises ValueError."""
    source = "argument"
    if kind is None:
        setting = settings.get("device")
        kind, source = setting.value, setting.source
    value = kind.strip().lower() if isinstance(kind, str) else kind
    if value not in KINDS:
        raise ValueError(f"{source}={kind!r} is not a device kind; use one of {', '.join(KINDS)}")
    return value, source


def _profile(profile: Optional[str]) -> str:
    if profile is None:                # the course setting: a bad name is the settings error, naming it
        setting = settings.get("profile")
        if setting.value not in profile_names():
            raise settings.bad(setting, f"is not a device profile; choose one of {profile_names()}")
        profile = setting.value
    load_profile(profile)              # ValueError naming the known profiles
    return profile


def open_device(kind: Optional[str] = None, profile: Optional[str] = None, index: int = 0):
    """Open the device the course runs on (see the module docstring)."""
    from .cuda import probe_cuda
    from .sim import SimDevice

    kind, source = _kind(kind)
    name = _profile(profile)
    if kind == "sim":
        dev = SimDevice(name)
        print(tr("allocator_ref: using SimDevice '{name}' (simulated: {source} asked for sim)", name=name,
                 source=source))
        return dev
    found, reason = probe_cuda()
    if found:
        from .cuda import CudaDevice
        dev = CudaDevice(index)
        print(tr("allocator_ref: using CudaDevice {index} '{name}' (real GPU, driver {driver}; {source}={kind})",
                 index=index, name=dev.info.name, driver=dev.info.driver_version, source=source, kind=kind))
        return dev
    if kind == "cuda":
        code = "cudaErrorNoDevice" if "no GPU" in reason else "cudaErrorInsufficientDriver"
        raise cuda_error(code, f"{source}=cuda but {reason}. Use the simulated device: "
                               "ALLOCATOR_REF_DEVICE=sim (or open_device('sim'))")
    dev = SimDevice(name)
    print(tr("allocator_ref: using SimDevice '{name}' (simulated: {reason})", name=name, reason=reason_words(reason)))
    return dev
