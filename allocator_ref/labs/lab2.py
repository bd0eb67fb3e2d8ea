"""Lab 2 -- build the core: round_size, get_allocation_size, should_split and the merge on free.

The learner's functions are plugged into the reference allocator (the
``round_size`` / ``get_allocation_size`` it calls, and a subclass overriding
``should_split`` / ``try_merge_blocks``) and judged twice: on single inputs
against the rule, and on workloads, op by op, against the reference
allocator (block sizes, segments, reserved and allocated bytes, cudaMalloc
calls, the block layout, leaks, and PyTorch's stats/snapshot consistency).

Signatures the learner writes (PyTorch's ``round_size``, ``get_allocation_size``,
``should_split`` and ``try_merge_blocks`` in CUDACachingAllocator.cpp):

    round_size(size, config) -> int
    get_allocation_size(size, config) -> int
    should_split(block, size, expandable_active, config) -> bool
    try_merge_blocks(dst, src, pool) -> int
"""
from __future__ import annotations

import random

from ..editions.messages import translator
from ..caching import AllocatorConfig
from . import reference as ref_config
from .reference import CachingAllocator
from ..caching.block import Block, BlockPool
from .check import Case, Exercise, Fail, MiB, fmt, lab_device, register, same, show
from .spec import Drawn, Edge, edges, function_exercise, seen_in_run
from .workload import compare, random_workload

tr = translator("labs")                  # what a learner reads, in the learner's language
later = translator("labs", later=True)  # marked now, said when shown (check.shown)

DIV4 = "roundup_power2_divisions:4"


def _config(text: str) -> AllocatorConfig:
    return AllocatorConfig.parse(text)


# ------------------------------------------------------------------ round_size
def _round_reason(size: int, config_text: str, expected: int) -> str:
    cfg = _config(config_text)
    if size < 512:
        return tr("every request smaller than 512 B becomes one 512 B block, so round_size({size}) is 512",
                  size=size)
    div = cfg.divisions_for(size)
    if div > 1 and size > 512 * div:
        if expected == size:
            return (tr("with '{config_text}' the size {size} ({size2}) falls in a bucket with {div} divisions "
                       "and already sits on one of its steps (or is a power of two), so it stays {size}: round "
                       "up, never add a whole step",
                       config_text=config_text, size=size, size2=fmt(size), div=div))
        return (tr("with '{config_text}' the size {size} ({size2}) falls in a bucket with {div} divisions: round "
                   "up to the next of {div} equal steps between powers of two, giving {expected} ({expected2})",
                   config_text=config_text, size=size, size2=fmt(size), div=div, expected=expected,
                   expected2=fmt(expected)))
    if size % 512 == 0:
        return tr("{size} is already a multiple of 512, so it stays {size} (round up, never add a whole step)",
                  size=size)
    tail = tr(" (divisions do not apply: {size} <= 512 * {div})",
              size=size, div=div) if div > 1 else ""
    if div == 1:
        # round_size in CUDACachingAllocator.cpp (2.11) tests `divisions > 1`: 1 is a valid setting that
        # keeps 512 B multiples, not "one step between powers of two".
        tail = tr(" (a division count of 1 means no steps: divisions apply only when there are more than 1)")
    return tr("round up to the next multiple of 512 B: {size} -> {expected}{tail}",
              size=size, expected=expected, tail=tail)


def _size_fn_case(name: str, fn_ref, sizes, config_text: str, label: str, reason) -> Case:
    def judge(fn):
        cfg = _config(config_text)
        for size in sizes:
            expected = fn_ref(size, _config(config_text))
            got = fn(size, cfg)
            if type(got) is not int:
                raise Fail(tr("{name}({size}) returned {got}, a {got_type}: return an int number of bytes",
                              name=name, size=size, got=show(got), got_type=type(got).__name__),
                           tr("your {name} returned a {got_type}, not an int",
                              name=name, got_type=type(got).__name__))
            if not same(got, expected):
                raise Fail(tr("{name}({size}) with config '{config}' returned {got}; expected "
                              "{expected}: {why}",
                              name=name, size=size, config=config_text or 'default', got=show(got),
                              expected=expected, why=reason(size, config_text, expected)),
                           tr("your {name} disagrees with the reference on a size in this range (config "
                              "'{config}')",
                              name=name, config=config_text or 'default'))
    return Case(label, judge, data=(list(sizes), config_text))


def _round_public():
    cases = [
        _size_fn_case("round_size", ref_config.round_size, [1, 4, 511, 512], "", tr("tiny sizes (1, 4, 511, 512 B)"), _round_reason),
        _size_fn_case("round_size", ref_config.round_size, [513, 1000, 1024, 4096, 5000], "",
                      tr("multiples of 512 and their neighbours"), _round_reason),
        _size_fn_case("round_size", ref_config.round_size, [1 * MiB, 5 * MiB + 1, 12 * MiB + 1], "",
                      tr("1 MiB, 5 MiB + 1, 12 MiB + 1"), _round_reason),
        _size_fn_case("round_size", ref_config.round_size, [1200, 88_080_384, 3 * MiB + 7, 2 * MiB, 5 * MiB], DIV4,
                      tr("roundup_power2_divisions:4 (1200 B, 84 MiB, 3 MiB + 7, 2 MiB, 5 MiB)"), _round_reason),
    ]
    return cases


def _plugged_compare(ops, config="", what="", **fns):
    compare(ops, None, config=config, what=what, plug=fns)


def _division_edges(rng: random.Random, div: int) -> list:
    """Sizes where a divisions rule goes wrong if it is off by one: around the 512 B x divisions
    guard, a power of two, a size sitting exactly on a step, and one byte past a step."""
    guard = 512 * div
    power = 1 << rng.randint(21, 29)
    step = power // div
    on_step = power + step * rng.randint(1, div - 1)
    just_past_512 = 512 * rng.randint(1, div - 1) + 1        # below the guard: a 512 B multiple, not a step
    return [guard, just_past_512, rng.randint(513, guard), guard + rng.randint(1, 511),
            power, on_step, on_step + 1, on_step - 1]


def _round_hidden(rng: random.Random):
    cases = []
    div = rng.choice([2, 4, 8, 16])
    # The divisions case first: check()'s quick mode (CI's notebook runs) keeps the first two.
    for label, lo, hi, conf in ((tr("roundup_power2_divisions: random sizes and the rule's edges"), MiB, 1 << 30,
                                 f"roundup_power2_divisions:{div}"),
                                (tr("random sizes below 1 MiB, default config"), 1, MiB, ""),
                                (tr("random sizes 1 MiB to 1 GiB, default config"), MiB, 1 << 30, "")):
        sizes = [rng.randint(lo, hi) for _ in range(40)] + [512 * rng.randint(lo // 512 + 1, hi // 512)]
        if lo == 1:                                  # below 512 B, and 512 B itself
            sizes += [rng.randint(1, 511), 512]
        if conf:
            sizes += _division_edges(rng, div)
        cases.append(_size_fn_case("round_size", ref_config.round_size, sizes, conf, label, _round_reason))
    # A division count of 1 is a valid power of two (PYTORCH_CUDA_ALLOC_CONF accepts it) and round_size
    # ignores it: 3000 B stays a 512 B multiple (3072), where "one step per power of two" gives 4096.
    sizes = [512 * rng.randint(3, 7) + rng.randint(1, 511)] + [rng.randint(MiB, 1 << 30) for _ in range(8)]
    cases.append(_size_fn_case("round_size", ref_config.round_size, sizes, "roundup_power2_divisions:1",
                               tr("roundup_power2_divisions:1: random sizes"), _round_reason))
    ops = random_workload(rng, 60)
    cases.append(Case(tr("a seeded workload with your round_size plugged in"),
                      lambda fn, ops=ops: _plugged_compare(ops, what=tr("your round_size"), round_size=fn), data=ops))
    return cases


def _public_workload():
    return [("malloc", "a", 4, 0), ("malloc", "b", 1000, 0), ("malloc", "c", 5 * MiB, 0),
            ("malloc", "d", 12 * MiB + 1, 0), ("free", "b"), ("malloc", "e", 600, 0), ("free", "c"),
            ("malloc", "f", 3 * MiB + 100, 0), ("free", "a"), ("free", "d"), ("empty_cache",)]


def _round_public_cases():
    cases = _round_public()
    cases.append(Case(tr("plugged into the allocator: a mixed workload (block sizes, segments, cudaMallocs)"),
                      lambda fn: _plugged_compare(_public_workload(), what=tr("your round_size"), round_size=fn)))
    return cases


register(Exercise(
    id="lab2.round_size", pure=True, lab=2, title=later("round_size(size, config): how big a block a request gets"),
    public=_round_public_cases, hidden=_round_hidden,
    nudge=(later("Look at the size named above: is it below 512 B, an exact multiple, or in a bucket where "
                 "divisions apply?"),
           later("For a size in a bucket with divisions, first find the two powers of two around it, then the "
                 "equal steps between them: which step is the first one not below the size?")),
    hint=later("Below 512 B the answer is 512. Otherwise round UP to a multiple of 512 (exact multiples stay). "
               "Only when config.divisions_for(size) > 1 and size > 512 * divisions, round up to the next of "
               "`divisions` equal steps between the two powers of two around size (powers of two stay)."),
))


# ------------------------------------------------------------ get_allocation_size
def _segment_reason(size: int, config_text: str, expected: int) -> str:
    if size <= MiB:
        return tr("{size} is <= 1 MiB (small pool): small requests share 2 MiB segments",
                  size=fmt(size))
    if size < 10 * MiB:
        return tr("{size} is between 1 MiB and 10 MiB: it gets a {expected} segment (large_segment_size) to share",
                  size=fmt(size), expected=fmt(expected))
    return tr("{size} is >= 10 MiB: its segment is the size rounded up to a 2 MiB multiple, {expected}",
              size=fmt(size), expected=fmt(expected))


def _seg_public():
    cases = [
        _size_fn_case("get_allocation_size", ref_config.get_allocation_size, [512, 4096, MiB - 512, MiB], "",
                      tr("small-pool sizes up to exactly 1 MiB"), _segment_reason),
        _size_fn_case("get_allocation_size", ref_config.get_allocation_size, [MiB + 512, 5 * MiB, 10 * MiB - 512], "",
                      tr("1 MiB < size < 10 MiB"), _segment_reason),
        _size_fn_case("get_allocation_size", ref_config.get_allocation_size, [10 * MiB, 12 * MiB + 512, 40 * MiB], "",
                      tr("10 MiB and more (2 MiB multiples)"), _segment_reason),
        _size_fn_case("get_allocation_size", ref_config.get_allocation_size, [5 * MiB], "large_segment_size_mb:64",
                      "large_segment_size_mb:64 (5 MiB)", _segment_reason),
        Case(tr("plugged into the allocator: a mixed workload (segments, reserved bytes, cudaMallocs)"),
             lambda fn: _plugged_compare(_public_workload(), what=tr("your get_allocation_size"), get_allocation_size=fn)),
    ]
    return cases


def _seg_hidden(rng: random.Random):
    cases = []
    for label, lo, hi in ((tr("random rounded sizes below 1 MiB"), 1, 2048),
                          (tr("random rounded sizes 1 to 10 MiB"), 2049, 20480),
                          (tr("random rounded sizes 10 MiB to 4 GiB"), 20480, 8 << 20)):
        sizes = [512 * rng.randint(lo, hi) for _ in range(40)] + [512 * lo, 512 * (hi - 1), 512 * hi]   # the edges
        # Mid-sized requests always meet a changed large_segment_size (a hard-coded 20 MiB shows there).
        conf = (f"large_segment_size_mb:{rng.choice([16, 32, 64])}" if lo == 2049
                else rng.choice(["", "", f"large_segment_size_mb:{rng.choice([16, 32, 64])}"]))
        cases.append(_size_fn_case("get_allocation_size", ref_config.get_allocation_size, sizes, conf, label,
                                   _segment_reason))
    ops = random_workload(rng, 60)
    cases.append(Case(tr("a seeded workload with your get_allocation_size plugged in"),
                      lambda fn, ops=ops: _plugged_compare(ops, what=tr("your get_allocation_size"),
                                                           get_allocation_size=fn), data=ops))
    return cases


register(Exercise(
    id="lab2.get_allocation_size", pure=True, lab=2, title=later("get_allocation_size(size, config): how big a "
                                                                 "segment cudaMalloc gets"),
    public=_seg_public, hidden=_seg_hidden,
    nudge=(later("Which of the three size ranges does the size above fall in, and is the boundary itself inside "
                 "or outside it?"),
           later("Write the three ranges down with their exact limits (1 MiB and 10 MiB) and check the size "
                 "named above against each, limits included.")),
    hint=later("Three ranges of the ROUNDED size: <= 1 MiB -> 2 MiB; < 10 MiB -> config.large_segment_size (20 "
               "MiB by default); otherwise round up to a multiple of 2 MiB."),
))


# ------------------------------------------------------------------ should_split
def _block(size: int, small: bool) -> Block:
    pool = BlockPool(is_small=small)
    return Block(0x7F0000000000, size, None, 0, pool)


def _split_reason(block_size, size, small, expandable, config_text, expected) -> str:
    cfg = _config(config_text)
    remaining = block_size - size
    req = tr("the {size} request from a {block} block", size=fmt(size), block=fmt(block_size))
    must = tr("must split") if expected else tr("must not split")
    if small or expandable:
        where = tr("small pool") if small else tr("an expandable segment")
        cmp = ">=" if remaining >= 512 else tr("is not >=")
        return tr("{request} ({where}) {must}: remaining {remaining} {compare} 512 B", request=req, where=where,
                  must=must, remaining=fmt(remaining), compare=cmp)
    if size >= cfg.max_split_size:
        return tr("{request} {must}: the request is oversize (>= max_split_size {max_split}) "
                  "and oversize blocks are never split", request=req, must=must, max_split=fmt(cfg.max_split_size))
    cmp = tr("is > 1 MiB") if remaining > MiB else tr("is not > 1 MiB")
    return tr("{request} {must}: remaining {remaining} {compare}", request=req, must=must,
              remaining=fmt(remaining), compare=cmp)


def _split_reference(block_size, size, small, expandable, config_text) -> bool:
    ref = CachingAllocator(lab_device("tiny-1gb"), config_text)
    return ref.device_allocator.should_split(_block(block_size, small), size, expandable)


def _split_label(args) -> str:
    block_size, size, small, expandable, config_text = args
    pool = tr("small pool") if small else (tr("expandable") if expandable else tr("large pool"))
    conf = f", {config_text}" if config_text else ""
    return tr("{block} block, {size} request ({pool}{config})", block=fmt(block_size), size=fmt(size), pool=pool,
              config=conf)


def _split_message(args, got, expected) -> tuple:
    return (tr("should_split returned {got}: ", got=show(got)) + _split_reason(*args, expected),
            tr("your should_split disagrees with the reference on a block of this kind"))


def _split_workload_case(label, ops, config=""):
    def judge(fn):
        compare(ops, None, config=config, what=tr("your should_split"), plug={"should_split": fn})
    return Case(label, judge, data=(ops, config))


# (block size, request, small pool, expandable segment, config)
_SPLIT_PUBLIC = [
    (20 * MiB, 19 * MiB + 512 * 1024, False, False, ""),
    (20 * MiB, 5 * MiB, False, False, ""),
    (20 * MiB, 19 * MiB, False, False, ""),
    (2 * MiB, 512, True, False, ""),
    (MiB, MiB - 512, True, False, ""),
    (MiB, MiB, True, False, ""),
    (20 * MiB, 19 * MiB + 512 * 1024, False, True, ""),
    (60 * MiB, 50 * MiB, False, False, "max_split_size_mb:40"),
]


def _split_workloads():
    return [_split_workload_case(tr("plugged into the allocator: a mixed workload"), _public_workload()),
            _split_workload_case(tr("plugged in, expandable_segments:True"), _public_workload(), "expandable_segments:True")]


def _split_hidden(rng: random.Random):
    drawn = []
    for k in range(3):
        block = 512 * rng.randint(2 * 2048, 120 * 2048)
        # k=0: exactly 1 MiB left (> is not >=); k=1: 1 MiB + 512 B left, the smallest that splits
        edge = [MiB] if k == 0 else [MiB + 512] if k == 1 else [0, 512, MiB - 512, 512 * rng.randint(1, 4096)]
        size = block - rng.choice(edge)
        size = max(512, size)
        drawn.append(Drawn((block, size, False, False, ""), tr("large pool, remainder near 1 MiB")))
    for k in range(3):
        block = 512 * rng.randint(2, 4096)
        # k=0: exactly 512 B left, the smallest remainder the small pool keeps (>= is not >); k=1: nothing left
        left = 512 if k == 0 else 0 if k == 1 else rng.choice([1024, 512 * rng.randint(0, 64)])
        size = max(512, block - left)
        drawn.append(Drawn((block, size, True, False, ""), tr("small pool")))
    for k in range(2):
        block = 512 * rng.randint(40960, 409600)
        # k=0: a 512 B remainder, which splits here though the large pool's rule would not
        left = 512 if k == 0 else 512 * rng.randint(1, 4000)
        drawn.append(Drawn((block, block - left, False, True, ""), tr("expandable segment")))
    ms = rng.choice([40, 64, 128])
    # Expandable segments and max_split_size_mb together: should_split (CUDACachingAllocator.cpp, 2.11) takes
    # the expandable branch first and never reads max_split_size there, so an oversize request still splits.
    size = ms * MiB + 512 * rng.randint(0, 4096)
    drawn.append(Drawn((size + 512 * rng.randint(1, 8192), size, False, True, f"max_split_size_mb:{ms}"),
                       tr("expandable segment, max_split_size set, a request above it")))
    # The request exactly at max_split_size (oversize: `<` is not `<=`), one just below it (splits), one above.
    for size in (ms * MiB, ms * MiB - 512 * rng.randint(1, 2048), ms * MiB + 512 * rng.randint(1, 4096)):
        drawn.append(Drawn((ms * MiB * 2, size, False, False, f"max_split_size_mb:{ms}"),
                           tr("max_split_size set, a request near it")))
    return drawn


def _split_hidden_workload(rng: random.Random):
    """After the drawn inputs, from the same generator: a seeded workload with should_split plugged in."""
    conf = rng.choice(["", "max_split_size_mb:40", "expandable_segments:True"])
    return [_split_workload_case(tr("a seeded workload with your should_split plugged in"), random_workload(rng, 60), conf)]


function_exercise(
    id="lab2.should_split", pure=True, lab=2, title=later("should_split(block, size, expandable_active, config)"),
    reference=_split_reference, public=_SPLIT_PUBLIC, hidden=_split_hidden, label=_split_label,
    # The learner's function gets a fresh Block of that size and pool, and the parsed config.
    call=lambda args: (_block(args[0], args[2]), args[1], args[3], _config(args[4])),
    returns=(bool, later("True or False")), message=_split_message,
    more_public=_split_workloads, more_hidden=_split_hidden_workload,
    nudge=(later("Which pool is the block in, and is the comparison with the remainder strict or not?"),
           later("Work out the remainder (block size minus request) for the failing case, then ask which rule "
                 "applies to this block's pool, and whether a setting in the config changes that rule.")),
    hint=later("remaining = block.size - size. Small pool (block.pool.is_small) or expandable_active: split when "
               "remaining >= 512. Large pool: split only when size < config.max_split_size AND remaining is "
               "strictly more than 1 MiB (kSmallSize)."),
)


# ------------------------------------------------------------------ the merge on free
def _merge_public_ops():
    K = 512 * 1024
    return [
        ("malloc", "a", K, 0), ("malloc", "b", K, 0), ("malloc", "c", K, 0),
        ("free", "b"),                 # b merges with nothing (a and c allocated)
        ("free", "a"),                 # a absorbs b
        ("free", "c"),                 # c absorbs a+b before it and the free rest after: one block
        ("malloc", "d", 3 * MiB, 0), ("malloc", "e", 4 * MiB, 0), ("malloc", "f", 5 * MiB, 0),
        ("free", "d"), ("free", "f"), ("free", "e"),
    ]


def _merge_between_ops():
    """A merge with the free block before, which itself follows an allocated block: the links on
    both far sides must be moved to the merged block."""
    K = 512 * 1024
    return [
        ("malloc", "g", K, 0), ("malloc", "h", K, 0), ("malloc", "i", K, 0), ("malloc", "j", K, 0),
        ("free", "h"),                 # h merges with nothing (g and i allocated)
        ("free", "i"),                 # i absorbs h before it: g (allocated) must now point to i
        ("free", "g"), ("free", "j"),
    ]


def _merge_event_ops():
    K = 512 * 1024
    return [
        ("malloc", "a", K, 0), ("malloc", "b", K, 0), ("malloc", "c", K, 0),
        ("record", "b", 1), ("sleep", 1, 1000), ("free", "b"),   # b waits for stream 1's event
        ("free", "a"),                 # must NOT absorb b: its event is pending
        ("free", "c"),
        ("sync",), ("malloc", "d", 600, 0),   # process_events frees b: now everything merges
        ("free", "d"),
    ]


def _merge_case(label, ops, config=""):
    def judge(fn):
        compare(ops, None, config=config, what=tr("your try_merge_blocks"), plug={"try_merge_blocks": fn})
    return Case(label, judge, data=(ops, config))


def _merge_public():
    return [
        _merge_case(tr("free the middle, then the neighbours, in one 2 MiB segment and one 20 MiB segment"),
                    _merge_public_ops()),
        _merge_case(tr("a free block before, after an allocated one: the links on both sides move"),
                    _merge_between_ops()),
        _merge_case(tr("a neighbour still waiting for another stream's event (record_stream)"), _merge_event_ops()),
        _merge_case(tr("expandable_segments:True: merging inside one growing segment"), _merge_public_ops(),
                    "expandable_segments:True"),
    ]


def _seeded_event_ops(rng: random.Random):
    """The pending-neighbour situation with seeded sizes: a neighbour waiting for another stream's event."""
    k = [512 * rng.randint(256, 1024) for _ in range(3)]
    return [("malloc", "a", k[0], 0), ("malloc", "b", k[1], 0), ("malloc", "c", k[2], 0),
            ("record", "b", 1), ("sleep", 1, rng.choice([500, 1000, 5000])), ("free", "b"),
            ("free", rng.choice(["a", "c"])), ("sync",), ("malloc", "d", 512 * rng.randint(1, 64), 0), ("free", "d")]


def _seeded_stream_uses_ops(rng: random.Random):
    """A neighbour freed while a pool context (a capture) is underway, with a recorded stream use: its free
    is held back with stream_uses still set and no event yet (event_count is 0), so only the stream_uses
    test stops the merge."""
    k = [512 * rng.randint(256, 1024) for _ in range(3)]
    first = rng.choice(["a", "c"])
    return [("malloc", "a", k[0], 0), ("malloc", "b", k[1], 0), ("malloc", "c", k[2], 0),
            ("record", "b", 1), ("sleep", 1, rng.choice([500, 1000, 5000])), ("pool_begin", 1), ("free", "b"),
            ("free", first), ("pool_end", 1), ("sync",), ("malloc", "d", 512 * rng.randint(1, 64), 0),
            ("free", "d"), ("free", "a" if first == "c" else "c")]


def _merge_hidden(rng: random.Random):
    return [
        _merge_case(tr("a seeded neighbour pending on another stream's event"), _seeded_event_ops(rng)),
        _merge_case(tr("a seeded neighbour whose free is held back by a capture (stream uses, no event yet)"),
                    _seeded_stream_uses_ops(rng)),
        _merge_case(tr("a seeded workload, one stream"), random_workload(rng, 80)),
        _merge_case(tr("a seeded workload, two streams with record_stream"),
                    random_workload(rng, 80, streams=2, events=True)),
        _merge_case(tr("a seeded workload, expandable_segments:True"), random_workload(rng, 60),
                    "expandable_segments:True"),
    ]


register(Exercise(
    id="lab2.merge", observed=True, lab=2, title=later("try_merge_blocks(dst, src, pool): the merge on free"),
    public=_merge_public, hidden=_merge_hidden,
    nudge=(later("Look at the neighbour named above: may it be absorbed right now, and is every link, pointer and "
                 "pool entry updated when it is?"),
           later("Draw the two blocks and their neighbours before and after the merge: which pointers (prev, "
                 "next, ptr) and which pool entry must change, and what does the function return?")),
    hint=later("Return 0 (no merge) when src is None, allocated, has event_count > 0 or stream_uses, or its "
               "mapped flag differs from dst's. Otherwise take src out of the pool (pool.remove, or "
               "pool.remove_unmapped when not mapped), unlink it (if src is dst.prev: dst.ptr = src.ptr and "
               "dst.prev = src.prev, fix the neighbour's next; else dst.next = src.next, fix its prev), grow "
               "dst.size and return src.size."),
))


# ------------------------------------------------------------------ the rules' edges and states
# Each is met by the hidden cases of every seed (make check-labs proves it): see spec.edges.
def _sized(data):
    """(sizes, config text) of a size case; None for a workload case."""
    if isinstance(data, tuple) and len(data) == 2 and isinstance(data[0], list) and isinstance(data[1], str) \
            and all(isinstance(x, int) for x in data[0]):
        return data
    return None


def _any_size(pred):
    def met(data):
        sized = _sized(data)
        return sized is not None and any(pred(size, _config(sized[1])) for size in sized[0])
    return met


def _is_workload(data) -> bool:
    ops = data[0] if isinstance(data, tuple) and data and isinstance(data[0], list) else data
    return isinstance(ops, list) and bool(ops) and isinstance(ops[0], tuple) and ops[0][0] == "malloc"


def _div(cfg, size) -> int:
    return cfg.divisions_for(size)


def _on_step(size, cfg) -> bool:
    d = _div(cfg, size)
    return d > 1 and size > 512 * d and size & (size - 1) != 0 and ref_config.round_size(size, cfg) == size


edges("lab2.round_size",
      Edge("a size below 512 B", _any_size(lambda s, c: s < 512)),
      Edge("exactly 512 B", _any_size(lambda s, c: s == 512)),
      Edge("an exact multiple of 512 above 512 B (it stays)", _any_size(lambda s, c: s > 512 and s % 512 == 0)),
      Edge("one byte past a multiple of 512", _any_size(lambda s, c: s > 512 and s % 512 == 1)),
      Edge("divisions set: exactly 512 B x divisions (the guard: divisions do not apply)",
           _any_size(lambda s, c: _div(c, s) > 1 and s == 512 * _div(c, s))),
      Edge("divisions set: a size sitting on a step (it stays)", _any_size(_on_step)),
      Edge("divisions set: one byte past a step", _any_size(lambda s, c: _on_step(s - 1, c))),
      Edge("divisions set: one byte below a step", _any_size(lambda s, c: _on_step(s + 1, c))),
      Edge("divisions set: a power of two (it stays)",
           _any_size(lambda s, c: _div(c, s) > 1 and s > 512 * _div(c, s) and s & (s - 1) == 0)),
      Edge("a division count of 1 (no steps: 512 B multiples), a size not on one",
           _any_size(lambda s, c: _div(c, s) == 1 and s > 1024 and s % 512 != 0)),
      Edge("plugged into a seeded workload", _is_workload))

edges("lab2.get_allocation_size",
      Edge("exactly 1 MiB (small pool: <= is not <)", _any_size(lambda s, c: s == MiB)),
      Edge("1 MiB + 512 B (the first large size)", _any_size(lambda s, c: s == MiB + 512)),
      Edge("10 MiB - 512 B (the last mid size)", _any_size(lambda s, c: s == 10 * MiB - 512)),
      Edge("exactly 10 MiB (< is not <=)", _any_size(lambda s, c: s == 10 * MiB)),
      Edge("a mid size with a changed large_segment_size",
           _any_size(lambda s, c: MiB < s < 10 * MiB and c.large_segment_size != 20 * MiB)),
      Edge("a size of 10 MiB or more that is not a 2 MiB multiple",
           _any_size(lambda s, c: s >= 10 * MiB and s % (2 * MiB) != 0)),
      Edge("plugged into a seeded workload", _is_workload))


def _split(pred):
    def met(data):
        if not (isinstance(data, tuple) and len(data) == 5):
            return False
        block_size, size, small, expandable, config_text = data
        return pred(block_size - size, size, small, expandable, _config(config_text))
    return met


edges("lab2.should_split",
      Edge("large pool, exactly 1 MiB left (> is not >=)",
           _split(lambda left, size, small, exp, c: not small and not exp and left == MiB and size < c.max_split_size)),
      Edge("large pool, 1 MiB + 512 B left (splits)",
           _split(lambda left, size, small, exp, c: not small and not exp and left == MiB + 512
                  and size < c.max_split_size)),
      Edge("small pool, exactly 512 B left (>= is not >)", _split(lambda left, size, small, exp, c: small and left == 512)),
      Edge("small pool, nothing left", _split(lambda left, size, small, exp, c: small and left == 0)),
      Edge("expandable segment, 512 B left (splits where the large-pool rule would not)",
           _split(lambda left, size, small, exp, c: exp and not small and left == 512)),
      Edge("expandable segment with max_split_size set, an oversize request (it still splits)",
           _split(lambda left, size, small, exp, c: exp and not small and size >= c.max_split_size and left >= 512)),
      Edge("max_split_size set, a request of exactly max_split_size (oversize: < is not <=)",
           _split(lambda left, size, small, exp, c: not small and not exp and size == c.max_split_size
                  and left > MiB)),
      Edge("max_split_size set, a request just below it with more than 1 MiB left (splits)",
           _split(lambda left, size, small, exp, c: not small and not exp and c.max_split_size < (1 << 63)
                  and size < c.max_split_size and left > MiB)),
      Edge("plugged into a seeded workload", _is_workload))


_MERGE_SEEN: dict = {}


def _merge_states(alloc, dst, src, pool) -> set:
    if src is None:
        return {"none"}
    if src.allocated:
        return {"allocated"}
    if src.event_count > 0:
        return {"event"}
    if src.stream_uses:
        return {"stream_uses"}
    if src.mapped != dst.mapped:
        return {"unmapped"}
    return {"before" if src is dst.prev else "after"}


def _merge_seen(state):
    def met(data):
        key = repr(data)
        if key not in _MERGE_SEEN:
            ops, config = data
            _MERGE_SEEN[key] = seen_in_run(ops, config, "try_merge_blocks", _merge_states)
        return state in _MERGE_SEEN[key]
    return met


edges("lab2.merge",
      Edge("a side with no neighbour (src is None)", _merge_seen("none")),
      Edge("an allocated neighbour", _merge_seen("allocated")),
      Edge("a neighbour pending on another stream's event (event_count > 0)", _merge_seen("event")),
      Edge("a neighbour held back by a capture (stream_uses set, event_count 0)", _merge_seen("stream_uses")),
      Edge("an unmapped neighbour in an expandable segment", _merge_seen("unmapped")),
      Edge("a free neighbour before (the merged block takes its ptr)", _merge_seen("before")),
      Edge("a free neighbour after", _merge_seen("after")))
