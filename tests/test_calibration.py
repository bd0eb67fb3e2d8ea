"""Calibration: a GPU measurement (tools/gpu_measure.py) becomes a simulated profile (tools/calibrate.py).

(a) a synthetic measurement made here -- a test input, not a measurement of
    anything -- calibrates into a profile that SimDevice loads and that prices
    each call exactly as given;
(b) every real measurement committed under profiles/measured/ agrees with the
    default simulated costs within 2x wherever both have a figure.
"""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from allocator_ref.device import CostModel, SimDevice
from allocator_ref.device.costs import _pages

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import calibrate  # noqa: E402

MiB, GiB = 1 << 20, 1 << 30
SIZES = [512, 4096, 65536, MiB, 2 * MiB, 16 * MiB, 128 * MiB, GiB]
# The made-up device this test calibrates against (linear in pages, so the fit is exact).
MALLOC = (12.0, 3.0)        # base, per 2 MiB page
FREE = (40.0, 8.0)


def synthetic_measurement() -> dict:
    """Shaped like gpu_measure.py's output; every number invented for this test."""
    return {
        "date": "1999-01-01", "gpu": "SYNTHETIC TEST INPUT GPU", "driver_version": "0.0",
        "cuda_runtime_version": "0.0", "units": "host wall time in microseconds, median of several runs",
        "results": {
            "malloc_free": {str(s): {"malloc_us": MALLOC[0] + MALLOC[1] * _pages(s),
                                     "free_us": FREE[0] + FREE[1] * _pages(s)} for s in SIZES},
            "free_behind_kernel": {"queued_kernel_us": 2000, "free_2mib_us": 2050.0,
                                   "malloc_2mib_behind_kernel_us": 14.0},
            "async_pool": {"hit_2mib_us": 0.9, "miss_2mib_us": 30.0, "alloc_free_sync_loop_threshold0_us": 500.0},
            "vmm_steps": {"granularity": 2 * MiB, "reserve_per_2mib_us": 5.0, "create_per_2mib_us": 20.0,
                          "map_per_2mib_us": 2.0, "set_access_per_2mib_us": 15.0, "unmap_per_2mib_us": 10.0,
                          "release_per_2mib_us": 9.0, "address_free_per_2mib_us": 4.0},
            "pinned": {"host_alloc_1mib_us": 600.0, "host_free_1mib_us": 100.0, "host_register_1mib_us": 50.0,
                       "host_alloc_128mib_us": 600.0 + 127 * 250.0, "host_free_128mib_us": 12800.0,
                       "host_register_128mib_us": 6400.0},
            "ipc_open": {"error": "RuntimeError: a failed section is recorded like this and ignored"},
            "mem_info": {"mem_get_info_us": 4.0, "total_memory": 8 * GiB, "used_at_open_bytes": 400 * MiB,
                         "free_delta_after_malloc_1_byte": 2 * MiB},
        },
    }


def test_a_synthetic_measurement_calibrates_into_a_profile_simdevice_runs_on(tmp_path):
    meas_path = tmp_path / "synthetic-test-input.json"
    meas_path.write_text(json.dumps(synthetic_measurement()))
    out = tmp_path / "measured-synthetic.json"
    run = subprocess.run([sys.executable, str(ROOT / "tools" / "calibrate.py"), str(meas_path), "--out", str(out)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "wrote" in run.stdout and "cudaMalloc(1073741824)" in run.stdout

    dev = SimDevice(out)                        # a Path: loaded from that file
    try:
        c = dev.costs
        for size in SIZES:
            assert c.malloc_us(size) == pytest.approx(MALLOC[0] + MALLOC[1] * _pages(size))
            assert c.free_us(size) == pytest.approx(FREE[0] + FREE[1] * _pages(size))
        assert c.free_syncs_device and not c.malloc_syncs_device
        assert c.pool_hit_us() == 0.9 and c.mem_get_info_us() == 4.0
        assert (c.vmm_reserve_us(), c.vmm_address_free_us()) == (5.0, 4.0)
        g = 2 * MiB
        assert (c.vmm_create_us(g), c.vmm_map_us(g), c.vmm_set_access_us(g), c.vmm_unmap_us(g),
                c.vmm_release_us(g)) == (20.0, 2.0, 15.0, 10.0, 9.0)
        assert c.host_alloc_us(MiB) == pytest.approx(600.0) and c.host_alloc_us(128 * MiB) == pytest.approx(32350.0)
        assert c.host_free_us(128 * MiB) == pytest.approx(12800.0)
        assert c.host_register_us(MiB) == pytest.approx(50.0)
        assert c.ipc_open_us() == CostModel().ipc_open_us()          # failed section: the default stays
        assert dev.info.total_memory == 8 * GiB and dev.info.context_reserve == 400 * MiB
        free, total = dev.mem_get_info()
        assert total - free == 400 * MiB
        # every calibrated number says where and when it was measured
        profile = json.loads(out.read_text())
        for key, entry in profile["costs"].items():
            assert entry["source"].startswith("measured on SYNTHETIC TEST INPUT GPU on 1999-01-01 by "
                                              "tools/gpu_measure.py"), key
        assert profile["total_memory"]["source"].startswith("measured on SYNTHETIC TEST INPUT GPU")
        assert profile["memory_bandwidth_gbps"]["source"].startswith("not measured; from profile h100-80gb")
        # and the simulated clock runs on them: one cudaMalloc of 1 MiB costs 12 + 3 us of host time
        before = dev.now_us()
        dev.free(dev.malloc(MiB))
        assert dev.now_us() - before == pytest.approx(MALLOC[0] + MALLOC[1] + FREE[0] + FREE[1])
    finally:
        dev.close()


def test_a_bad_cost_override_names_the_key():
    with pytest.raises(ValueError, match="malloc_bse_us"):
        CostModel(overrides={"malloc_bse_us": {"value": 1, "source": "typo"}})


def test_the_fit_recovers_a_line_and_stays_non_negative():
    assert calibrate.fit_linear([(1, 10), (8, 24), (64, 136)]) == pytest.approx((8.0, 2.0))
    base, slope = calibrate.fit_linear([(1, 50), (8, 40), (64, 30)])          # falling: a flat cost
    assert slope == 0 and 30 < base < 50


REAL = calibrate.measurement_files()


@pytest.mark.skipif(not REAL, reason="no GPU measurement committed yet: run make gpu-check on a GPU")
@pytest.mark.parametrize("path", REAL, ids=lambda p: p.stem)
def test_default_costs_are_within_2x_of_every_committed_measurement(path):
    meas = json.loads(path.read_text())
    rows = calibrate.comparison(meas)
    assert rows, f"{path.name}: no figure in common with the cost model"
    outside = [f"{r['what']}: measured {r['measured_us']:.2f} us, simulated {r['simulated_us']:.2f} us "
               f"({r['ratio']:.1f}x)" for r in rows if r["ratio"] > calibrate.TOLERANCE]
    assert not outside, (f"{path.name}: default costs more than 2x off (recalibrate profiles/costs.json "
                         "citing this file):\n" + "\n".join(outside))
