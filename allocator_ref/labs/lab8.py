"""Lab 8 -- own the pool: route requests to private pools, and plan CUDA graph captures.

Two exercises, both judged by running the reference allocator now (nothing is stored):

* ``lab8.get_pool``: ``route(captures, size, stream) -> (pool_id, "small" | "large")``.
  ``captures`` is ``captures_underway``: a list of ``(pool_id, accepts)`` pairs, oldest first,
  where ``accepts(stream)`` says whether that MemPool context / capture takes the request.
  The expected answer is what ``DeviceCachingAllocator.get_pool`` (PyTorch's ``get_pool`` in
  ``c10/cuda/CUDACachingAllocator.cpp``) returns for the same entries.
* ``lab8.capture_order``: ``plan(batch_sizes) -> list`` -- the order in which to capture one
  graph per batch size into ONE shared pool so that the pool reserves as little as possible.
  The judge captures :func:`training_step` for each size in the learner's order and in the
  largest-first order on fresh simulated devices; the learner's plan must be a permutation of
  the sizes and reserve no more than largest-first.
* ``lab8.cross_stream_free``: ``after_free(uses, pools_open) -> (action, reused)`` -- what
  ``free`` does with a default-pool block used on ``uses`` other streams while ``pools_open``
  MemPool contexts are open in other threads, and whether the next same-size request (after a
  device synchronize) gets the block back.  The judge runs :func:`free_outcome` on the reference
  allocator: an open ``use_mem_pool`` is an entry of ``captures_underway``, so ``free`` defers and
  ``malloc`` skips ``process_events`` (pytorch/pytorch#175015).
"""
from __future__ import annotations

import itertools
import random
import threading

from ..editions.messages import translator
from ..caching import CachingAllocator, CUDAGraph, MemPool, graph, graph_pool_handle
from ..caching.config import kSmallSize
from .check import Case, Exercise, Fail, MiB, fmt, lab_device, register

tr = translator("labs")                  # what a learner reads, in the learner's language
later = translator("labs", later=True)  # marked now, said when shown (check.shown)


# ----------------------------------------------------------------- the step
def training_step(a, stream, batch: int, layers: int = 4, mib_per_batch: int = 6):
    """A training-like step: ``layers`` activations of ``batch * mib_per_batch`` MiB kept for the
    backward pass, a 2 MiB output kept, then one gradient per layer while the activations go."""
    acts = [a.malloc(batch * mib_per_batch * MiB, stream) for _ in range(layers)]
    out = a.malloc(2 * MiB, stream)
    for act in reversed(acts):
        grad = a.malloc(batch * mib_per_batch * MiB, stream)
        a.free(act)
        a.free(grad)
    return out


def reserved_after_captures(order, layers: int = 4, mib_per_batch: int = 6) -> int:
    """Capture one graph per batch size, in ``order``, into one shared pool; the bytes reserved."""
    a = CachingAllocator(lab_device())
    stream = a.device.create_stream()
    pool = graph_pool_handle()
    graphs = []
    for batch in order:
        g = CUDAGraph(a)
        with graph(g, pool=pool, stream=stream) as cs:
            training_step(a, cs, batch, layers, mib_per_batch)
        graphs.append(g)
    return a.memory_reserved()


# ------------------------------------------------------------ exercise 1
class Accepts(frozenset):
    """A capture's stream filter: ``accepts(stream) -> bool``, as PyTorch's filter functions.
    A class rather than a lambda so that a graded check can send it to the notebook (apart.py)."""

    def __call__(self, stream) -> bool:
        return stream in self

    def __repr__(self) -> str:
        return f"<filter accepting streams {sorted(self)}>"


class Scenario:
    """A ``captures_underway`` list: which entries accept which streams, and a request."""

    def __init__(self, n_pools: int, accepts: list, size: int, stream: int) -> None:
        self.n_pools = n_pools
        self.accepts = accepts          # per entry: the set of stream handles it takes
        self.size = size
        self.stream = stream

    def expected(self) -> tuple:
        """What the reference allocator's get_pool answers for this scenario."""
        a = CachingAllocator(lab_device())
        streams = {0: a.device.default_stream}
        for handles in self.accepts:
            for h in handles:
                if h not in streams:
                    streams[h] = a.device.create_stream(handle=h)
        if self.stream not in streams:
            streams[self.stream] = a.device.create_stream(handle=self.stream)
        ids = [graph_pool_handle() for _ in self.accepts]
        for pool_id, handles in zip(ids, self.accepts):
            a.device_allocator.begin_allocate_to_pool(pool_id, lambda s, hs=frozenset(handles): s.handle in hs)
        block_pool = a.device_allocator.get_pool(self.size, streams[self.stream])
        owner = block_pool.owner_id
        index = ids.index(owner) if owner != (0, 0) else None
        return index, ("small" if block_pool.is_small else "large")

    def learner_input(self) -> tuple:
        """(captures, size, stream) as the learner's function receives them; ids are entry numbers."""
        captures = [((0, 100 + i), Accepts(h)) for i, h in enumerate(self.accepts)]
        return captures, self.size, self.stream

    def __repr__(self) -> str:
        return f"Scenario(accepts={self.accepts}, size={self.size}, stream={self.stream})"


def _route_case(scenario: Scenario, label: str) -> Case:
    def judge(fn):
        index, kind = scenario.expected()
        want = ((0, 100 + index) if index is not None else (0, 0), kind)
        captures, size, stream = scenario.learner_input()
        got = fn(captures, size, stream)
        if not (isinstance(got, tuple) and len(got) == 2):
            raise Fail(tr("route returned {got!r}; return a pair (pool_id, 'small' or 'large')",
                          got=got),
                       tr("route did not return a (pool_id, kind) pair"))
        if tuple(got[0]) != want[0]:
            which = (tr("the default pools (0, 0): no entry accepts the stream") if index is None
                     else tr("{want_0}, the NEWEST entry whose filter accepts stream {stream}",
                             want_0=want[0], stream=stream))
            raise Fail(tr("{scenario}: the request goes to {which}; yours chose {got_0!r}",
                          scenario=scenario, which=which, got_0=got[0]),
                       tr("your pool differs from get_pool's choice (which entry wins when several accept?)"))
        if got[1] != want[1]:
            raise Fail(tr("{scenario}: a rounded size of {size} bytes goes to the {want_1} list (small means <= "
                          "{ksmallsize} bytes); yours said {got_1!r}",
                          scenario=scenario, size=size, want_1=want[1], ksmallsize=kSmallSize, got_1=got[1]),
                       tr("your small/large choice differs from get_pool's"))
    return Case(label, judge, data=(tuple(frozenset(h) for h in scenario.accepts), scenario.size, scenario.stream))


def _route_public() -> list:
    return [
        _route_case(Scenario(0, [], 4096, 0), tr("no pool context: the default small list")),
        _route_case(Scenario(1, [{0}], 4 * MiB, 0), tr("one MemPool context taking this stream: its large list")),
        _route_case(Scenario(1, [{7}], 4 * MiB, 0), tr("a capture on another stream: the default pools")),
        _route_case(Scenario(1, [{0}], kSmallSize, 0), tr("exactly 1 MiB, inside a context")),
    ]


def _route_hidden(rng: random.Random) -> list:
    """Seeded nested contexts.  The first two always hold what a near-miss gets wrong: sizes on
    the small/large edge (exactly 1 MiB is small, 512 B more is large), an older entry accepting
    the stream while the newest does not, and no entry accepting it at all."""
    cases = []
    handles = [0, 3, 5, 9]
    for k in range(2 if _quick() else 6):
        n = rng.randint(2, 5)
        accepts = [set(rng.sample(handles, rng.randint(1, 3))) for _ in range(n)]
        stream = rng.choice(handles)
        if k == 0:                                     # only an older entry takes this stream
            for h in accepts:
                h.discard(stream)
            accepts[-1] = accepts[-1] or {h for h in handles if h != stream}
            accepts[rng.randrange(n - 1)].add(stream)
            size, label = kSmallSize, tr("nested contexts, exactly 1 MiB, the newest does not accept")
        elif k == 1:                                   # none takes it: the default pools
            for h in accepts:
                h.discard(stream)
                h.add(rng.choice([x for x in handles if x != stream]))
            size, label = kSmallSize + 512, tr("nested contexts, 1 MiB + 512 B, none accepts")
        else:
            if not any(stream in h for h in accepts):
                accepts[rng.randrange(n)].add(stream)
            accepts[rng.randrange(n)].add(stream)      # usually more than one entry matches
            if k == 2:                                 # both entries accept, and one step below 1 MiB: small
                accepts[-1].add(stream)
                accepts[0].add(stream)
                size = kSmallSize - 512
            else:
                size = rng.choice([512 * rng.randint(1, 2048), rng.randint(2, 64) * MiB])
            label = tr("nested contexts, several accepting")
        cases.append(_route_case(Scenario(n, accepts, size, stream), label))
    return cases


# ------------------------------------------------------------ exercise 2
def _order_case(sizes: list, layers: int, mib: int, label: str) -> Case:
    def judge(fn):
        plan = fn(list(sizes))
        if type(plan) is not list:                   # the README promises a list: an iterator is read once
            raise Fail(tr("plan({sizes}) returned a {got_type}; return a list of the batch sizes",
                          sizes=sizes, got_type=type(plan).__name__),
                       tr("your plan did not return a list"))
        if sorted(plan) != sorted(sizes):
            raise Fail(tr("plan({sizes}) returned {plan!r}; return the same batch sizes, reordered",
                          sizes=sizes, plan=plan),
                       tr("your plan is not a reordering of the batch sizes"))
        best = reserved_after_captures(sorted(sizes, reverse=True), layers, mib)
        got = reserved_after_captures(plan, layers, mib)
        if got > best:
            raise Fail(tr("captured in the order {plan}, the shared pool reserves {got}; largest first reserves "
                          "{best}. A capture can reuse only freed blocks big enough for it",
                          plan=plan, got=fmt(got), best=fmt(best)),
                       tr("your order makes the shared pool reserve more than the best order does"))
    return Case(label, judge, data=(tuple(sizes), layers, mib))


def _order_public() -> list:
    return [_order_case([3], 4, 6, tr("one batch size")),
            _order_case([4, 2, 1], 4, 6, "batch sizes 4, 2, 1")]


def _order_hidden(rng: random.Random) -> list:
    cases = []
    for _ in range(2 if _quick() else 4):
        layers, mib = rng.randint(2, 5), rng.choice([3, 5, 6, 8])
        sizes = rng.sample(range(1, 9), rng.randint(3, 5))
        if not cases:                                  # a batch size captured twice (a plan must keep both)
            sizes.append(rng.choice(sizes))
        # draw an order in which capturing as given costs more than the best order
        # (so keeping the given order is never right by luck)
        best = reserved_after_captures(sorted(sizes, reverse=True), layers, mib)
        for _ in range(20):
            if reserved_after_captures(sizes, layers, mib) > best:
                break
            rng.shuffle(sizes)
        cases.append(_order_case(sizes, layers, mib, tr("batch sizes in another order")))
    # First, on every seed: three sizes where every order but the full descending one reserves more, so a
    # near-miss (largest first, then ascending) is caught whatever the learner's seed.
    cases.insert(0, _order_case(*_only_descending_wins(rng), tr("three batch sizes")))
    return cases


def _only_descending_wins(rng: random.Random) -> tuple:
    """(sizes, layers, mib): three distinct batch sizes, in a random order, whose every capture order
    except the full descending one makes the shared pool reserve more."""
    for _ in range(200):
        layers, mib = rng.randint(2, 5), rng.choice([3, 5, 6, 8])
        sizes = rng.sample(range(1, 9), 3)
        if _only_descending(sizes, layers, mib):
            return sizes, layers, mib
    return [5, 1, 4], 3, 3                            # found by this search; the loop almost never gets here


def _only_descending(sizes, layers: int, mib: int) -> bool:
    descending = sorted(sizes, reverse=True)
    best = reserved_after_captures(descending, layers, mib)
    return all(reserved_after_captures(list(order), layers, mib) > best
               for order in set(itertools.permutations(sizes)) if list(order) != descending)


# ------------------------------------------------------------ exercise 3
ACTIONS = ("free_block", "insert_events", "deferred")


def free_outcome(uses: int, pools_open: int) -> tuple:
    """Run it: free a 4 MiB default-pool block used on ``uses`` other (busy) streams while
    ``pools_open`` MemPool contexts are open in other threads; then synchronize and ask again.

    Returns (what free did, whether the next 4 MiB request got the same block)."""
    a = CachingAllocator(lab_device())
    others = [a.device.create_stream() for _ in range(uses)]
    x = a.malloc(4 * MiB)
    for s in others:
        a.record_stream(x, s)
        a.device.sleep(s, 100.0)              # a kernel on s reads x
    elsewhere = -1 - threading.get_ident()    # a thread id that is not ours
    pools = [MemPool(a) for _ in range(pools_open)]
    for pool in pools:                        # what use_mem_pool does in that thread
        a.device_allocator.begin_allocate_to_pool(pool.id, lambda s, t=elsewhere: threading.get_ident() == t)
    a.free(x)
    block = x._block
    action = ("deferred" if block in a.device_allocator.deferred_blocks else
              "insert_events" if block.event_count > 0 else "free_block")
    a.device.synchronize()
    y = a.malloc(4 * MiB)
    return action, y.ptr == x.ptr


def _free_case(uses: int, pools_open: int, label: str) -> Case:
    def judge(fn):
        want = free_outcome(uses, pools_open)
        got = fn(uses, pools_open)
        if not (isinstance(got, tuple) and len(got) == 2 and got[0] in ACTIONS and isinstance(got[1], bool)):
            raise Fail(tr("after_free returned {got!r}; return (one of {actions}, True or False)",
                          got=got, actions=ACTIONS),
                       tr("after_free did not return an (action, reused) pair"))
        situation = (tr("a block used on {uses} other stream(s), freed while {pools_open} use_mem_pool "
                        "context(s) are open in other threads",
                        uses=uses, pools_open=pools_open))
        if got[0] != want[0]:
            raise Fail(tr("{situation}: free does {want_0!r}; yours said {got_0!r}",
                          situation=situation, want_0=want[0], got_0=got[0]),
                       tr("what free does differs from the allocator (does an open pool elsewhere change it?)"))
        if got[1] != want[1]:
            raise Fail(tr("{situation}: after a synchronize the next request gets the block back; yours said "
                          "{said}", situation=situation, said=got[1]) if want[1] else
                       tr("{situation}: after a synchronize the next request does not get the block back; yours "
                          "said {said}", situation=situation, said=got[1]),
                       tr("whether the block is reused differs (does malloc run process_events?)"))
    return Case(label, judge, data=(uses, pools_open))


def _free_public() -> list:
    return [_free_case(0, 0, tr("no other stream, no pool open")),
            _free_case(1, 0, tr("used on one other stream, no pool open")),
            _free_case(0, 1, tr("no other stream, a MemPool open in another thread"))]


def _free_hidden(rng: random.Random) -> list:
    """Always a cross-stream free under an open pool (the case #175015 is about), then a mix."""
    cases = [_free_case(rng.randint(1, 3), rng.randint(1, 2), tr("a cross-stream free while a pool is open "
                                                                 "elsewhere")),
             _free_case(rng.randint(1, 3), 0, tr("a cross-stream free, no pool open")),
             _free_case(0, rng.randint(1, 2), tr("a same-stream free while a pool is open elsewhere"))]
    for _ in range(0 if _quick() else 2):
        cases.append(_free_case(rng.randint(0, 3), rng.randint(0, 2), tr("streams and open pools, mixed")))
    return cases


def _quick() -> bool:
    from .check import quick
    return quick()


register(Exercise(
    id="lab8.get_pool", pure=True, lab=8, title=later("route(captures, size, stream): get_pool's routing rule"),
    public=_route_public, hidden=_route_hidden, what=later("route function"),
    hint=later("Walk captures_underway from the NEWEST entry (the end of the list) to the oldest and take the "
               "first whose accepts(stream) is true; no entry accepts -> (0, 0). Then small if size <= 1 MiB, "
               "else large."),
    nudge=(later("When two contexts are open at once (a use_mem_pool inside another), which one does PyTorch "
                 "honour: the one opened first, or the one opened last?"),
           later("In which order does PyTorch look through the open contexts, and what does it pick when none "
                 "of them accepts the stream?")),
))

register(Exercise(
    id="lab8.capture_order", pure=True, lab=8, title=later("plan(batch_sizes): the capture order for one shared "
                                                           "pool"),
    public=_order_public, hidden=_order_hidden, what=later("plan function"),
    hint=later("A later capture can reuse blocks an earlier capture freed only if they are big enough. Which "
               "order makes every later step fit in what the first one left behind?"),
    nudge=(later("A freed block serves only requests no larger than itself: compare the order you chose with the "
                 "sizes each capture leaves behind."),
           later("Which capture leaves behind the biggest freed blocks, and what must every capture after it "
                 "ask for so that it fits in them? Return a list.")),
))

register(Exercise(
    id="lab8.cross_stream_free", pure=True, lab=8, title=later("after_free(uses, pools_open): a cross-stream "
                                                               "free and open pools"),
    public=_free_public, hidden=_free_hidden, what=later("after_free function"),
    hint=later("No other stream used it: free_block, reused. Other streams and nothing open: insert_events, and "
               "after a synchronize malloc's process_events frees it: reused. Other streams while ANY "
               "use_mem_pool is open (any thread): captures_underway is not empty, so free defers it and malloc "
               "skips process_events: ('deferred', False)."),
    nudge=(later("use_mem_pool and a CUDA graph capture share one list, captures_underway. What does free do with "
                 "a block that has stream uses while that list is not empty, and does malloc then look at events?"),
           later("Take the three cases apart: no other stream used the block; other streams, nothing open; "
                 "other streams while a pool is open. Which one is the failing input?")),
))


# The states free() tells apart (DeviceCachingAllocator::free: stream uses? captures_underway empty?):
# every seed's hidden cases meet each one (make check-labs proves it).
from .spec import Edge, edges  # noqa: E402

edges("lab8.cross_stream_free",
      Edge("stream uses while a pool is open elsewhere: deferred, not reused", lambda d: d[0] > 0 and d[1] > 0),
      Edge("stream uses, no pool open: events inserted, reused after a synchronize", lambda d: d[0] > 0 and d[1] == 0),
      Edge("no stream uses while a pool is open: freed at once", lambda d: d[0] == 0 and d[1] > 0))

edges("lab8.get_pool",
      Edge("exactly 1 MiB (kSmallSize): the small list", lambda d: d[1] == kSmallSize),
      Edge("512 B past 1 MiB: the large list", lambda d: d[1] == kSmallSize + 512),
      Edge("512 B below 1 MiB: the small list", lambda d: d[1] == kSmallSize - 512),
      Edge("an older entry accepts the stream, the newest does not",
           lambda d: d[0] and d[2] not in d[0][-1] and any(d[2] in h for h in d[0][:-1])),
      Edge("no entry accepts the stream: the default pools", lambda d: d[0] and not any(d[2] in h for h in d[0])),
      Edge("several entries accept: the newest wins", lambda d: sum(d[2] in h for h in d[0]) >= 2))

edges("lab8.capture_order",
      Edge("a batch size captured twice", lambda d: len(set(d[0])) < len(d[0])),
      Edge("only the full descending order reaches the best",
           lambda d: len(d[0]) == 3 and _only_descending(list(d[0]), d[1], d[2])),
      Edge("the order as given reserves more than the best order",
           lambda d: reserved_after_captures(list(d[0]), d[1], d[2])
           > reserved_after_captures(sorted(d[0], reverse=True), d[1], d[2])))
