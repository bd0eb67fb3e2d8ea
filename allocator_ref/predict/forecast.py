"""Will it fit?  A recorded program replayed on the reference allocator for a chosen GPU.

``record.py`` gives the program's requests (sizes, order, lifetimes, stacks); this
file makes them a Program (``requests_of``) and hands it to the runner
(trace/runner.py, the loop every what-if shares), which replays it on the course's
``CachingAllocator`` on a simulated GPU of the chosen profile or size, with memory
history on.  What comes back is
what PyTorch's own allocator would do with the same requests: segments made,
blocks split and rounded, the peak of reserved memory, and an OOM if the GPU is
too small.  The allocator's snapshot of that replay is a real-looking
``_dump_snapshot()`` (segments and all), so ``replay --verify``, ``compare``, the
doctor and PyTorch's ``torch.cuda._memory_viz`` read it like a recorded one.

On an Ascend NPU (a profile whose ``allocator`` is ``npu``, or ``policy="npu"``) the same requests
go to torch_npu's design instead (caching/npu/): its 32 B padding, its 16 KiB alignment, its
``PYTORCH_NPU_ALLOC_CONF``.  The requests themselves are still the ones PyTorch's CUDA operators make
(they are recorded on meta tensors), so what Ascend's operators allocate differently, the CANN
operators' workspace and HCCL's buffers are not in the prediction: ``npu_scope`` says so in words.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from ..device.costs import load_profile
from ..device.sim.device import SimDevice
from ..trace.rebuild import InitialState
from ..trace.recording import DeviceRecording
from ..trace.runner import PastDeadline, Runner
from ..trace.whatif import Action, Program
from ..editions.messages import translator
from .unseen import Unseen, cublas_workspace_bytes, unseen_items

GiB = 2**30
tr = translator("doctor")          # the prediction's words in the reader's language (numbers and names as they are)
AGGREGATE = 0       # StatType::AGGREGATE


def caveat_text(c: dict) -> str:
    """The report's line for a caveat (caveats.py; a dict, as the recorded program carries it).
    Here, not in caveats.py: the report is written in the parent process, which never imports torch."""
    mib = "?" if c["nbytes"] is None else f"{c['nbytes'] / 2**20:,.1f} MiB"
    words = {
        "optimizer-unseen": tr("an optimizer stepped {detail} that predict never saw on the GPU ({where}): "
                               "their state, {size}, is missing from this prediction; build the optimizer "
                               "after model.to('cuda'), or move those tensors", detail=c["detail"],
                               where=c["where"], size=mib),
        "compile": tr("torch.compile ({detail}, {where}) was recorded as eager code: fused kernels keep fewer "
                      "intermediates, and CUDA graphs or autotuning add memory this recording cannot see",
                      detail=c["detail"], where=c["where"]),
        "distributed": tr("recorded as rank 0 of {detail} on a fake process group ({where}): DDP's buckets are "
                          "in the prediction; NCCL's buffers, beside the allocator, are not", detail=c["detail"],
                          where=c["where"]),
        "host-read": tr("{detail} value(s) read on the host ({where}) were 0 in the recording (meta tensors "
                        "hold no values): code that branches on them may take another path",
                        detail=c["detail"], where=c["where"]),
    }
    return words.get(c["kind"], c["kind"])



@dataclass
class Replayed:
    """One replay of a program: its peaks, the OOM if any, the live blocks at the allocated peak."""
    peak_allocated: int
    peak_reserved: int
    oom: Optional[str]
    at_peak: list                       # [(size, frames)] largest first, live when allocated peaked
    snapshot: dict
    window_peak_allocated: int = 0      # the peak from event ``since`` on (a run recorded mid-way)
    windows: list = field(default_factory=list)   # per _record_memory_history window: its peaks


class TooSlow(ValueError):
    """The replay ran past the caller's deadline (predict's --timeout bounds the whole command)."""


def replay_program(program: dict, profile: str = "h100-80gb", device_memory: Optional[int] = None,
                   config: Optional[str] = None, since: int = 0, policy: Optional[str] = None,
                   deadline: Optional[float] = None) -> Replayed:
    """Hand ``program``'s requests to a caching allocator on a simulated ``profile`` device (of
    ``device_memory`` bytes when given) and return what it did.  Stops at the first OOM.

    ``policy`` is ``caching`` (PyTorch's) or ``npu`` (torch_npu's); None: the profile's own.
    Where the script called ``torch.cuda.empty_cache()`` the allocator empties its cache
    (``predict_empty_cache``); each ``_record_memory_history`` window (``predict_windows``) gets
    its own peaks, read off the runner's samples in one pass over the events; the blocks live at
    the peak are found by a second pass up to the peak's index, not copied at every new peak."""
    policy = policy or load_profile(profile).allocator
    # The recorded PYTORCH_CUDA_ALLOC_CONF is a CUDA setting: torch_npu never reads it.
    recorded = "" if policy == "npu" else program.get("allocator_settings", {}).get("PYTORCH_CUDA_ALLOC_CONF", "")
    events = program["device_traces"][0]
    # Every event as recorded ('snapshot' ones included): the actions name events by their index.
    recording = DeviceRecording(0, events, events, None, [], recorded, "<predicted>", policy)
    runner = Runner(recording, config=config if config is not None else recorded, policy=policy,
                    profile=profile, total_memory=None if device_memory is None else int(device_memory))
    try:
        out = runner.run(requests_of(program), deadline)
    except PastDeadline:
        raise TooSlow(tr("the replay of {n} recorded events ran past the --timeout; raise --timeout",
                         n=f"{len(events):,}")) from None
    stats = runner.stage.allocator.device_allocator.stats
    # The samples, read per event: the last one at each event is the state right after it.
    after = {pos: (a, r) for pos, a, r in zip(out.positions, out.allocated, out.reserved)}
    reached = out.oom_at[0] if out.ooms else len(events)      # the run stopped at its first OOM
    peak, peak_index, window_peak = -1, -1, 0
    windows = [dict(w, peak_allocated=0, peak_reserved=0) for w in program.get("predict_windows", [])]
    open_windows = _OpenWindows(windows)
    now = (0, 0)
    for index in range(reached):
        now = after.get(index, now)
        if events[index]["action"] == "alloc":
            if index >= since:
                window_peak = max(window_peak, now[0])
            if now[0] > peak:
                peak, peak_index = now[0], index
        open_windows.update(index, *now)
    holders = sorted(_live_at(events, peak_index).values(), key=lambda s: -s[0])
    return Replayed(stats.allocated_bytes[AGGREGATE].peak, stats.reserved_bytes[AGGREGATE].peak,
                    out.first_oom or None, holders[:8], runner.stage.allocator.snapshot(), window_peak, windows)


def requests_of(program: dict) -> Program:
    """A recorded program's requests as the runner's Program: each ``alloc`` with its stack, each
    ``free_completed`` of a live block, the script's ``empty_cache()`` calls (``predict_empty_cache``)
    where it made them; from an empty GPU, stopping at the first OOM."""
    events = program["device_traces"][0]
    empties = set(program.get("predict_empty_cache", []))
    actions, live = [], set()
    for index, e in enumerate(events):
        if index in empties:
            actions.append(Action("empty_cache", index))
        if e["action"] == "alloc":
            actions.append(Action("malloc", index, e["addr"], e["size"], frames=e.get("frames")))
            live.add(e["addr"])
        elif e["action"] == "free_completed" and e["addr"] in live:
            actions.append(Action("free", index, e["addr"], e["size"]))
            live.discard(e["addr"])
    if len(events) in empties:
        actions.append(Action("empty_cache", len(events)))
    return Program(actions, sorted(empties), [], [], start=InitialState(), predicted=True)


class _OpenWindows:
    """The ``_record_memory_history`` windows open at each event, found by one sweep over the events
    (windows sorted by start; each joins when its start is reached and leaves at its stop), so the
    replay stays linear in events + windows however many windows a script opened."""

    def __init__(self, windows: list):
        self.waiting = sorted(windows, key=lambda w: w["start"])
        self.next, self.open = 0, []

    def update(self, index: int, allocated: int, reserved: int) -> None:
        """The allocated and reserved bytes right after event ``index`` count toward each window open then."""
        while self.next < len(self.waiting) and self.waiting[self.next]["start"] <= index:
            self.open.append(self.waiting[self.next])
            self.next += 1
        if not self.open:
            return
        self.open = [w for w in self.open if index < w["stop"]]
        for w in self.open:
            w["peak_allocated"] = max(w["peak_allocated"], allocated)
            w["peak_reserved"] = max(w["peak_reserved"], reserved)


def _live_at(events: list, last: int) -> dict:
    """address -> (size, frames) of the blocks allocated and not yet freed at event ``last``."""
    live: dict = {}
    for e in events[:last + 1]:
        if e["action"] == "alloc":
            live[e["addr"]] = (e["size"], e.get("frames") or [])
        elif e["action"] == "free_completed":
            live.pop(e["addr"], None)
    return live


@dataclass
class Prediction:
    """What ``predict`` answers: peaks, fit, where the peak is, what is not traced, what-if, sweep."""
    profile: str
    capacity: int                        # the GPU's memory (what nvidia-smi calls total)
    context: int                         # the CUDA context's share of it (the profile's estimate)
    peak_allocated: int
    peak_reserved: int
    oom: Optional[str]
    at_peak: list
    unseen: list
    program: dict                        # the recorded requests (no segments)
    snapshot: dict                       # the reference allocator's snapshot of their replay
    what_if: list = field(default_factory=list)
    sweep: Optional[dict] = None
    policy: str = "caching"              # the design it was replayed on: PyTorch's, or torch_npu's ("npu")
    windows: list = field(default_factory=list)      # per _record_memory_history window: its peaks
    notes: list = field(default_factory=list)        # what the command left out, in words (e.g. no what-if)

    @property
    def usable(self) -> int:
        return self.capacity - self.context

    @property
    def caveats(self) -> list:
        """What the recording could not follow (caveats.py), as the program carries it."""
        return self.program.get("predict_caveats", [])

    @property
    def uncertain(self) -> bool:
        """A caveat rules out a "fits": predict cannot stand behind one."""
        return any(c["blocking"] for c in self.caveats)

    @property
    def fits(self) -> bool:
        """True only when the replay fits AND nothing predict could not follow is at stake."""
        return self.oom is None and self.peak_reserved <= self.usable and not self.uncertain

    @property
    def verdict(self) -> str:
        """'fits', 'no' (the replay does not fit: caveats only add memory) or 'cannot say'."""
        if self.oom is not None or self.peak_reserved > self.usable:
            return "no"
        return "cannot say" if self.uncertain else "fits"

    @property
    def headroom(self) -> int:
        """Bytes left between the predicted peak reserved and what the allocator may take."""
        return self.usable - self.peak_reserved

    def to_json(self) -> dict:
        return {"profile": self.profile, "capacity": self.capacity, "context": self.context,
                "peak_allocated": self.peak_allocated, "peak_reserved": self.peak_reserved,
                "fits": {"fits": True, "no": False}.get(self.verdict), "verdict": self.verdict,
                "headroom": self.headroom, "oom": self.oom, "caveats": self.caveats, "windows": self.windows,
                "notes": self.notes,
                "at_peak": [{"size": s, "where": _where(f), "made_by": _made_by(f)} for s, f in self.at_peak],
                "unseen": [u.to_json() for u in self.unseen], "what_if": self.what_if, "sweep": self.sweep,
                "policy": self.policy, "npu_scope": npu_scope() if self.policy == "npu" else None,
                "requests": sum(1 for e in self.program["device_traces"][0] if e["action"] == "alloc")}

    def text(self) -> str:
        mib = lambda n: f"{n / 2**20:,.1f} MiB"
        lines = [tr("predicted on a simulated {profile} ({gib} GiB, CUDA context {context} estimated): "
                    "{n} allocations traced on meta tensors", profile=self.profile, gib=f"{self.capacity / GiB:.2f}",
                    context=mib(self.context), n=f"{self.to_json()['requests']:,}"),
                 tr("  peak allocated {allocated}, peak reserved {reserved}", allocated=mib(self.peak_allocated),
                    reserved=mib(self.peak_reserved))]
        if self.policy == "npu":
            lines.append("  " + npu_scope())
        if self.verdict == "fits":
            lines.append(tr("  fits: yes, {spare} to spare (the peak reserved is {pct}% of the {usable} the "
                            "allocator may use)", spare=mib(self.headroom),
                            pct=f"{100 * self.peak_reserved / self.usable:.1f}", usable=mib(self.usable)))
        elif self.verdict == "cannot say":
            at_stake = sum(c["nbytes"] or 0 for c in self.caveats if c["blocking"])
            lines.append(tr("  fits: CANNOT SAY: the replay leaves {spare}, but the recording missed what is "
                            "listed under 'not followed' ({stake} known at stake, maybe more)",
                            spare=mib(self.headroom), stake=mib(at_stake)))
        else:
            why = (self.oom or tr("peak reserved above the usable memory")).split(" GPU 0 ")[0]
            lines.append(tr("  fits: NO ({why}; the peaks above are up to that point)", why=why))
        if self.caveats:
            lines.append(tr("  not followed by the recording (blocking: no 'fits' can be promised):"))
            for c in self.caveats:
                mark = tr("blocking") if c["blocking"] else tr("note")
                lines.append(f"    [{mark}] {caveat_text(c)}")
        for i, w in enumerate(self.windows, 1):
            lines.append(tr("  memory-history window {i} (events {start} to {stop}, as a recording of it shows): "
                            "peak allocated {allocated}, peak reserved {reserved}", i=i, start=w["start"],
                            stop=w["stop"], allocated=mib(w["peak_allocated"]), reserved=mib(w["peak_reserved"])))
        for note in self.notes:
            lines.append("  " + note)
        lines.append(tr("  live at the allocated peak (largest first):"))
        for size, frames in self.at_peak[:5]:
            lines.append(f"    {mib(size):>12}  {_where(frames)}")
        lines.append(tr("  not traced (estimates, public sources):"))
        for u in self.unseen:
            amount = tr("unknown") if u.nbytes is None else mib(u.nbytes)
            how = tr("added to the trace") if u.added_to_trace else (
                tr("through the allocator") if u.through_allocator else tr("beside the allocator"))
            lines.append(f"    {u.name}: {amount}, {how} ({u.source})")
        if self.what_if:
            lines.append(tr("  what the doctor's settings would change (replays of the predicted run):"))
            for r in self.what_if:
                fit = "" if r.get("fits") is None else ("  " + (tr("fits") if r["fits"] else tr("NO (OOM)")))
                lines.append(f"    {r['policy']:<15} {_config_words(r['config']):<28} "
                             + tr("reserved {size}", size=f"{mib(r['peak_reserved']):>12}") + fit)
        if self.sweep:
            s = self.sweep
            for v, reserved, ok in s["points"]:
                lines.append(tr("    {knob}={value}: peak reserved {size}  {verdict}", knob=s["knob"], value=v,
                                size=mib(reserved) if reserved else "-",
                                verdict=tr("fits") if ok else tr("does not fit")))
            best = s["largest_fitting"]
            lines.append(tr("  largest {knob} that fits: {best}", knob=s["knob"],
                            best=best if best is not None else tr("none of those tried")))
        return "\n".join(lines) + "\n"


CUBLAS_HANDLE = "at::cuda::getCurrentCUDABlasHandle()"      # the frame record.py names a workspace by


def _made_by(frames: list) -> str:
    """'cublas' for a workspace predict added on cuBLAS's behalf, 'program' for the program's own tensors."""
    return "cublas" if frames and frames[0].get("name") == CUBLAS_HANDLE else "program"


def _where(frames: list, keep: int = 2) -> str:
    """The innermost user frames, 'file:line name' (torch's own files skipped when others exist).
    A cuBLAS workspace is cuBLAS's, not the user's line's: said so, with the GEMM that made it."""
    mine = [f for f in frames if "/torch/" not in f["filename"] and f["filename"] != "??"] or frames
    where = " < ".join(f"{f['filename'].rsplit('/', 1)[-1]}:{f['line']} {f['name']}" for f in mine[:keep])
    if _made_by(frames) == "cublas":
        return tr("cuBLAS workspace (added by predict: made by the first GEMM of its thread, {where})",
                  where=where or "?")
    return where or "(no stack)"


def npu_scope() -> str:
    """What a prediction on torch_npu's design models, and what it does not, in one paragraph."""
    return tr("on an NPU: replayed on torch_npu's caching allocator (32 B of padding before the 512 B rounding, "
              "16 KiB-aligned large blocks in expandable segments, PYTORCH_NPU_ALLOC_CONF, with none set). The "
              "requests are the ones PyTorch's CUDA operators make (recorded on meta tensors), and the cuBLAS "
              "workspace and CUDA items below are CUDA's; not modelled: what Ascend's operators allocate "
              "differently, the CANN operators' workspace (NPUWorkspaceAllocator, beside the caching allocator), "
              "HCCL's buffers and the CANN runtime's own memory. The what-if table is not replayed on an NPU.")


def _capacity(profile: str, device_memory: Optional[int]) -> tuple[int, int]:
    info = SimDevice(profile).info
    return (int(device_memory) if device_memory is not None else info.total_memory), info.context_reserve


def forecast(program: dict, profile: str = "h100-80gb", device_memory: Optional[int] = None,
             what_if: bool = False, policy: Optional[str] = None, deadline: Optional[float] = None) -> Prediction:
    """A Prediction for an already recorded ``program`` (record_program's dict), replayed on
    ``policy`` (``caching`` or ``npu``; None: the design the profile's device uses).  ``deadline``
    (time.monotonic()) bounds the replays: past it, TooSlow; the what-if table is left out, and
    the report says so, when the time left would not cover its replays."""
    import time
    policy = check_predict_policy(policy or load_profile(profile).allocator)
    capacity, context = _capacity(profile, device_memory)
    started = time.monotonic()
    run = replay_program(program, profile, capacity, policy=policy, deadline=deadline)
    took = time.monotonic() - started
    allocs = [e for e in program["device_traces"][0] if e["action"] == "alloc"
              and (e.get("frames") or [{}])[0].get("name") == CUBLAS_HANDLE]
    ws = allocs[0]["size"] if allocs else 0
    prediction = Prediction(profile, capacity, context, run.peak_allocated, run.peak_reserved, run.oom,
                            run.at_peak, unseen_items(profile, context, len(allocs), ws), program, run.snapshot,
                            policy=policy, windows=run.windows)
    # The what-if rows are PyTorch's designs and knobs; the predicted snapshot is in PyTorch's shape,
    # so on an NPU they would answer for a GPU: not replayed (npu_scope says so).
    if what_if and run.oom is None and policy != "npu":
        rows = len(what_ifs()) + 2
        if deadline is not None and time.monotonic() + took * rows > deadline:
            prediction.notes.append(tr("(the what-if table is left out: its {n} replays would run past the "
                                       "--timeout)", n=rows))
        else:
            prediction.what_if = what_if_rows(run.snapshot, profile, capacity)
    return prediction


PREDICT_POLICIES = ("caching", "npu")      # the caching designs a recorded program can be replayed on


def check_predict_policy(policy: str) -> str:
    """``caching`` or ``npu``; anything else is refused in one line saying what to give."""
    if policy not in PREDICT_POLICIES:
        raise ValueError(tr("predict replays on a caching allocator: policy {policy} is not one; give caching "
                            "(PyTorch's) or npu (torch_npu's)", policy=repr(policy)))
    return policy


def what_ifs() -> list:
    """The settings `python -m allocator_ref compare` tries (the policy registry's what-if rows),
    less the recorded default, which the prediction itself is."""
    from ..policies.registry import what_if_designs
    return [row for row in what_if_designs() if row != ("caching", "")]


def _config_words(label: str) -> str:
    """A what-if row's config in the reader's language when it is one of the table's own words, else as
    typed (the rows keep the English, which ``to_json`` writes; ``__main__._config_words`` does the same)."""
    words = {"(as predicted)": tr("(as predicted)"), "(on this GPU)": tr("(on this GPU)"),
             "(default)": tr("(default)")}
    return words.get(label, label)


def what_if_rows(snapshot: dict, profile: str, capacity: int) -> list[dict]:
    """The doctor's anchored what-if (``memory_doctor.what_if``) on the predicted snapshot, one row each."""
    from ..memory_doctor import what_if
    trials, _ = what_if(snapshot, what_ifs(), device_memory=capacity / GiB, profile=profile)
    rows = []
    for t in trials:
        if t.skipped:
            continue
        label = t.change or {"recorded": "(as predicted)", "recorded-on-target": "(on this GPU)"}.get(t.kind, "(default)")
        rows.append({"policy": t.policy, "config": label, "peak_reserved": t.peak_reserved,
                     "peak_allocated": t.peak_allocated, "fits": t.fits if t.kind != "recorded" else None})
    return rows


def predict(step_fn: Callable[..., Any], *, profile: str = "h100-80gb", device_memory: Optional[int] = None,
            sweep: Optional[str] = None, values: tuple = (), what_if: bool = True,
            cublas_workspace: Optional[int] = None, policy: Optional[str] = None, **knobs) -> Prediction:
    """Record ``step_fn(**knobs)`` on meta tensors and replay it for a GPU: will it fit?

    ``profile`` names a simulated GPU (``h100-80gb``, ``t4-16gb`` ...); ``device_memory`` (bytes)
    overrides its size.  ``sweep="batch_size", values=(8, 16, 32)`` also records the step at
    each value of that keyword and reports the largest that fits.  ``step_fn`` builds its model
    and tensors with ``device="cuda"`` (or ``.cuda()``): they are made on ``meta``.  ``policy``
    ``npu`` (or an Atlas profile) replays the requests on torch_npu's allocator (see ``npu_scope``).
    """
    policy = check_predict_policy(policy or load_profile(profile).allocator)    # before the step runs
    try:
        from .record import record_program
    except ImportError as exc:
        raise ImportError("predict records on PyTorch's meta tensors: pip install torch (the CPU wheel is "
                          "enough)") from exc
    if cublas_workspace is None:
        cublas_workspace = cublas_workspace_bytes(profile)
    program = record_program(step_fn, profile=profile, cublas_workspace=cublas_workspace, **knobs)
    prediction = forecast(program, profile, device_memory, what_if=what_if, policy=policy)
    if sweep:
        if not values:
            raise ValueError(f"sweep={sweep!r} needs values to try, e.g. values=(8, 16, 32)")
        points = []
        for v in values:
            trial = forecast(record_program(step_fn, profile=profile, cublas_workspace=cublas_workspace,
                                            stacks=False, **{**knobs, sweep: v}), profile, device_memory,
                             policy=policy)
            points.append((v, trial.peak_reserved if trial.oom is None else None, trial.fits))
        fitting = [v for v, _, ok in points if ok]
        prediction.sweep = {"knob": sweep, "points": points, "largest_fitting": max(fitting) if fitting else None}
    return prediction
