"""The claim checks of chapters/08_pools_you_own.md: each section runs in the chapter's kernel right after
the code cell whose metadata names it (``claim_checks``), and records with ``course.claim`` the
values the prose states in bold (the markdown cell's ``claims`` metadata); tests/test_chapter_claims.py
compares the two.  A learner never meets this code."""

# %% ch8_pool_segments
course.claim("ch8_pool_segments", str(len(pool.snapshot())))

# %% ch8_rule_holds
course.claim("ch8_rule_holds", course.result_words(
    reused == {"nothing open": True, "a pool open in another thread": False,
               "a pool opened and closed before": True, "a capture on another stream": False},
    "only when nothing was open at the time of the request", f"in these situations: {reused}"))

# %% ch8_dropped_use
course.claim("ch8_dropped_use", course.result_words(
    handed_out_again and not busy_finished, "handed out again while the stream still ran",
    "kept until the stream finished"))

# %% ch8_flush_outcome
course.claim("ch8_flush_outcome", flush_case(True)[0])
course.claim("ch8_flush_closed", course.result_words(
    closed == (course.words("served"), 1, 0), "the request gets the cached segment through rung 6 (one retry)",
    f"the request ends {closed[0]} after {closed[1]} retries"))
course.claim("ch8_flush_kept", course.fmt(flush_case(True)[2]))

# %% ch8_eager
course.claim("ch8_eager", course.fmt(eager)); course.claim("ch8_both", course.fmt(both))

# %% ch8_broken_modes
course.claim("ch8_broken_modes", course.result_words(
    broken == ["global"] and modes["global"][0] != "allowed" and modes["global"][1] != "ended",
    'only the `"global"` capture', f"the captures {broken}"))

# %% ch8_rung5_breaks
course.claim("ch8_rung5_breaks", course.result_words(
    during.startswith("cudaErrorStreamCaptureUnsupported") and ended.startswith("cudaErrorStreamCaptureInvalidated"),
    "invalidated the capture", "left the capture intact"))

# %% ch8_kept_by_output
course.claim("ch8_kept_by_output", course.fmt(kept))

# %% ch8_free_up
course.claim("ch8_free_up", course.fmt(free_up)); course.claim("ch8_largest_up", course.fmt(largest_up))
course.claim("ch8_separate", course.fmt(rows["separate pools, 1,2,3,4"]))
course.claim("ch8_shared_up", course.fmt(rows["shared pool, 1,2,3,4"]))
course.claim("ch8_shared_down", course.fmt(rows["shared pool, 4,3,2,1"]))

# %% ch8_two_stream_segments
course.claim("ch8_two_stream_segments", two_captures(False))
course.claim("ch8_overwrote", course.result_words(
    out2.ptr == out1.ptr and d.read(out2.ptr, 4, st) == b"\x01" * 4 and two_captures(True) == 1,
    "g1's replay overwrote g2's output", "g2's output survived g1's replay"))

# %% ch8_tree_recordings
(arr_n, arr_pools), (pad_n, pad_pools), (warm_n, warm_pools) = compiled.values()
(arr_pool,), (pad_pool,), (warm_pool,) = arr_pools.values(), pad_pools.values(), warm_pools.values()
course.claim("ch8_tree_recordings", str(arr_n))
course.claim("ch8_tree_arrive", course.fmt(arr_pool[1]))
course.claim("ch8_tree_arrive_free", course.result_words(
    arr_pool[2] == arr_pool[1], "all of it free", f"{course.fmt(arr_pool[2])} of it free"))
course.claim("ch8_tree_largest", course.fmt(arr_pool[3]))
course.claim("ch8_tree_padded", course.fmt(pad_pool[1]))
course.claim("ch8_tree_warm", course.fmt(warm_pool[1]))

# %% ch8_registered
course.claim("ch8_registered", str(len(registered)))
course.claim("ch8_nccl_charged", course.fmt(nccl_charged))
course.claim("ch8_nccl_segments", course.fmt(nccl_segments))

# %% ch8_oom_private
course.claim("ch8_oom_private", course.fmt(free_in_pools))
