"""Turn a real GPU's measurements into a simulated device profile (calibration).

The workflow, on a machine with an NVIDIA GPU and then anywhere:

1. ``make gpu-check`` runs ``tools/gpu_measure.py``, which writes
   ``allocator_ref/device/profiles/measured/<date>-<gpu>.json`` (host wall
   time of cudaMalloc/cudaFree by size, the async pool, each VMM step, pinned
   memory, IPC open, cudaMemGetInfo; the GPU's capacity and context share).
   Commit that file.
2. ``python tools/calibrate.py allocator_ref/device/profiles/measured/<file>.json``
   prints the measured figures next to what the default simulated costs
   (``profiles/costs.json``) predict for the same calls, and writes
   ``allocator_ref/device/profiles/measured-<gpu>.json``: a profile whose
   capacity, context reserve, granularity and costs are the measured ones,
   every number's source reading "measured on <GPU> on <date> by
   tools/gpu_measure.py".  ``SimDevice("measured-<gpu>")`` (or
   ``ALLOCATOR_REF_PROFILE=measured-<gpu>``) then runs on those costs; what
   was not measured (bandwidths, alignment, kernel launch, pooled free) keeps
   the base profile's figure and its source.
3. ``tests/test_calibration.py`` checks every committed measurement against
   the *default* costs: each figure both sides have must agree within 2x.  A
   figure that does not is a default to recalibrate in ``costs.json`` (cite
   the measurement file as its source).

How figures become costs: cudaMalloc/cudaFree are fitted as ``base + per 2 MiB
page x pages`` (least squares on the relative error, both terms >= 0), pinned
alloc as ``base + per MiB x MiB``, pinned free/register as ``per MiB x MiB``;
the other steps are taken as measured (medians of several runs).
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from allocator_ref.device.costs import PROFILE_DIR, CostModel, _pages, load_profile  # noqa: E402

MiB = 1 << 20
MEASURED_DIR = PROFILE_DIR / "measured"
TOLERANCE = 2.0

# measurement section -> field -> costs.json key, for figures taken as they are
DIRECT = {
    ("async_pool", "hit_2mib_us"): "pool_hit_us",
    ("vmm_steps", "reserve_per_2mib_us"): "vmm_reserve_us",
    ("vmm_steps", "address_free_per_2mib_us"): "vmm_address_free_us",
    ("vmm_steps", "create_per_2mib_us"): "vmm_create_per_2mib_us",
    ("vmm_steps", "release_per_2mib_us"): "vmm_release_per_2mib_us",
    ("vmm_steps", "map_per_2mib_us"): "vmm_map_per_2mib_us",
    ("vmm_steps", "set_access_per_2mib_us"): "vmm_set_access_per_2mib_us",
    ("vmm_steps", "unmap_per_2mib_us"): "vmm_unmap_per_2mib_us",
    ("ipc_open", "open_us"): "ipc_open_us",
    ("mem_info", "mem_get_info_us"): "mem_get_info_us",
}
# which built-in profile to take the unmeasured numbers from, by GPU name
BASES = (("h200", "h200-141gb"), ("h100", "h100-80gb"), ("t4", "t4-16gb"))


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def measured_source(meas: dict, what: str) -> str:
    return (f"measured on {meas['gpu']} on {meas['date']} by tools/gpu_measure.py "
            f"(driver {meas.get('driver_version', '?')}, CUDA {meas.get('cuda_runtime_version', '?')}; {what})")


def _section(meas: dict, name: str) -> dict:
    sec = meas.get("results", {}).get(name) or {}
    return {} if "error" in sec else sec


def _number(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def fit_linear(points: list[tuple[float, float]], with_base: bool = True) -> tuple[float, float]:
    """(base, slope) >= 0 minimising the squared *relative* error of base + slope*x over (x, y)."""
    pts = [(x, y) for x, y in points if y > 0]
    if not pts:
        raise ValueError("nothing to fit")
    w = [1.0 / (y * y) for _, y in pts]
    through_origin = lambda: (0.0, sum(wi * x * y for wi, (x, y) in zip(w, pts)) /  # noqa: E731
                              sum(wi * x * x for wi, (x, _) in zip(w, pts)))
    if not with_base:
        return through_origin()
    s = sum(w)
    sx = sum(wi * x for wi, (x, _) in zip(w, pts))
    sy = sum(wi * y for wi, (_, y) in zip(w, pts))
    sxx = sum(wi * x * x for wi, (x, _) in zip(w, pts))
    sxy = sum(wi * x * y for wi, (x, y) in zip(w, pts))
    det = s * sxx - sx * sx
    if abs(det) < 1e-12 * max(1.0, s * sxx):        # one x only: all of it is the base
        return sy / s, 0.0
    base, slope = (sy * sxx - sx * sxy) / det, (s * sxy - sx * sy) / det
    if slope < 0:
        return sy / s, 0.0
    if base < 0:
        return through_origin()
    return base, slope


def _entry(value, basis: str, source: str) -> dict:
    return {"value": round(value, 3) if isinstance(value, float) else value, "basis": basis, "source": source}


def calibrated_costs(meas: dict) -> dict:
    """costs.json entries for everything ``meas`` measured."""
    costs: dict = {}
    mf = _section(meas, "malloc_free")
    for call in ("malloc", "free"):
        pts = [(_pages(int(size)), _number(row.get(f"{call}_us"))) for size, row in mf.items()]
        pts = [(x, y) for x, y in pts if y is not None]
        if pts:
            base, per_page = fit_linear([(x, y) for x, y in pts])
            # the model is base + per_page * pages, with base the part a 1-page call pays beyond its page
            what = f"malloc_free: {call}_us at {len(pts)} sizes, fitted base + per 2 MiB page"
            costs[f"{call}_base_us"] = _entry(base, "measured", measured_source(meas, what))
            costs[f"{call}_per_2mib_us"] = _entry(per_page, "measured", measured_source(meas, what))
    behind = _section(meas, "free_behind_kernel")
    queued = _number(behind.get("queued_kernel_us"))
    if queued:
        if _number(behind.get("free_2mib_us")) is not None:
            syncs = behind["free_2mib_us"] >= 0.5 * queued
            costs["free_syncs_device"] = _entry(syncs, "measured", measured_source(
                meas, f"free_behind_kernel: cudaFree took {behind['free_2mib_us']} us behind a {queued:g} us kernel"))
        if _number(behind.get("malloc_2mib_behind_kernel_us")) is not None:
            syncs = behind["malloc_2mib_behind_kernel_us"] >= 0.5 * queued
            costs["malloc_syncs_device"] = _entry(syncs, "measured", measured_source(
                meas, f"free_behind_kernel: cudaMalloc took {behind['malloc_2mib_behind_kernel_us']} us "
                      f"behind a {queued:g} us kernel"))
    for (section, name), key in DIRECT.items():
        value = _number(_section(meas, section).get(name))
        if value is not None:
            costs[key] = _entry(value, "measured", measured_source(meas, f"{section}.{name}, median"))
    pin = _section(meas, "pinned")
    for call, key_fmt, with_base in (("alloc", "host_alloc", True), ("free", "host_free", False),
                                     ("register", "host_register", False)):
        pts = []
        for field, value in pin.items():
            m = re.fullmatch(rf"host_{call}_(\d+)mib_us", field)
            if m and _number(value) is not None:
                pts.append((float(m.group(1)), float(value)))
        if pts:
            base, per_mib = fit_linear(pts, with_base=with_base and len(pts) > 1)
            if with_base and len(pts) == 1:
                base, per_mib = 0.0, pts[0][1] / pts[0][0]
            what = f"pinned: {key_fmt} at {', '.join(f'{x:g}' for x, _ in pts)} MiB, fitted"
            if with_base:
                costs[f"{key_fmt}_base_us"] = _entry(base, "measured", measured_source(meas, what))
            costs[f"{key_fmt}_per_mib_us"] = _entry(per_mib, "measured", measured_source(meas, what))
    return costs


def base_profile_for(gpu: str) -> str:
    lowered = gpu.lower()
    return next((name for key, name in BASES if key in lowered), "h100-80gb")


def calibrated_profile(meas: dict, base: str | None = None) -> dict:
    """A profile dict (the shape of profiles/*.json) from one measurement file."""
    base = base or base_profile_for(meas["gpu"])
    prof = load_profile(base)
    info = _section(meas, "mem_info")
    vmm = _section(meas, "vmm_steps")
    out = {"name": f"measured-{slug(meas['gpu'])}",
           "description": f"{meas['gpu']} as measured on {meas['date']} by tools/gpu_measure.py "
                          f"(made by tools/calibrate.py; unmeasured numbers from {base})",
           "gpu": f"{meas['gpu']} (simulated, calibrated on {meas['date']})"}
    measured = {"total_memory": ("mem_info.total_memory", _number(info.get("total_memory"))),
                "context_reserve": ("mem_info.used_at_open_bytes", _number(info.get("used_at_open_bytes"))),
                "vmm_granularity": ("vmm_steps.granularity", _number(vmm.get("granularity")))}
    for key in ("total_memory", "context_reserve", "vmm_granularity", "malloc_alignment",
                "memory_bandwidth_gbps", "host_link_gbps"):
        what, value = measured.get(key, (None, None))
        if value is not None:
            out[key] = {"value": int(value), "source": measured_source(meas, what)}
        else:
            out[key] = {"value": getattr(prof, key), "source": f"not measured; from profile {base}: {prof.sources[key]}"}
    out["costs"] = calibrated_costs(meas)
    return out


def comparison(meas: dict, costs: CostModel | None = None) -> list[dict]:
    """Each measured figure the cost model also prices: {what, measured_us, simulated_us, ratio}."""
    costs = costs or CostModel()
    rows = []

    def add(what, measured, simulated):
        measured = _number(measured)
        if measured is not None and measured > 0 and simulated > 0:
            rows.append({"what": what, "measured_us": measured, "simulated_us": round(simulated, 3),
                         "ratio": max(measured, simulated) / min(measured, simulated)})

    for size, row in sorted(_section(meas, "malloc_free").items(), key=lambda kv: int(kv[0])):
        add(f"cudaMalloc({int(size)})", row.get("malloc_us"), costs.malloc_us(int(size)))
        add(f"cudaFree({int(size)})", row.get("free_us"), costs.free_us(int(size)))
    for (section, name), key in DIRECT.items():
        add(f"{section}.{name}", _section(meas, section).get(name), float(costs.value(key)))
    for field, value in _section(meas, "pinned").items():
        m = re.fullmatch(r"host_(alloc|free|register)_(\d+)mib_us", field)
        if m:
            add(f"pinned.{field}", value, getattr(costs, f"host_{m.group(1)}_us")(int(m.group(2)) * MiB))
    return rows


def measurement_files(folder: Path = MEASURED_DIR) -> list[Path]:
    """The real measurements committed (``<date>-<gpu>.json`` written by gpu_measure.py)."""
    return sorted(p for p in folder.glob("*.json") if p.is_file()) if folder.is_dir() else []


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("measurement", type=Path, help="a JSON file written by tools/gpu_measure.py")
    ap.add_argument("--out", type=Path, help="where to write the profile (default profiles/measured-<gpu>.json)")
    ap.add_argument("--base", help="built-in profile for what was not measured (default: by GPU name)")
    args = ap.parse_args(argv)
    meas = json.loads(args.measurement.read_text())
    for key in ("gpu", "date", "results"):
        if key not in meas:
            print(f"calibrate: {args.measurement} has no {key!r}: not a tools/gpu_measure.py file", file=sys.stderr)
            return 2
    profile = calibrated_profile(meas, args.base)
    out = args.out or PROFILE_DIR / f"{profile['name']}.json"
    out.write_text(json.dumps(profile, indent=2) + "\n")
    print(f"calibrate: wrote {out} ({len(profile['costs'])} measured costs); "
          f"use it with SimDevice({profile['name']!r})" if out.parent == PROFILE_DIR else
          f"calibrate: wrote {out} ({len(profile['costs'])} measured costs)")
    print(f"{'call':44} {'measured us':>12} {'default sim us':>15} {'ratio':>7}")
    for row in comparison(meas):
        flag = "" if row["ratio"] <= TOLERANCE else "  <- outside 2x: recalibrate costs.json"
        print(f"{row['what']:44} {row['measured_us']:12.2f} {row['simulated_us']:15.2f} {row['ratio']:7.2f}{flag}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
