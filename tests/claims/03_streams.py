"""The claim checks of chapters/03_streams.md: each section runs in the chapter's kernel right after
the code cell whose metadata names it (``claim_checks``), and records with ``course.claim`` the
values the prose states in bold (the markdown cell's ``claims`` metadata); tests/test_chapter_claims.py
compares the two.  A learner never meets this code."""

# %% q8_bad_without
course.claim("q8_bad_without", f"{bad_without:,}")
course.claim("q8_bad_with", f"{bad_with:,}")

# %% q9_record
course.claim("q9_record", course.fmt(peak_rs))
course.claim("q9_wait", course.fmt(peak_ws))

# %% q10_retries
course.claim("q10_retries", str(climb[True][1]))
course.claim("q10_flat", course.result_words(set(climb[False][0]) == {1}, "stays flat at 1 GiB", f"moves: {climb[False][0]}"))

# %% async_reserved
course.claim("async_reserved", course.fmt(all_on[1]))
course.claim("caching_reserved", course.fmt(table["room", "CachingAllocator (per-stream cache)"][1]))
course.claim("async_internal_room", str(all_on[2]))
course.claim("async_internal_tight", str(tight_on[2]))
course.claim("async_tight_reserved", course.fmt(tight_on[1]))
course.claim("async_slower", f"{100 * (tight_on[0] / all_on[0] - 1):.0f}%")
course.claim("async_no_internal_tight", "OOM" if table["tight", "  without internal dependencies"][0] is None else "ok")
course.claim("caching_tight_survives", course.result_words(
    caching_tight[0] is not None and caching_tight[4] > 0, "survives through full flushes",
    "does not survive through full flushes"))
course.claim("caching_tight_mallocs", str(caching_tight[3]))
course.claim("async_no_opp_reserved", course.fmt(no_opp[1]))
course.claim("async_all_off_reserved", course.fmt(all_off[1]))
course.claim("async_no_opp_more", course.result_words(no_opp[1] > all_off[1], "more", "no more"))

# %% knob_caching_default
step_attrs, reset_attrs, trim_attrs = seen.values()
course.claim("knob_caching_default", course.fmt(peaks["caching", ""]))
course.claim("knob_caching_split", course.fmt(peaks["caching", "max_split_size_mb:128"]))
course.claim("knob_async_same", course.result_words(
    peaks["stream_ordered", ""] == peaks["stream_ordered", "max_split_size_mb:128"], "unchanged", "changed"))
course.claim("knob_async_peak", course.fmt(peaks["stream_ordered", ""]))
course.claim("pool_used_now", course.fmt(step_attrs["cudaMemPoolAttrUsedMemCurrent"]))
course.claim("pool_used_high", course.fmt(step_attrs["cudaMemPoolAttrUsedMemHigh"]))
course.claim("pool_reserved_now", course.fmt(step_attrs["cudaMemPoolAttrReservedMemCurrent"]))
course.claim("pool_used_high_reset", course.fmt(reset_attrs["cudaMemPoolAttrUsedMemHigh"]))
course.claim("pool_reserved_trimmed", course.fmt(trim_attrs["cudaMemPoolAttrReservedMemCurrent"]))
course.claim("pool_reserved_high_kept", course.fmt(trim_attrs["cudaMemPoolAttrReservedMemHigh"]))
course.claim("pool_threshold_max", course.result_words(threshold == 2**64 - 1, "UINT64_MAX", "not UINT64_MAX"))
course.claim("pool_stats_same", course.result_words(same_as_stats, "are", "are not"))
