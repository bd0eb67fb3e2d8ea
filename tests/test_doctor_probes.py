"""The bisection that finds how much more memory a run that fits nowhere needs stops each probe
at its first out-of-memory error (it reads only whether the run fits).  Run both ways, compared."""
import allocator_ref as ar
from allocator_ref.memory_doctor import examples, remedies

ANCHORED_REPLAY = remedies.anchored_replay


def search(monkeypatch, stop: bool):
    """The bisection's (extra, fits) steps and its answer, and how many actions each probe replayed."""
    replayed = []

    def replay(*args, until_oom=False, **kwargs):
        out = ANCHORED_REPLAY(*args, until_oom=until_oom and stop, **kwargs)
        if until_oom:                        # only the probes ask
            replayed.append((out.ooms == 0, len(out.positions)))
        return out
    monkeypatch.setattr(remedies, "anchored_replay", replay)
    report = ar.doctor(examples.shortage_run(900, 300))
    return report.remedies.search, report.remedies.extra_needed, replayed


def test_probes_stopped_at_the_first_oom_find_the_same_extra(monkeypatch):
    fast, fast_extra, fast_replayed = search(monkeypatch, True)
    slow, slow_extra, slow_replayed = search(monkeypatch, False)
    assert fast and fast == slow and fast_extra == slow_extra
    assert len(fast_replayed) == len(slow_replayed) == len(fast)
    # A probe that fits replays the whole program either way; one that does not stopped sooner.
    for (fits, stopped), (_, whole) in zip(fast_replayed, slow_replayed):
        assert stopped == whole if fits else stopped < whole
    assert any(not fits for fits, _ in fast_replayed)
