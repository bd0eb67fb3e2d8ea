"""Each of the three allocator classes holds only its own layer's methods (caching/layers.py).

A learner with CUDACachingAllocator.cpp open looks a method up in the map of its class and
finds the PyTorch member (DeviceCachingAllocator, NativeCachingAllocator) or the torch.cuda
function it stands for.  DeviceCachingAllocator may hold nothing but PyTorch's members, under
their names, in the .cpp's order.  A new method left out of its class's map fails here."""
from __future__ import annotations

import inspect

import pytest

from allocator_ref.caching import CachingAllocator, layers
from allocator_ref.caching.device_caching_allocator import DeviceCachingAllocator
from allocator_ref.caching.native import NativeCachingAllocator

from test_caching_twins import TWINS


def _methods(cls) -> list:
    """The class's own functions and properties, in definition order."""
    return [n for n, v in vars(cls).items() if inspect.isfunction(v) or isinstance(v, property)]


def snake(name: str) -> str:
    return "".join("_" + c.lower() if c.isupper() else c for c in name).replace("o_o_m", "oom")


@pytest.mark.parametrize("cls,table", [
    (DeviceCachingAllocator, layers.DEVICE),
    (NativeCachingAllocator, layers.NATIVE),
    (CachingAllocator, {**layers.TORCH_CUDA, **layers.OWN}),
], ids=["DeviceCachingAllocator", "NativeCachingAllocator", "CachingAllocator"])
def test_every_method_is_in_its_class_map(cls, table):
    missing = sorted(set(_methods(cls)) - set(table))
    assert not missing, f"{cls.__name__} methods its map in caching/layers.py does not list: {missing}"


def test_maps_name_only_methods_that_exist():
    stale = sorted(set(layers.DEVICE) - set(_methods(DeviceCachingAllocator)))
    stale += sorted(set(layers.NATIVE) - set(_methods(NativeCachingAllocator)))
    top = set(_methods(CachingAllocator))
    stale += sorted(n for n in layers.TORCH_CUDA if n not in top)
    assert not stale, f"layers.py names methods the classes do not have: {stale}"
    twice = sorted(set(layers.TORCH_CUDA) & {n for n in layers.OWN if n != "__init__"})
    assert not twice, f"CachingAllocator methods listed both as torch.cuda and as our own: {twice}"


def test_own_functions_are_module_functions_not_allocator_members():
    import allocator_ref.caching.capture_rules as capture_rules
    import allocator_ref.caching.expandable as expandable
    import allocator_ref.caching.private_pool as private_pool
    functions = {n for m in (capture_rules, expandable, private_pool) for n, v in vars(m).items()
                 if inspect.isfunction(v)}
    for name in layers.OWN:
        if name in vars(CachingAllocator):
            continue
        assert name in functions, f"OWN lists {name}: neither a CachingAllocator method nor a module function"
        assert name not in vars(DeviceCachingAllocator), f"{name} is our own helper, not a DeviceCachingAllocator member"


def test_device_caching_allocator_has_only_pytorchs_members():
    pytorch = set(layers.PYTORCH_DEVICE_MEMBERS) | set(layers.PYTORCH_2_11_DEVICE_MEMBERS)
    foreign = sorted(f"{ours} -> {theirs}" for ours, theirs in layers.DEVICE.items()
                     if ours != "__init__" and theirs not in pytorch)
    assert not foreign, f"DeviceCachingAllocator methods that are not PyTorch members: {foreign}"


def test_device_members_keep_pytorchs_name():
    """snake_case of PyTorch's camelCase, or PyTorch's own snake_case name."""
    renamed = sorted(f"{ours} <- {theirs}" for ours, theirs in layers.DEVICE.items()
                     if ours != "__init__" and snake(theirs) != ours)
    assert not renamed, f"DeviceCachingAllocator members under another name: {renamed}"


def test_the_member_list_is_pytorchs_62_and_at_least_45_are_mirrored():
    assert len(layers.PYTORCH_DEVICE_MEMBERS) == len(set(layers.PYTORCH_DEVICE_MEMBERS)) == 62
    mirrored = set(layers.DEVICE.values()) & set(layers.PYTORCH_DEVICE_MEMBERS)
    assert len(mirrored) >= 45, f"only {len(mirrored)} of PyTorch's 62 members: {sorted(mirrored)}"


def test_device_members_are_in_the_cpps_order():
    """Defined in the order of the .cpp (the 2.11 members PyTorch's list lacks are not placed)."""
    position = {snake(n): i for i, n in enumerate(layers.PYTORCH_DEVICE_MEMBERS)}
    ours = [n for n in _methods(DeviceCachingAllocator) if n in position]
    assert ours == sorted(ours, key=position.get), (
        "DeviceCachingAllocator's members are not in the .cpp's order: "
        f"{[n for n, m in zip(ours, sorted(ours, key=position.get)) if n != m]}")


def test_every_device_member_has_its_caller_checked_by_the_twins_test():
    unchecked = sorted(set(layers.DEVICE) - set(TWINS) - {"__init__"})
    assert not unchecked, f"DeviceCachingAllocator members without a caller check in TWINS: {unchecked}"


def test_the_layers_are_composed_not_inherited():
    for cls in (DeviceCachingAllocator, NativeCachingAllocator, CachingAllocator):
        assert cls.__mro__ == (cls, object), f"{cls.__name__} inherits: {cls.__mro__}"
