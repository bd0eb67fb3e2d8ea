"""`doctor --diff A B`: two runs of one program, what changed, and what moved the peak, proven by replay.

The runs are course-made: a training loop recorded by the reference allocator, run twice with one
thing changed (the batch size, or a setting).  The figures checked come from the recording
allocators themselves, never from the doctor.  The loop lives here, not in the package, so its
lines are the Python frames the allocator records (events.gather_python_stack skips the package).
"""
import json
import pickle

import allocator_ref as ar
from allocator_ref.__main__ import main
from allocator_ref.memory_doctor.diff import doctor_diff

MiB = 2**20


def activation(a, batch):
    return a.malloc(batch * 3 * MiB + 512 * 1024)      # one layer's activations for `batch` samples


def workspace(a):
    return a.malloc(40 * MiB)                          # a library workspace: the same whatever the batch


def training(batch, config="", steps=3, layers=8):
    a = ar.CachingAllocator(ar.SimDevice("tiny-1gb"), config)
    a.record_memory_history(max_entries=100_000)
    for _ in range(steps):
        acts = []
        for _ in range(layers):
            acts.append(activation(a, batch))
            a.free(workspace(a))
        for x in reversed(acts):
            a.free(x)
    return a, a.snapshot()


def test_a_changed_batch_size_is_found_on_the_line_that_allocates_activations():
    a, before = training(4)
    b, after = training(8)
    report = doctor_diff(before, after)
    assert report.diagnosis.verified
    d1, d2 = report.before.diagnosis, report.after.diagnosis
    assert (d1.peak_reserved, d2.peak_reserved) == (a.max_memory_reserved(), b.max_memory_reserved())
    assert report.moved == b.max_memory_reserved() - a.max_memory_reserved() > 0
    assert d2.peak_allocated - d1.peak_allocated == b.max_memory_allocated() - a.max_memory_allocated()
    top = report.stacks[0]
    assert top.function == "activation" and top.delta == 8 * 4 * 3 * MiB          # 8 layers, 4 more samples
    assert top.sizes_before == [12 * MiB + 512 * 1024] and top.sizes_after == [24 * MiB + 512 * 1024]
    ws = next(s for s in report.stacks if s.function == "workspace")
    assert ws.sizes_before == ws.sizes_after == [40 * MiB]
    assert report.under_before is None and report.settings_share is None        # the same settings
    text = report.text()
    assert "The settings are the same, so the program moved it." in text and "in activation" in text


def test_a_changed_setting_gets_its_share_of_the_move_proven_by_replay(tmp_path, capsys):
    a, before = training(4)
    b, after = training(4, "expandable_segments:True")
    report = doctor_diff(before, after)
    t = report.under_before
    # the second run's requests under the first run's settings: the first run's own peak (same program)
    assert t is not None and t.peak_reserved == a.max_memory_reserved()
    assert report.settings_share == b.max_memory_reserved() - a.max_memory_reserved() == report.moved
    assert all(s.delta == 0 for s in report.stacks)
    # the command line: --diff A B, text and JSON telling the same
    pa, pb = tmp_path / "a.pickle", tmp_path / "b.pickle"
    pa.write_bytes(pickle.dumps(before))
    pb.write_bytes(pickle.dumps(after))
    assert main(["doctor", "--diff", str(pa), str(pb), "--json"]) == 0
    j = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert j["settings_share"] == report.settings_share and j["config"] == ["", "expandable_segments:True"]
    assert main(["doctor", "--diff", str(pa), str(pb)]) == 0
    assert "the change of settings accounts for" in capsys.readouterr().out


def test_diff_needs_exactly_two_recorded_runs(tmp_path, capsys):
    _, one = training(2)
    p = tmp_path / "one.pickle"
    p.write_bytes(pickle.dumps(one))
    assert main(["doctor", "--diff", str(p)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "two" in err[0]
    state = dict(one, device_traces=[[]])
    s = tmp_path / "state.pickle"
    s.write_bytes(pickle.dumps(state))
    assert main(["doctor", "--diff", str(p), str(s)]) == 2
    assert "state-only" in capsys.readouterr().err


def test_a_diff_in_chinese_has_no_english_sentence():
    from test_doctor_language import CJK, english_sentences
    from allocator_ref.editions import language as lang
    _, before = training(4)
    _, after = training(4, "expandable_segments:True")
    with lang.speaking("zh"):
        report = doctor_diff(before, after)
    text = report.text()
    assert CJK.search(text) and english_sentences(text) == []
    assert report.verdict.text == report.to_json()["verdict_text"]
