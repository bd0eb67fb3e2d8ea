"""The claim checks of chapters/07_diagnostics.md: each section runs in the chapter's kernel right after
the code cell whose metadata names it (``claim_checks``), and records with ``course.claim`` the
values the prose states in bold (the markdown cell's ``claims`` metadata); tests/test_chapter_claims.py
compares the two.  A learner never meets this code."""

# %% q24_retries
course.claim("q24_retries", str(s["num_alloc_retries"])); course.claim("q24_ooms", str(s["num_ooms"]))
course.claim("q24_rescued", course.result_words(rescued == 1 and s["num_alloc_retries"] == 2,
                                                "one rescued the 70% request, one preceded the OutOfMemoryError",
                                                f"{rescued} came before the 70% request succeeded"))

# %% ch7_ghosts
course.claim("ch7_ghosts", len(ghosts))

# %% ch7_whatif_flat
if real is None:
    course.claim_needs_real_trace("ch7_whatif_flat")      # the sentence below is about PyTorch's snapshot
else:
    course.claim("ch7_whatif_flat", course.result_words(
        all(t.peak_reserved == recorded.peak_reserved for t in rows if t.policy == "caching") and recorded.peak_at < 0,
        "every caching setting peaks where the recorded run did", "the caching settings' peaks differ"))

# %% ch7_optimizer_peak
course.claim("ch7_optimizer_peak", course.fmt(peaks["optimizer"]))

# %% ch7_engine_over_half
course.claim("ch7_engine_over_half", course.result_words(engine_uses > 0.5 * total,
             "more than half of the GPU", "no more than half of the GPU"))
course.claim("ch7_trainer_cap_room", course.result_words(trainer_room >= step,
             "room under its cap for the request", "no room under its cap"))

# %% ch7_pause_freed
course.claim("ch7_pause_freed", course.result_words(freed == size, "all of the weights' memory", "part of it"))
course.claim("ch7_resume_same", course.result_words(restored == b"weights", "the same address", "another address"))
course.claim("ch7_copy_back", course.result_words(fresh != b"weights", "only once they were copied back",
                                                  "even before the copy"))
course.claim("ch7_kv_took", course.result_words(taken, "the address the graph captured", "another address"))
course.claim("ch7_reload_moved", course.result_words(moved, "somewhere else", "at the same address"))

# %% ch7_verdict
course.claim("ch7_verdict", course.result_words(v.kind in ("less-memory", "shortage") and not fitting,
                                                "no setting fits, only less live memory helps",
                                                f"the verdict is {v.kind}: {v.line or v.text[:60]}"))
course.claim("ch7_already_set", course.result_words(
    already == ["expandable_segments:True"] and "expandable_segments" not in (v.line or ""),
    "skipped, not proposed", f"not skipped ({already}; verdict {v.line})"))

# %% ch7_shortage
course.claim("ch7_shortage", course.result_words(short.verdict.kind == "shortage" and short.verdict.line is None,
                                                 "a shortage, and no setting is offered",
                                                 f"{short.verdict.kind}: {short.verdict.line}"))
course.claim("ch7_shortage_cut", course.fmt(short.verdict.reduce_by))
course.claim("ch7_shortage_more", course.fmt(short.verdict.more_memory))
course.claim("ch7_fragmentation", course.result_words(
    frag.diagnosis.judgement.kind == "fragmentation" and frag.verdict.kind == "remedy",
    "fragmentation, and a replayed setting fits", f"{frag.diagnosis.judgement.kind}: {frag.verdict.kind}"))

# %% ch7_rank_outlier
course.claim("ch7_rank_outlier", ranks.outlier.name if ranks.outlier else "no outlier")
course.claim("ch7_rank_why", course.result_words(ranks.why == "the same live memory laid out worse",
                                                "the same live memory laid out worse", ranks.why or "no reason"))

# %% ch7_state_kind
course.claim("ch7_state_kind", course.result_words(state_report.diagnosis.judgement.kind == "no-failure",
                                                   "no failure recorded", "a failure"))
course.claim("ch7_state_pending", course.fmt(state_report.diagnosis.pending))

# %% ch7_ring_verdict
course.claim("ch7_ring_verdict", course.result_words(
    ring_report.verdict.kind == "no-target" and ring_report.remedies.reproduced,
    "it fits, and no setting is needed", ring_report.verdict.kind))

# %% ch7_predict_reserved
course.claim("ch7_predict_reserved", course.fmt(p.peak_reserved))
course.claim("ch7_predict_fits", course.result_words(p.verdict == "fits", "it fits", "it does not fit"))

# %% ch7_predict_largest
course.claim("ch7_predict_largest", largest)

# %% ch7_predict_missed
if real_small is not None:
    course.claim("ch7_predict_missed", sorted(set(recorded) - set(predicted)))
    course.claim("ch7_predict_real", course.result_words(
        truth["peak_reserved"] == guess.peak_reserved and truth["peak_allocated"] == guess.peak_allocated,
        "the same peak reserved and allocated, to the byte", "different peaks (see the printed figures)"))
else:
    course.claim_needs_real_trace("ch7_predict_real"); course.claim_needs_real_trace("ch7_predict_missed")
