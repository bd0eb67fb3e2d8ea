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


def test_no_replay_is_made_twice(monkeypatch):
    """The capacity search replays "as recorded" on the GPU it settles on, which is the "as
    recorded" row: one replay, shared (remedies.replay_once), and the answer unchanged."""
    import allocator_ref.trace.whatif as whatif
    made = []

    def replay(*args, config="", policy=None, usable=None, until_oom=False, allocator_factory=None, **kwargs):
        if allocator_factory is None:        # (the memory-fraction row's own allocator is never shared)
            made.append((config, policy or "caching", usable, until_oom))
        return ANCHORED_REPLAY(*args, config=config, policy=policy, usable=usable, until_oom=until_oom,
                               allocator_factory=allocator_factory, **kwargs)
    monkeypatch.setattr(remedies, "anchored_replay", replay)
    monkeypatch.setattr(whatif, "anchored_replay", replay)         # where the capacity search found it before
    report = ar.doctor(examples.shortage_run(900, 300))
    assert report.capacity.known and report.remedies.recorded.usable == report.capacity.target
    assert (report.diagnosis.config, "caching", report.capacity.target, False) in made
    assert len(made) == len(set(made)), sorted(k for k in set(made) if made.count(k) > 1)
