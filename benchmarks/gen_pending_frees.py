"""A generated trace with a long backlog of ``record_stream`` frees, recorded by the reference allocator.

The shape that made both replays quadratic: a training loop hands many tensors to a side
stream (``tensor.record_stream(side)``) and frees them while the side stream is still busy,
so thousands of frees wait for their events at once, and every malloc in between must
look at that backlog (``process_events`` in ``DeviceCachingAllocator::malloc``).

``pending_frees_snapshot(frees)`` records, on the simulated H100:

* ``frees`` rounds of: a block on the default stream, used on one of a few side streams
  (``record_stream``) whose kernel runs far longer than the loop, then freed -- its
  ``free_requested`` comes now, its ``free_completed`` only when that kernel is done;
* every few rounds a malloc of a scratch block that is freed at once, so mallocs run
  while the backlog is growing;
* then the side streams finish (the clock passes their kernels), and the next mallocs
  complete the backlog stream by stream, in the order the events finish.

Nothing is copied from a real run: the sizes cycle through a few values, and the result is
the allocator's own ``snapshot()`` (every event and the final segments).
"""
from __future__ import annotations

SIDE_STREAMS = 4
SIZES = (4096, 12288, 65536, 524288, 1536 * 1024)     # small-pool and large-pool blocks


def pending_frees_snapshot(frees: int = 16_000, side_streams: int = SIDE_STREAMS) -> dict:
    """The snapshot of a run with ``frees`` record_stream frees pending at once (see the module doc)."""
    from allocator_ref.caching import CachingAllocator
    from allocator_ref.device.sim import SimDevice

    device = SimDevice("h100-80gb")
    allocator = CachingAllocator(device, "")
    allocator.record_memory_history(context=None)
    side = [device.create_stream() for _ in range(side_streams)]
    for k, stream in enumerate(side):
        # Longer than the whole loop takes on the simulated clock, and a different length per
        # stream, so the backlog completes stream after stream.
        device.sleep(stream, 10_000_000.0 * (k + 1))
    for i in range(frees):
        block = allocator.malloc(SIZES[i % len(SIZES)])
        allocator.record_stream(block, side[i % side_streams])
        allocator.free(block)                    # pending: the side stream still runs
        if i % 8 == 7:
            allocator.free(allocator.malloc(SIZES[(i // 8) % len(SIZES)]))
    for stream in side:                          # the side streams finish, one after another
        stream.synchronize()
        allocator.free(allocator.malloc(SIZES[0]))   # this malloc's process_events completes them
    return allocator.snapshot()


if __name__ == "__main__":                       # python -m benchmarks.gen_pending_frees N OUT.pickle
    import sys

    from allocator_ref.trace.snapshot import save_snapshot
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 16_000
    out = sys.argv[2] if len(sys.argv) > 2 else f"pending-frees-{n}.pickle"
    print(save_snapshot(pending_frees_snapshot(n), out))
