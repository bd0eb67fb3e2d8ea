"""The claim checks of chapters/09_casebook.md: each section runs in the chapter's kernel right after
the code cell whose metadata names it (``claim_checks``), and records with ``course.claim`` the
values the prose states in bold (the markdown cell's ``claims`` metadata); tests/test_chapter_claims.py
compares the two.  A learner never meets this code."""

# %% c1_smaller
course.claim("c1_smaller", smaller)
course.claim("c1_held", course.result_words(a.memory_allocated() >= 10 * unit,
             "ten of the eleven units", f"{a.memory_allocated() // unit} units"))

# %% c1_after
course.claim("c1_after", course.fmt(after_del))

# %% c2_pair
course.claim("c2_pair", course.result_words(first is None and retry is not None and retry.ptr == x.ptr,
             "failed, and the identical retry got the freed block", "behaved otherwise"))

# %% c2_fixed
course.claim("c2_fixed", course.result_words(fixed is not None, "succeeds the first time", "still fails"))

# %% c3_leak
grows = lambda rows, k: all(rows[i + 1][k] > rows[i][k] for i in range(len(rows) - 1))
course.claim("c3_leak", course.result_words(grows(leak, 0), "grows every step", "does not grow"))
course.claim("c3_cache", course.result_words(not any(al for al, _ in cache) and grows(cache, 1),
             "stays at 0 bytes while reserved grows", "behaves otherwise"))
course.claim("c3_fixed", course.result_words(len({al for al, _ in fixed}) == 1 and len({re for _, re in fixed}) == 1,
             "flat", "not flat"))

# %% c4_plain
plain, expandable = colocated(""), colocated("expandable_segments:True")
course.claim("c4_plain", course.result_words(plain[-1][2] == "OOM" and plain[-1][1] >= T * 0.05,
             "the engine's wake ran out of memory", "the wake fit"))
course.claim("c4_fixed", course.result_words(all(r == "ok" for _, _, r in expandable) and len(expandable) == 3,
             "every wake fit", "a wake failed"))

# %% c5_bypass
course.claim("c5_bypass", course.fmt(bypassed))
course.claim("c5_pool", course.result_words(in_pool == sum(w.size for w in weights), "all of the pool's", "part of the pool's"))

# %% c6_first
course.claim("c6_first", env_config_string(both))
course.claim("c6_zero", course.result_words(not force_uncached_from_env({"PYTORCH_NO_CUDA_MEMORY_CACHING": "0"}),
             "leaves caching on", "turns caching off"))
course.claim("c6_late", late)

# %% c7_stays
course.claim("c7_stays", course.result_words(steady == after_first, "stays at step 1's height", "falls by itself"))
course.claim("c7_fix", course.result_words(after_fix * 2 <= after_first, "less than half", "not much less"))

# %% c8_kept
course.claim("c8_kept", course.fmt(after_empty))
course.claim("c8_cleared", course.fmt(cleared))

# %% c9_extra
course.claim("c9_extra", str(sum(extra.values())))
course.claim("c9_one_size", course.result_words(len(extra) == 1, "one size", f"{len(extra)} sizes"))

# %% c10_grown
course.claim("c10_grown", str(grown[0]))
course.claim("c10_primed", str(primed[0]))

# %% c11_rs
course.claim("c11_rs", course.fmt(with_rs))
course.claim("c11_keep", course.fmt(keepalive))

# %% c12_high
course.claim("c12_high", boot(0.98)[4])
course.claim("c12_low", boot(0.90)[4])
course.claim("c12_graphs", f"{graphs_share:.0%}")

# %% c13_line
course.claim("c13_line", f"`{bigger.stacks[0].function}`")
course.claim("c13_settings", course.fmt(-switched.settings_share))
