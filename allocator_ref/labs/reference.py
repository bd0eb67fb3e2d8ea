"""Private copies of the reference allocator, taken when the labs are imported.

A learner experimenting in a notebook may patch the course's own code,
``DeviceCachingAllocator.should_split = my_should_split`` or
``allocator_ref.caching.device_caching_allocator.round_size = ...``, and forget it.  If the
checks asked the patched class for the expected answer, a wrong solution would
be compared with itself and pass.  So the checks take their reference from
copies made here, once, when ``allocator_ref.labs`` is first imported (the first
cell of every lab notebook): every method of :class:`CachingAllocator` and of the two
layers it builds (``NativeCachingAllocator``, ``DeviceCachingAllocator``) is re-created
with a frozen copy of its module's globals, so a later patch of a class *or* of a
module-level function does not reach them; the private CachingAllocator builds the
private layers.

This is a guard against accidents, not a sandbox: code that means to cheat can
always reach the checker itself.  Nor does it copy the objects the reference
shares with the learner's code: a patched ``AllocatorConfig.divisions_for``
reaches the reference through the config both are handed.  A graded check
(``check(..., graded=True)``) does not rely on this file: it computes every
expected value in a clean process (``apart.py``).
"""
from __future__ import annotations

import types
from typing import Any

from ..caching import CachingAllocator as _Live
from ..caching import config as _config
from ..caching.device_caching_allocator import DeviceCachingAllocator as _LiveDevice
from ..caching.native import NativeCachingAllocator as _LiveNative

_FROZEN_GLOBALS: dict[int, dict] = {}


def _frozen_function(fn: types.FunctionType) -> types.FunctionType:
    key = id(fn.__globals__)
    if key not in _FROZEN_GLOBALS:
        _FROZEN_GLOBALS[key] = dict(fn.__globals__)          # the module's names as they are now
    copy = types.FunctionType(fn.__code__, _FROZEN_GLOBALS[key], fn.__name__, fn.__defaults__, fn.__closure__)
    copy.__kwdefaults__ = fn.__kwdefaults__
    copy.__doc__, copy.__qualname__, copy.__module__ = fn.__doc__, fn.__qualname__, fn.__module__
    copy.__dict__.update(fn.__dict__)
    return copy


def _frozen(value: Any) -> Any:
    if isinstance(value, types.FunctionType):
        return _frozen_function(value)
    if isinstance(value, staticmethod):
        return staticmethod(_frozen(value.__func__))
    if isinstance(value, classmethod):
        return classmethod(_frozen(value.__func__))
    if isinstance(value, property):
        return property(*(_frozen(f) if f is not None else None for f in (value.fget, value.fset, value.fdel)),
                        value.__doc__)
    return value


def _private_class(cls: type) -> type:
    """A subclass of ``cls`` that defines every method of ``cls`` and its bases itself, frozen now."""
    namespace: dict[str, Any] = {}
    for klass in reversed(cls.__mro__[:-1]):
        for name, value in vars(klass).items():
            if name not in ("__dict__", "__weakref__", "__module__", "__qualname__"):
                namespace[name] = _frozen(value)
    namespace["__doc__"] = f"The reference {cls.__name__}, frozen when the labs were imported."
    return type(f"Reference{cls.__name__}", (cls,), namespace)


CachingAllocator = _private_class(_Live)
DeviceCachingAllocator = _private_class(_LiveDevice)
NativeCachingAllocator = _private_class(_LiveNative)
# The frozen globals still name the live layers, and so do class attributes copied by value
# (CachingAllocator.device_allocator_class, which it builds its DeviceCachingAllocator from): point
# both at the private copies, so the private CachingAllocator builds a private NativeCachingAllocator
# and DeviceCachingAllocator.
_PRIVATE = {_LiveDevice: DeviceCachingAllocator, _LiveNative: NativeCachingAllocator}
for _globals in _FROZEN_GLOBALS.values():
    for _name, _value in list(_globals.items()):
        if isinstance(_value, type) and _value in _PRIVATE:
            _globals[_name] = _PRIVATE[_value]
for _private in (CachingAllocator, DeviceCachingAllocator, NativeCachingAllocator):
    for _name, _value in list(vars(_private).items()):
        if isinstance(_value, type) and _value in _PRIVATE:
            setattr(_private, _name, _PRIVATE[_value])
round_size = _frozen_function(_config.round_size)
get_allocation_size = _frozen_function(_config.get_allocation_size)

__all__ = ["CachingAllocator", "DeviceCachingAllocator", "NativeCachingAllocator", "round_size",
           "get_allocation_size"]
