"""Streams x device memory beyond the simulated address space (issue 32, item 2).

Each expandable segment reserves 1.125x the device's memory of addresses, one per stream and pool,
and the simulated GPU has 2**63 bytes of them: about 7,300 streams of a 1 PiB device (--device-memory's
bound) do not fit.  Whatever a user passes, a replay ends in correct figures or one clear error that
says what was wrong and what to do; never an internal error, never a row of zeros that reads as
measured.  Run the way a user meets it: ``python -m allocator_ref`` on a snapshot file.
"""
from __future__ import annotations

import json
import os
import pickle
import re
from concurrent.futures import ThreadPoolExecutor

import pytest

from allocator_ref.device import SimDevice
from allocator_ref.device.errors import CudaError, CudaOutOfMemoryError
from allocator_ref.device.sim.address_space import AddressSpaceFull

from test_cli_hostile import cli, recorded_snapshot

PIB_GIB = "1048576"                  # --device-memory's bound: 1 PiB
STREAMS = 7400                       # each allocates on its own stream: more segments than 2**63 B hold


@pytest.fixture(scope="module")
def thousands_of_streams(tmp_path_factory):
    path = tmp_path_factory.mktemp("thousands") / "streams.pickle"
    path.write_bytes(pickle.dumps(recorded_snapshot(streams=STREAMS, oom=False)))
    return path


# The commands the tests below read, over the one file, and the test that reads each.  Each is a
# single-threaded process of several seconds (the doctor about 16 s on the 2-core CI machine): the selected
# tests' commands start together at the module's start, as many at once as there are cores, the longest
# first, instead of one after another in each test.
RUNS = {
    "doctor": (("doctor", "--device-memory", PIB_GIB),
               "test_the_doctor_names_the_cause_on_the_row_and_following_the_advice_replays_it"),
    "compare": (("compare", "--device-memory", PIB_GIB),
                "test_compare_says_which_row_could_not_be_replayed_and_what_to_do"),
    "compare --json": (("compare", "--device-memory", PIB_GIB, "--json"),
                       "test_compare_says_which_row_could_not_be_replayed_and_what_to_do"),
    "replay": (("replay", "--device-memory", PIB_GIB, "--config", "expandable_segments:True"),
               "test_replay_with_expandable_segments_ends_in_one_clear_error"),
}


@pytest.fixture(scope="module")
def runs(request, thousands_of_streams):
    selected = {item.originalname for item in request.session.items if item.module is request.module}
    wanted = {name: args for name, (args, test) in RUNS.items() if test in selected}
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    with ThreadPoolExecutor(max_workers=cores) as pool:       # subprocess.run waits outside the GIL
        started = {name: pool.submit(cli, args[0], str(thousands_of_streams), *args[1:])
                   for name, args in wanted.items()}
    return {name: run.result() for name, run in started.items()}


def _advice(text: str) -> int:
    """The number the error gives: --device-memory below N / (streams x pools) GiB."""
    found = re.search(r"--device-memory below ([\d,]+) / \(streams x pools\) GiB", text)
    assert found, text
    return int(found.group(1).replace(",", ""))


def test_compare_says_which_row_could_not_be_replayed_and_what_to_do(runs):
    proc = runs["compare"]
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    row = next(line for line in proc.stdout.splitlines() if "expandable_segments:True" in line)
    assert "not replayed" in row and "addresses" in row and "0.0 MiB" not in row, row
    _advice(row)
    # The other designs do not reserve per stream: they are replayed and measured as usual.
    measured = [line for line in proc.stdout.splitlines() if line.startswith(("caching", "bfc", "direct"))
                and "not replayed" not in line]
    assert len(measured) >= 5 and all("MiB" in line for line in measured), proc.stdout

    as_json = runs["compare --json"]
    rows = json.loads(as_json.stdout)
    skipped = [r for r in rows if r["skipped"]]
    assert [r["config"] for r in skipped] == ["expandable_segments:True"], rows


def test_replay_with_expandable_segments_ends_in_one_clear_error(runs):
    proc = runs["replay"]
    errors = [line for line in proc.stderr.replace("\\x0d", "\n").splitlines() if "error" in line.lower()]
    assert proc.returncode == 1 and len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "AddressSpaceFull" in errors[0] and "addresses" in errors[0], errors
    _advice(errors[0])


@pytest.mark.slow
def test_the_doctor_names_the_cause_on_the_row_and_following_the_advice_replays_it(runs, thousands_of_streams):
    proc = runs["doctor"]
    assert proc.returncode in (0, 1) and "Traceback" not in proc.stderr, proc.stderr
    row = next(line for line in proc.stdout.splitlines() if "expandable_segments:True" in line)
    assert "skipped" in row and "no expandable segments" in row, row
    per_gib = _advice(row)
    # What the error says to do works: one segment per stream here, plus the default stream's two.
    gib = per_gib // (STREAMS + 2)
    again = cli("compare", str(thousands_of_streams), "--device-memory", str(gib))
    row = next(line for line in again.stdout.splitlines() if "expandable_segments:True" in line)
    assert again.returncode == 0 and "not replayed" not in row and "MiB" in row, again.stdout + again.stderr


def test_a_full_address_space_is_a_device_error_not_an_out_of_memory_and_the_device_goes_on():
    dev = SimDevice("tiny-1gb")
    huge = 1 << 60                                                  # the largest size a call takes
    reserved = []
    with pytest.raises(AddressSpaceFull) as caught:
        for _ in range(9):                                          # 2**63 B hold fewer than 8 of them
            reserved.append(dev.address_reserve(huge))
    assert 6 <= len(reserved) < 8, reserved
    assert isinstance(caught.value, CudaError) and not isinstance(caught.value, CudaOutOfMemoryError)
    assert f"hold only {len(reserved)} ranges" in str(caught.value), caught.value
    # What to do comes first: a report that keeps 200 characters of it (the doctor's row) still says it.
    _advice(str(caught.value)[:200])
    # Nothing half-taken: the device still works, and what was reserved can be given back and taken again.
    ptr = dev.malloc(1 << 20)
    dev.free(ptr)
    for start in reserved:
        dev.address_free(start, huge)
    assert dev.address_reserve(huge) in reserved
