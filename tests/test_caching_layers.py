"""Every CachingAllocator method says which of PyTorch's layers it mirrors (caching/layers.py).

A learner with CUDACachingAllocator.cpp open looks a method up in the map and finds the class
(DeviceCachingAllocator, NativeCachingAllocator) or the torch.cuda function it stands for.  A new
method left out of the map, or a name listed twice, fails here."""
from __future__ import annotations

import inspect

from allocator_ref.caching import CachingAllocator, layers

from test_caching_twins import TWINS


def _methods() -> set:
    return {n for n, v in vars(CachingAllocator).items() if inspect.isfunction(v)}


def test_every_method_is_in_exactly_one_layer():
    maps = {"DEVICE": set(layers.DEVICE), "NATIVE": set(layers.NATIVE),
            "TORCH_CUDA": set(layers.TORCH_CUDA), "OWN": set(layers.OWN)}
    seen: dict = {}
    for layer, names in maps.items():
        for name in names:
            seen.setdefault(name, []).append(layer)
    twice = sorted(f"{n}: {ls}" for n, ls in seen.items() if len(ls) > 1)
    assert not twice, f"listed in two layers: {twice}"
    missing = sorted(_methods() - set(seen))
    assert not missing, f"methods no layer claims (add each to caching/layers.py): {missing}"
    stale = sorted(set(seen) - _methods())
    assert not stale, f"layers.py names methods CachingAllocator does not have: {stale}"


def test_device_members_keep_pytorchs_name():
    """snake_case of PyTorch's camelCase, or PyTorch's own snake_case name (segments is snapshot)."""
    def snake(name: str) -> str:
        return "".join("_" + c.lower() if c.isupper() else c for c in name).replace("o_o_m", "oom")
    renamed = sorted(f"{ours} <- {theirs}" for ours, theirs in layers.DEVICE.items()
                     if snake(theirs) != ours and ours != "segments")
    assert not renamed, f"DeviceCachingAllocator members under another name: {renamed}"


def test_device_members_called_inside_the_allocator_are_checked_by_the_twins_test():
    """Each DeviceCachingAllocator member that another member calls has its caller checked."""
    entry_points = {"malloc", "free", "record_stream", "empty_cache", "attach_out_of_memory_observer",
                    "get_checkpoint_state", "set_checkpoint_pool_state", "segments", "round_size",
                    "create_or_incref_pool", "get_private_pool", "begin_allocate_to_pool",
                    "end_allocate_to_pool", "release_pool", "get_pool_use_count", "set_use_on_oom",
                    "set_no_split", "record_free_markers", "free_safe_blocks_in_capture"}
    unchecked = sorted(set(layers.DEVICE) - set(TWINS) - entry_points)
    assert not unchecked, f"DeviceCachingAllocator members without a caller check in TWINS: {unchecked}"
