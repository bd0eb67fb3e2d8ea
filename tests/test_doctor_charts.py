"""The what-if chart (doctor and ``compare --plot``): fragmentation is visible, labels are readable."""
import matplotlib

matplotlib.use("Agg")

from allocator_ref.__main__ import main                      # noqa: E402
from allocator_ref.memory_doctor.charts import plot_what_if    # noqa: E402

GiB, MiB = 2**30, 2**20

# Like the real expandable-OOM trace: every design reserves about 23.5 GiB; they differ by MiB.
ROWS = [{"label": label, "peak_reserved": int(r * GiB), "peak_allocated": int(r * GiB) - int(f * MiB),
         "fragmentation": int(f * MiB), "fits": fits}
        for label, r, f, fits in [("caching (default)", 23.52, 130, False),
                                  ("caching: expandable_segments:True", 23.41, 12, True),
                                  ("caching: max_split_size_mb:128", 23.50, 95, False),
                                  ("caching: roundup_power2_divisions:4", 23.60, 210, False),
                                  ("stream_ordered", 23.45, 60, True), ("bfc", 23.90, 450, False),
                                  ("direct", 23.39, 0, True)]]


def _boxes(fig, labels):
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    return [t.get_window_extent(renderer) for t in labels if t.get_text()]


def test_differences_of_a_few_mib_are_visible():
    fig = plot_what_if(ROWS, target=int(23.5 * GiB))
    left, right = fig.axes[:2]
    lo, hi = left.get_xlim()
    assert lo > 20, "the reserved axis must be zoomed to where the bars differ"
    # Bars of the same value on the zoomed axis differ visibly in length: 23.39 vs 23.90 GiB.
    widths = [p.get_width() - lo for p in left.patches]
    assert max(widths) > 3 * min(widths)
    # Fragmentation has its own bars, from zero, in MiB: the values given.
    assert right.get_xlim()[0] == 0
    assert [round(p.get_width()) for p in right.patches] == [130, 12, 95, 210, 60, 450, 0]
    assert "starts at" in left.get_xlabel()


def test_labels_do_not_overlap():
    fig = plot_what_if(ROWS)
    left = fig.axes[0]
    boxes = _boxes(fig, left.get_yticklabels())
    assert len(boxes) == len(ROWS)
    for a, b in zip(boxes, boxes[1:]):
        assert not a.overlaps(b), (a, b)
    # and none runs off the figure's left edge
    assert min(b.x0 for b in boxes) >= 0


def test_compare_plot_uses_it(tmp_path, capsys):
    import allocator_ref as ar
    a = ar.CachingAllocator(ar.SimDevice("tiny-1gb"), "")
    a.record_memory_history(max_entries=10_000)
    xs = [a.malloc(s * MiB) for s in (3, 7, 12, 5, 30)]
    for x in xs[::2]:
        a.free(x)
    path = ar.save_snapshot(a.snapshot(), tmp_path / "run.pickle")
    png = tmp_path / "whatif.png"
    assert main(["compare", str(path), "--plot", str(png), "--device-memory", "1"]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    assert "plot written" in capsys.readouterr().out
