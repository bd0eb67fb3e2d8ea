"""Plug a learner's function into any decision of the reference allocator.

Every decision a lab can ask a learner to write is a member of the reference
:class:`~allocator_ref.caching.DeviceCachingAllocator` (``allocator.device_allocator``), the
PyTorch member it replaces (``DeviceCachingAllocator::round_size``, ``should_split``,
``get_free_block``, ``release_available_cached_blocks``, ...).  A check builds

    PluggedAllocator(dev, config, plug={"should_split": learner_fn})

and the reference runs as usual, except that each plugged decision calls the
learner's function.  ``HOOKS`` lists the decisions and the signature the
learner writes:

* the four lab 2 decisions have the short signatures the lab teaches
  (``round_size(size, config)``, ...) and guards that turn a wrong kind of
  answer into a located explanation;
* every other member in ``HOOKS`` is plugged *method-style*: the learner writes
  ``fn(allocator, *args)`` with the same arguments as the reference member
  (``get_free_block(allocator, p)``), where ``allocator`` is the DeviceCachingAllocator
  (its pools, stats and other members), so a new exercise on a new decision needs
  no change here.  A hook is one line in ``METHOD_HOOKS``.

An unknown name is refused with the list of names that can be plugged.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Callable, Optional

from ..editions.messages import translator
from .check import Fail, fmt
from .guard import show
from .reference import CachingAllocator

tr = translator("labs")                  # what a learner reads, in the learner's language


@dataclass(frozen=True)
class Hook:
    name: str                      # the DeviceCachingAllocator member it replaces (PyTorch's name)
    signature: str                 # what the learner writes
    plug: Callable                 # (device_allocator, learner_fn) -> the bound replacement


def _size_hook(name: str) -> Callable:
    def plug(allocator, fn):
        def decided(size):
            value = fn(size, allocator.config)
            if type(value) is not int:
                raise Fail(tr("your {name}({size}) returned {value} ({value_type}); it must return an int number "
                              "of bytes",
                              name=name, size=size, value=show(value), value_type=type(value).__name__),
                           tr("your {name} returned a {value_type}, not an int", name=name,
                              value_type=type(value).__name__))
            if value < size:
                raise Fail(tr("your {name}({size}) returned {value}, less than the {size} bytes asked for: the "
                              "block would be too small and overlap its neighbour",
                              name=name, size=size, value=value),
                           tr("your {name} returned fewer bytes than it was given (blocks would overlap)",
                              name=name))
            return value
        return decided
    return plug


def _should_split(allocator, fn):
    def decided(block, size, expandable_active):
        value = fn(block, size, expandable_active, allocator.config)
        if type(value) is not bool and not (type(value) is int and value in (0, 1)):
            raise Fail(tr("your should_split returned {value}; it must return True or False",
                          value=show(value)),
                       tr("your should_split did not return True or False"))
        return bool(value)
    return decided


def _merge_refusal(dst, src) -> Optional[str]:
    """Why ``try_merge_blocks`` must return 0 for this pair (PyTorch's early returns), or None."""
    if src is None:
        return None
    if src.allocated:
        return tr("that is still allocated")
    if src.event_count > 0:
        return tr("still pending on another stream's event (event_count={n}): "
                  "that stream may still be using its memory", n=src.event_count)
    if src.stream_uses:
        return tr("whose free is held back (stream_uses is not empty: a record_stream use freed during a capture "
                  "has no event yet, so event_count is 0): that stream may still be using its memory")
    if src.mapped != dst.mapped:
        return tr("whose mapped state differs (an unmapped range of an expandable segment)")
    return None


def _try_merge_blocks(allocator, fn):
    def decided(dst, src, pool):
        refusal = _merge_refusal(dst, src)
        before = (dst.ptr, dst.size, dst.prev, dst.next, src.ptr if src else None, src.size if src else 0,
                  src.prev if src else None, src.next if src else None)
        try:
            value = fn(dst, src, pool)
        except Exception as exc:
            if refusal is None or isinstance(exc, NotImplementedError):
                raise
            value, error = 1, exc
        else:
            error = None
        if refusal is not None and value:
            side = tr("previous") if src is dst.prev or before[2] is src else tr("next")
            crash = tr(" (and crashed with {kind})", kind=type(error).__name__) if error else ""
            raise Fail(tr("freeing the {dst_size} block at {dst_ptr:#x}: your try_merge_blocks absorbed its "
                          "{side} neighbour ({src_size}), a neighbour {refusal}; it must return 0{crash}",
                          dst_size=fmt(dst.size), dst_ptr=dst.ptr, side=side, src_size=fmt(src.size),
                          refusal=refusal, crash=crash),
                       tr("your try_merge_blocks absorbed a neighbour {refusal}",
                          refusal=refusal.split(':')[0].split("：")[0]))
        if type(value) is not int:
            raise Fail(tr("your try_merge_blocks returned {value}; it must return the number of bytes it "
                          "absorbed (0 when it did not merge)",
                          value=show(value)),
                       tr("your try_merge_blocks did not return an int number of bytes"))
        _check_merge(dst, src, pool, value, before)
        return value
    return decided


def _check_merge(dst, src, pool, value, before) -> None:
    """Catch a half-done merge now, where it happened, instead of as a crash ops later
    (a block left in the pool, a pointer not moved, a neighbour still linked)."""
    dst_ptr, dst_size, dst_prev, dst_next, src_ptr, src_size, src_prev, src_next = before
    where = tr("merging the freed {size} block at {ptr:#x}", size=fmt(dst_size), ptr=dst_ptr)
    safe = tr("your try_merge_blocks left the blocks in a broken state")
    if value == 0:
        if (dst.ptr, dst.size, dst.prev, dst.next) != (dst_ptr, dst_size, dst_prev, dst_next):
            raise Fail(tr("{where}: your try_merge_blocks returned 0 (no merge) but changed the block: return "
                          "the bytes absorbed when you merge, and change nothing when you do not",
                          where=where), safe)
        return
    if src is None:
        raise Fail(tr("{where}: there is no neighbour on that side (src is None) but your try_merge_blocks "
                      "returned {value}: return 0",
                      where=where, value=value), safe)
    if value != src_size:
        raise Fail(tr("{where}: your try_merge_blocks returned {value}; it must return the bytes it absorbed, "
                      "the neighbour's size {src_size}",
                      where=where, value=value, src_size=src_size), safe)
    if dst.size != dst_size + src_size:
        raise Fail(tr("{where} with its {src_size} neighbour: dst.size is {now}, expected {before} + "
                      "{absorbed} = {merged}: grow dst by the neighbour's size",
                      where=where, src_size=fmt(src_size), now=dst.size, before=dst_size, absorbed=src_size,
                      merged=dst_size + src_size), safe)
    if _in_pool(pool, src):
        raise Fail(tr("{where} with its {src_size} neighbour at {src_ptr:#x}: the neighbour is still in the pool "
                      "of free blocks, so the allocator could hand out memory that is now part of the merged "
                      "block. Take it out first: pool.remove(src) (pool.remove_unmapped(src) when it is not "
                      "mapped)",
                      where=where, src_size=fmt(src_size), src_ptr=src_ptr),
                   safe)
    if src is dst_prev:                                                      # [src dst]: dst takes src's place
        if dst.ptr != src_ptr:
            raise Fail(tr("{where} with the {src_size} free block BEFORE it (at {src_ptr:#x}): the merged block "
                          "must start where that neighbour started, {src_ptr:#x}, but dst.ptr is {dst_ptr:#x}: "
                          "set dst.ptr = src.ptr",
                          where=where, src_size=fmt(src_size), src_ptr=src_ptr, dst_ptr=dst.ptr), safe)
        if dst.prev is not src_prev or (src_prev is not None and src_prev.next is not dst):
            raise Fail(tr("{where} with the free block before it: the block before THAT one must now be linked "
                          "to the merged block (dst.prev = src.prev, and its .next = dst)",
                          where=where), safe)
    else:                                                                    # [dst src]
        if dst.ptr != dst_ptr:
            raise Fail(tr("{where} with the {src_size} free block AFTER it: the merged block still starts at "
                          "{dst_ptr:#x}, but dst.ptr is now {moved:#x}: only a merge with the block before "
                          "moves the pointer",
                          where=where, src_size=fmt(src_size), dst_ptr=dst_ptr, moved=dst.ptr), safe)
        if dst.next is not src_next or (src_next is not None and src_next.prev is not dst):
            raise Fail(tr("{where} with the free block after it: the block after THAT one must now be linked to "
                          "the merged block (dst.next = src.next, and its .prev = dst)",
                          where=where), safe)


def _in_pool(pool, block) -> bool:
    try:
        return any(b is block for b in pool)
    except Exception:
        return False


def _method_hook(name: str) -> Callable:
    def plug(allocator, fn):
        try:
            signature = inspect.signature(fn)
        except (TypeError, ValueError):           # a builtin: let the call say what is wrong
            signature = None

        def decided(*args, **kwargs):
            if signature is not None:
                try:
                    signature.bind(allocator, *args, **kwargs)
                except TypeError as exc:
                    raise Fail(tr("the allocator calls your {name} as {call}, but your function's "
                                  "parameters are {signature} ({exc})",
                                  name=name, call=METHOD_HOOKS[name], signature=signature, exc=exc),
                               tr("your {name} does not take the arguments the allocator passes",
                                  name=name)) from None
            return fn(allocator, *args, **kwargs)
        return decided
    return plug


# DeviceCachingAllocator members plugged method-style: fn(allocator, *the member's arguments), with
# allocator the DeviceCachingAllocator.  ``context``
# is the caller's stack gathered at the top of malloc/free/empty_cache (None when history is
# off), passed down as PyTorch passes its GatheredContext.
METHOD_HOOKS = {
    "get_free_block": "get_free_block(allocator, p) -> bool (set p.block, take it out of p.pool)",
    "alloc_block": "alloc_block(allocator, p, is_retry, context) -> bool",
    "release_available_cached_blocks": "release_available_cached_blocks(allocator, p, context) -> bool",
    "release_cached_blocks": "release_cached_blocks(allocator, context, mempool_id=(0, 0)) -> bool",
    "release_block": "release_block(allocator, block, context) -> None",
    "garbage_collect_cached_blocks": "garbage_collect_cached_blocks(allocator, context) -> None",
    "alloc_found_block": "alloc_found_block(allocator, p, orig_size, split, context) -> Block",
    "free_block": "free_block(allocator, block, context) -> None",
    "insert_events": "insert_events(allocator, block) -> None",
    "process_events": "process_events(allocator, context) -> None",
    "synchronize_and_free_events": "synchronize_and_free_events(allocator, context, private_pool=None) -> None",
}

HOOKS: dict[str, Hook] = {
    "round_size": Hook("round_size", "round_size(size, config) -> int", _size_hook("round_size")),
    "get_allocation_size": Hook("get_allocation_size", "get_allocation_size(size, config) -> int",
                                _size_hook("get_allocation_size")),
    "should_split": Hook("should_split", "should_split(block, size, expandable_active, config) -> bool",
                         _should_split),
    "try_merge_blocks": Hook("try_merge_blocks", "try_merge_blocks(dst, src, pool) -> int", _try_merge_blocks),
    **{name: Hook(name, sig, _method_hook(name)) for name, sig in METHOD_HOOKS.items()},
}


class PluggedAllocator(CachingAllocator):
    """The (private copy of the) reference allocator with some decisions replaced by a learner's functions.

    ``plug={"get_free_block": fn, ...}`` names DeviceCachingAllocator members; each is replaced on
    ``self.device_allocator``.  ``should_split=`` and ``merge=`` are the older spellings."""

    def __init__(self, device: Any, config: Any = "", *, plug: Optional[dict] = None,
                 should_split: Optional[Callable] = None, merge: Optional[Callable] = None) -> None:
        plug = dict(plug or {})
        if should_split is not None:
            plug["should_split"] = should_split
        if merge is not None:
            plug["try_merge_blocks"] = merge
        unknown = sorted(set(plug) - set(HOOKS))
        if unknown:
            raise ValueError(f"cannot plug {unknown}: the DeviceCachingAllocator members that can be plugged are "
                             f"{sorted(HOOKS)} "
                             "(add a method-style one to METHOD_HOOKS in allocator_ref/labs/plug.py)")
        super().__init__(device, config)
        da = self.device_allocator
        for name, fn in plug.items():          # an instance attribute wins over the class's method
            setattr(da, name, HOOKS[name].plug(da, fn))
        self.plugged = tuple(plug)


__all__ = ["HOOKS", "METHOD_HOOKS", "Hook", "PluggedAllocator"]
