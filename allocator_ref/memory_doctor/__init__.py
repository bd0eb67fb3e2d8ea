"""The memory doctor: why a recorded run ran out of memory (or wasted it), and what would fix it, proven.

    import allocator_ref as ar
    report = ar.doctor("run.pickle")                 # or ar.doctor(path, device_memory=24)
    print(report)                                    # the verdict and the findings, in plain words
    report.verdict.line                              # 'PYTORCH_CUDA_ALLOC_CONF=...' when a setting fixes it
    report.html("report.html")                       # one self-contained page with the pictures
    report.player()                                  # the whole trace in the block-map player

    python -m allocator_ref doctor run.pickle [--device-memory GiB] [--html report.html] [--json]
    python -m allocator_ref doctor rank0.pickle rank1.pickle ...   # or a folder: the ranks of one job
    python -m allocator_ref doctor --diff before.pickle after.pickle   # two runs of one program: what changed
    python -m allocator_ref doctor run.pickle --lang zh   # in Chinese (so is a Chinese locale, or a notebook
                                                          # of the Chinese edition: editions/language.py)

One idea per file:

* ``diagnosis`` -- replay at PyTorch's addresses and read the facts off it (peaks, where the
  unallocated memory sits, the largest live tensors, the OOM, streams);
* ``remedies``  -- replay the same requests under each change of settings;
* ``shortage``  -- the rule: shortage (no setting can serve it) or fragmentation; what gain is material;
* ``report``    -- the verdict those replays support, and the words;
* ``state``     -- a snapshot with no trace (or a trace of one event): what its state says, and what it cannot;
* ``replay_facts`` -- the one verify replay's totals after each event, and the block map at an event;
* ``ranks``     -- several snapshots compared, grouped by job (``ranks.doctor_ranks``);
* ``diff``      -- two runs of one program: what changed and what moved the peak (``diff.doctor_diff``);
* ``examples``  -- course-made runs the chapter, the tests and the benchmarks diagnose;
* ``charts``, ``html_report`` -- the pictures and the self-contained page.
"""
from __future__ import annotations

import time
from typing import Any, Optional

from ..editions.language import language, speaking
from ..editions.messages import translator

GiB = 2**30
tr = translator("doctor")


def doctor(snapshot: Any, device_memory: Optional[float] = None, *, device: Optional[int] = None,
           profile: Optional[str] = None, remedies: bool = True):
    """Diagnose ``snapshot`` (a path, bytes, a dict, a list of segments or a Recording): a :class:`~allocator_ref.memory_doctor.report.DoctorReport`.

    ``device_memory`` (GiB) is the GPU to fit in; without it, a snapshot that ran out of
    memory tells the target itself (what was reserved at the OOM plus what the driver said
    was free).  ``device`` picks a GPU of a multi-GPU snapshot (default: the one that ran
    out of memory, else the busiest).  ``profile`` names the simulated device the replays run on;
    without it, an H100 for a CUDA run and an Atlas 800T A2 for a torch_npu run (device_words.py).
    """
    from .device_words import words_for
    from .settled import settled

    if device_memory is not None and not (isinstance(device_memory, (int, float)) and device_memory > 0):
        raise ValueError(tr("device_memory is the GPU's size in GiB, a positive number; got {value}",
                            value=repr(device_memory)))
    from ..trace.recording import load_recording
    from .state import StateReport, diagnose_state

    start = time.perf_counter()
    recording = load_recording(snapshot)  # checked once, whatever it was given (a path, a dict, a list)
    source, data = recording.source, recording.snapshot
    words = words_for(recording.policy)   # a GPU's names or an NPU's, chosen by the design it replays on
    profile = profile or words.profile
    if recording.state_only or _single_event(recording, device):
        # History was off, or kept one event (a ring buffer of one, an OOM entry alone): a replay
        # of one event proves nothing and its what-ifs only restate it, so the state is read.
        from .remedies import context_reserve
        usable = None if device_memory is None else int(device_memory * GiB) - context_reserve(profile)
        report = StateReport(diagnose_state(data, source, device, usable))
        report.seconds = time.perf_counter() - start
        return report
    with settled():                      # the loaded run is left out of the collector's walks (settled.py)
        report = _diagnose_and_prescribe(recording, device_memory, device, profile, remedies, words)
    report.seconds = time.perf_counter() - start
    return report


def _diagnose_and_prescribe(recording, device_memory: Optional[float], device: Optional[int], profile: str,
                            remedies: bool, words):
    """The verify replay, its facts, and every remedy replayed: a DoctorReport (or a DevicesReport)."""
    from .diagnosis import diagnose
    from .report import DoctorReport

    start = time.perf_counter()
    if device is None:
        # Several devices and none ran out of memory: each device with events is diagnosed.
        busy = sorted(recording.devices_with_events, key=lambda i: -len(recording.device(i).events))
        if len(busy) > 1 and not any(recording.device(i).ooms for i in busy):
            return _every_device(recording, busy, device_memory, profile, remedies, start)
    diag = diagnose(recording, device=device, profile=profile,
                    device_memory=None if device_memory is None else int(device_memory * GiB))
    plan = capacity = None
    if diag.verified and remedies:
        plan, capacity = _prescribe(diag, recording, device_memory, words)
    _judge(diag, device_memory, capacity, words)
    return DoctorReport(diag, plan, DoctorReport.decide(diag, plan), capacity=capacity)


def _prescribe(diag, recording, device_memory: Optional[float], words):
    """Every remedy replayed on ``diag``'s program: (the Remedies, the capacity it inferred)."""
    from .capacity import infer_capacity
    from .diagnosis import whatif_run
    from .npu_advice import npu_trials
    from .remedies import prescribe

    run = whatif_run(diag, diag.profile)           # diag.profile: sized up when the snapshot needs a bigger GPU
    capacity = infer_capacity(run.events, diag.reserved, run.program, diag.config,
                              lambda usable: _replay_recorded(run, diag.config, usable))
    target, total, where = _target(diag.profile, device_memory, capacity, words)
    recorded_usable = capacity.target if capacity.known else None
    plan = prescribe(run, diag.config, target, total, where, recorded_usable, live_need=diag.live_need,
                     adapt=npu_trials if recording.policy == "npu" else None)   # torch_npu's knobs
    return plan, capacity


def _target(profile: str, device_memory: Optional[float], capacity, words) -> tuple:
    """The usable bytes the remedies must fit in, the GPU's whole size, and where that figure came from."""
    from .capacity import capacity_words
    from .remedies import context_reserve
    reserve = context_reserve(profile)
    if device_memory is not None:
        total = int(device_memory * GiB)
        target = total - reserve
        where = tr("--device-memory {gib} GiB, less the {runtime} context's {mib} MiB", gib=f"{device_memory:g}",
                   mib=f"{reserve / 2**20:,.0f}", runtime=words.runtime)
        if target <= 0:
            raise ValueError(tr("device_memory={gib} GiB is smaller than the {runtime} context alone ({mib} MiB): "
                                "give the {device}'s whole size in GiB", gib=f"{device_memory:g}",
                                runtime=words.runtime, device=words.device,
                                mib=f"{reserve / 2**20:,.0f}"))
        return target, total, where
    if capacity.known:
        return capacity.target, capacity.target + reserve, capacity_words(capacity, words)
    return None, None, capacity_words(capacity, words)


def _judge(diag, device_memory: Optional[float], capacity, words) -> None:
    """Shortage or fragmentation (shortage.py), on the remedies' target, or the GPU asked about."""
    from .remedies import context_reserve
    from .shortage import judge_diagnosis
    if not diag.verified:
        return
    if capacity is not None:
        target = _target(diag.profile, device_memory, capacity, words)[0]
        diag.judgement = judge_diagnosis(diag, target, asked=device_memory is not None)
    else:                                              # remedies not asked for: the rule still reads the run
        asked = None if device_memory is None else int(device_memory * GiB) - context_reserve(diag.profile)
        diag.judgement = judge_diagnosis(diag, asked, asked=asked is not None)


def _every_device(recording, busy: list, device_memory: Optional[float], profile: str, remedies: bool,
                  start: float) -> "DevicesReport":
    """Each device verified and diagnosed on its own; the what-ifs replayed once per program
    (same_program.py): a device whose recording keys like an earlier one's takes that device's
    remedies and capacity, once the program read off its own verify replay is the same too."""
    from .same_program import groups, program_key
    from .workers import map_forked, worker_count
    keys = {i: program_key(recording.device(i), recording.config, recording.policy, profile, device_memory,
                           remedies) for i in busy}
    lead_of = {f: lead for lead, followers in groups(keys).items() for f in followers}
    reports = {i: doctor(recording, device_memory, device=i, profile=profile, remedies=remedies)
               for i in busy if i not in lead_of}
    # The followers are verified on every core (workers.map_forked shares the loaded run with them).
    followers = [i for i in busy if i in lead_of]
    _FORKED.update(recording=recording, reports=reports, lead_of=lead_of, device_memory=device_memory,
                   profile=profile)
    try:
        slims = map_forked(_follow_forked, followers, worker_count(len(followers)))
    finally:
        _FORKED.clear()
    same = {}
    for i, slim in zip(followers, slims):
        lead = reports[lead_of[i]]
        report = None if slim is None else _unslim(slim, recording, lead)
        if report is None:          # its own replay or program differed: every what-if of its own
            report = doctor(recording, device_memory, device=i, profile=profile, remedies=remedies)
        else:
            same[i] = lead_of[i]
            recording.forget(i)     # what its replays built; its player or page rebuilds it if asked
        reports[i] = report
    return DevicesReport([reports[i] for i in busy], seconds=time.perf_counter() - start, same_program=same)


_FORKED: dict = {}        # what a forked worker reads (it inherits this process's memory)


def _follow_forked(index: int):
    """A follower's Diagnosis, without what this process already holds (the snapshot, the recording,
    the frames, the leader's program and readings), to be sent back; None where _follow refused."""
    import dataclasses
    f = _FORKED
    lead = f["reports"][f["lead_of"][index]]
    report = _follow(f["recording"], index, lead, f["device_memory"], f["profile"])
    if report is None:
        return None
    d, led = report.diagnosis, lead.diagnosis
    # No frames: the drawing side records them in this process when the player or the page asks
    # (report.frames_of, from events_replayed and first_event, which travel with the diagnosis).
    return dataclasses.replace(d, snapshot=None, recording=None, program=None, frames=None,
                               readings=None if d.readings is led.readings else d.readings)


def _unslim(d, recording, lead):
    """The follower's report again, from what the worker sent and what this process holds."""
    from .report import DoctorReport
    led = lead.diagnosis
    d.snapshot, d.recording, d.program = recording.snapshot, recording, led.program
    if d.readings is None:
        d.readings = led.readings
    return DoctorReport(d, lead.remedies, DoctorReport.decide(d, lead.remedies), capacity=lead.capacity)


def _follow(recording, index: int, lead, device_memory: Optional[float], profile: str):
    """Device ``index``'s report with ``lead``'s what-if rows, or None when they may not stand for
    its own: its verify replay differs from the leader's, or the program read off it does."""
    from .device_words import words_for
    from .diagnosis import diagnose, whatif_run
    from .report import DoctorReport
    from .same_program import program_digest
    if type(lead) is not DoctorReport:                 # a state read, not a replay: nothing to share
        return None
    led = lead.diagnosis
    diag = diagnose(recording, device=index, profile=profile,
                    device_memory=None if device_memory is None else int(device_memory * GiB))
    if diag.verified != led.verified or diag.profile != led.profile:
        return None
    if lead.remedies is not None:
        whatif_run(diag, diag.profile)                 # its own program, read off its own verify replay
        if program_digest(diag.program) != program_digest(led.program):
            return None
        diag.program = led.program                     # the same actions: one copy for the group
    _judge(diag, device_memory, lead.capacity, words_for(recording.policy))
    report = DoctorReport(diag, lead.remedies, DoctorReport.decide(diag, lead.remedies), capacity=lead.capacity)
    _slim(diag, led, recording)
    return report


def _slim(diag, led, recording) -> None:
    """A follower's report keeps what its text and JSON read, in less room: 330 ranks of a 1 GB file
    each kept 5 MB (its program, its curves as lists of ints, its readings, its device's start
    state and trace index), which took the doctor past twice the file."""
    from array import array
    diag.allocated, diag.reserved = array("q", diag.allocated), array("q", diag.reserved)
    if diag.readings == led.readings:
        diag.readings = led.readings
    recording.forget(diag.device)          # its start state and trace index: rebuilt if its page asks


def _single_event(recording, device: Optional[int]) -> bool:
    """Whether the device asked about (else every device with events) has exactly one trace event."""
    devices = [device] if device is not None else recording.devices_with_events
    # A device with no event at all is no trace of one event: diagnose() refuses it in one line.
    return (bool(recording.snapshot.get("segments")) and bool(devices)
            and all(len(recording.device(i).events) == 1 for i in devices))


class DevicesReport:
    """One report per device with events (a multi-GPU snapshot where none ran out of memory).

    It reads like the first (busiest) device's report -- ``verdict``, ``remedies``,
    ``to_json()``'s top level -- and ``reports`` holds every device's; the text shows all.
    ``same_program`` maps a device to the one whose what-if rows it shares (same_program.py).
    """

    def __init__(self, reports: list, seconds: float = 0.0, same_program: Optional[dict] = None) -> None:
        self.reports, self.seconds, self.language = reports, seconds, language()
        self.same_program = dict(same_program or {})
        first = reports[0]
        self.diagnosis, self.remedies, self.verdict, self.capacity = (first.diagnosis, first.remedies,
                                                                      first.verdict, first.capacity)

    def shared_lines(self) -> list:
        """One line per program that several devices recorded: whose what-if rows they are."""
        from .same_program import spans
        by_lead: dict = {}
        for device, lead in self.same_program.items():
            by_lead.setdefault(lead, []).append(device)
        with speaking(self.language):
            return [tr("device {devices} recorded the same program as device {device}: its what-if rows are "
                       "device {device}'s (replayed once; it is verified on its own)", devices=followers[0],
                       device=lead) if len(followers) == 1 else
                    tr("devices {devices} recorded the same program as device {device}: their what-if rows are "
                       "device {device}'s (replayed once; each device is verified on its own)",
                       devices=spans(followers), device=lead) for lead, followers in by_lead.items()]

    def text(self) -> str:
        with speaking(self.language):
            head = tr("{n} devices have events and none ran out of memory: each is diagnosed (--device N for one)",
                      n=len(self.reports)) + "\n"
        return head + "".join(line + "\n" for line in self.shared_lines()) + "\n" + \
            "\n".join(r.text() for r in self.reports)

    def to_json(self) -> dict:
        each = []
        for r in self.reports:
            row = r.to_json()
            lead = self.same_program.get(r.diagnosis.device)
            if lead is not None:
                row["what_if_rows_of_device"] = lead
            each.append(row)
        return dict(self.reports[0].to_json(), each_device=each, seconds=self.seconds,
                    same_program={str(d): lead for d, lead in self.same_program.items()},
                    same_program_words=self.shared_lines())

    def html(self, path=None) -> str:
        from html import escape
        page = self.reports[0].html()
        lines = self.shared_lines()
        if lines:                    # the page is the first device's: the shared rows are said at its top
            said = "".join(f"<p data-same-program>{escape(line)}</p>" for line in lines)
            at = page.index(">", page.index("<body")) + 1
            page = page[:at] + said + page[at:]
        if path is not None:
            from pathlib import Path
            Path(path).write_text(page, encoding="utf-8")
        return page

    def player(self, **kwargs):
        return self.reports[0].player(**kwargs)

    def __str__(self) -> str:
        return self.text()


def what_if(snapshot: Any, settings=(("caching", "expandable_segments:True"),), *,
            device_memory: Optional[float] = None, device: Optional[int] = None, profile: str = "h100-80gb"):
    """The anchored what-if table: the recorded run, then each ``(policy, change)`` of ``settings``.

    Every row replays the run's program from PyTorch's own state at the first event
    (``trace/whatif.py``) on the GPU the run behaved like (``capacity.py``; uncapped when
    nothing tells), or on ``device_memory`` GiB.  A caching change is added to the recorded
    ``PYTORCH_CUDA_ALLOC_CONF``; another policy replaces the allocator.  Returns
    ``(rows, capacity)``: rows are :class:`~allocator_ref.memory_doctor.remedies.Trial`, the
    first the recorded settings (its ``mismatch`` says whether it reproduced the run).
    """
    from .capacity import infer_capacity
    from .diagnosis import diagnose, whatif_run
    from .remedies import Trial, context_reserve, run_trial, with_change
    from ..trace.replay_report import DidNotReproduce

    diag = diagnose(snapshot, device=device, profile=profile,     # (diagnose loads it once: load_recording)
                    device_memory=None if device_memory is None else int(device_memory * GiB))
    profile = diag.profile
    if not diag.verified:
        div = diag.verify_summary.get("first_divergence") or {}
        raise DidNotReproduce(tr("{source}: the reference allocator does not reproduce PyTorch on this trace (first "
                                 "difference at event {index}), so no what-if starts from the run that happened; run "
                                 "`python -m allocator_ref replay SNAPSHOT --verify` for the details",
                                 source=diag.source, index=div.get("index", "?")), div.get("index"))
    run = whatif_run(diag, profile)
    capacity = infer_capacity(run.events, diag.reserved, run.program, diag.config,
                              lambda usable: _replay_recorded(run, diag.config, usable))
    recorded_usable = capacity.target if capacity.known else None
    usable = recorded_usable if device_memory is None else int(device_memory * GiB) - context_reserve(profile)
    design = diag.recording.policy if diag.recording is not None else "caching"   # torch_npu's or PyTorch's
    rows = [run_trial(Trial("recorded", "", diag.config, policy=design), run, recorded_usable)]
    if usable != recorded_usable:
        rows.append(run_trial(Trial("recorded-on-target", "", diag.config, policy=design), run, usable))
    for policy, change in settings:
        config = with_change(diag.config, change) if policy == design else change
        rows.append(run_trial(Trial(policy if policy != design else "change", change, config, policy=policy),
                              run, usable))
    return rows, capacity


def _replay_recorded(run, config: str, usable):
    from .remedies import replay_once
    return replay_once(run, config, None, usable)


__all__ = ["doctor", "what_if", "DevicesReport"]
