"""Timelines from the real PyTorch snapshots in ../shared/traces, checked against sums done here."""
import pickle
from pathlib import Path

import matplotlib
import numpy as np
import pytest

matplotlib.use("Agg")

from allocator_ref.viz.timeline import (DEFAULT_CONTEXT_RESERVE, memory_curves, plot_active_timeline,  # noqa: E402
                                        plot_memory, record_memory)

TRACES = Path(__file__).resolve().parents[1].parent / "shared" / "traces"


class RefuseGlobals(pickle.Unpickler):
    """Snapshots are plain dicts and lists: any global in the pickle is refused."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"refusing global {module}.{name} in a snapshot")


def load(name):
    path = TRACES / name
    if not path.exists():
        pytest.skip(f"real PyTorch snapshot {path} is not here (the course reads them from ../shared/traces)")
    with open(path, "rb") as f:
        return RefuseGlobals(f).load()


def line(fig, gid):
    return next(l for ax in fig.axes for l in ax.get_lines() if l.get_gid() == gid)


@pytest.mark.parametrize("name", ["small-from-empty.pickle", "cs336-gpt-ctx128-fullstep.pickle",
                                  "hf-finetune-expandable-oom.pickle"])
def test_memory_curves_end_where_the_snapshot_says(name):
    snap = load(name)
    segments = [s for s in snap["segments"] if s["device"] == 0]
    reserved = sum(b["size"] for s in segments for b in s["blocks"])       # counted block by block
    allocated = sum(b["requested_size"] for s in segments for b in s["blocks"] if b["state"] == "active_allocated")
    fig = plot_memory(snap, simulated=False)
    unit = 2**30 if "GiB" in fig.axes[0].get_ylabel() else 2**20
    assert line(fig, "reserved").get_ydata()[-1] * unit == pytest.approx(reserved)
    assert line(fig, "allocated").get_ydata()[-1] * unit == pytest.approx(allocated)
    assert line(fig, "nvidia-smi").get_ydata()[-1] * unit == pytest.approx(reserved + DEFAULT_CONTEXT_RESERVE)
    assert len(line(fig, "reserved").get_xdata()) == len(snap["device_traces"][0])
    assert "simulated" not in fig.axes[0].get_title()
    matplotlib.pyplot.close(fig)


def test_a_trace_recorded_from_empty_starts_at_zero():
    snap = load("small-from-empty.pickle")     # recorded from an empty allocator: nothing existed before
    curves = memory_curves(snap)
    assert curves.allocated[0] == 0 and curves.reserved[0] == snap["device_traces"][0][0]["size"]
    # independently: peak reserved = running sum of segment_alloc sizes (this trace never frees a segment)
    assert curves.reserved.max() == sum(e["size"] for e in snap["device_traces"][0] if e["action"] == "segment_alloc")


def test_active_timeline_of_a_real_trace():
    snap = load("small-from-empty.pickle")
    fig = plot_active_timeline(snap, simulated=True)
    total = line(fig, "active-total").get_ydata()
    unit = 2**30 if "GiB" in fig.axes[0].get_ylabel() else 2**20
    active = sum(b["requested_size"] for s in snap["segments"] for b in s["blocks"] if b["state"] != "inactive")
    assert total[-1] * unit == pytest.approx(active)
    assert fig.axes[0].get_title().endswith("(simulated)")
    matplotlib.pyplot.close(fig)


def test_samples_from_a_live_simulated_allocator():
    import allocator_ref as ar
    a = ar.CachingAllocator(ar.SimDevice("tiny-1gb"), "")
    with record_memory(a) as samples:
        x = a.malloc(5 * 2**20)
        a.free(x)
        a.empty_cache()
    free, total = a.device.mem_get_info()
    fig = plot_memory(samples)              # a simulated device says so by itself
    assert "(simulated)" in fig.axes[0].get_title()
    visible = np.array(samples.visible)
    assert visible[-1] == total - free and visible.max() - visible[-1] == 20 * 2**20
    matplotlib.pyplot.close(fig)
