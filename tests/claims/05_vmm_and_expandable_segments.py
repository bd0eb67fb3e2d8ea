"""The claim checks of chapters/05_vmm_and_expandable_segments.md: each section runs in the chapter's kernel right after
the code cell whose metadata names it (``claim_checks``), and records with ``course.claim`` the
values the prose states in bold (the markdown cell's ``claims`` metadata); tests/test_chapter_claims.py
compares the two.  A learner never meets this code."""

# %% ch5_growable_pages
course.claim("ch5_growable_pages", len(buf.handles))

# %% ch5_plain_r1
course.claim("ch5_plain_r1", course.fmt(plain[0])); course.claim("ch5_plain_r2", course.fmt(plain[1]))
course.claim("ch5_exp_r1", course.fmt(expand[0])); course.claim("ch5_exp_r2", course.fmt(expand[1]))
course.claim("ch5_exp_segment_stat", str(expand[2])); course.claim("ch5_exp_rows", str(expand[3]))

# %% q16_page
course.claim("q16_page", course.fmt(page)); course.claim("q16_free", course.fmt(free_now)); course.claim("q16_grew", course.fmt(grew))

# %% q16_held
course.claim("q16_held", course.fmt(held))
course.claim("q16_after_empty", course.fmt(after))

# %% q17_ratio
course.claim("q17_ratio", f"{cold['expandable_segments:True'] / cold['']:.0f}x")
course.claim("q17_ratio_low", f"{cold_low / cold['']:.1f}x")
course.claim("q17_create_share", f"{100 * share:.0f}%")
course.claim("q17_create_share_low", f"{100 * pages * low_create / cold_low:.0f}%")

# %% q19_async_status
course.claim("q19_async_status", status)
course.claim("q19_async_unallocated", course.fmt(reserved - allocated))
course.claim("q19_async_keys", str(keys))
course.claim("q19_native_keys", str(runs["caching (native)"][3]))
course.claim("q19_async_filled", str(sum(1 for v in async_stats.values() if v)))
course.claim("q19_async_ooms", str(async_stats["num_ooms"]))

# %% ch5_nccl_reserved
course.claim("ch5_nccl_reserved", course.fmt(reserved)); course.claim("ch5_nccl_outside", course.fmt(grew))

# %% ch5_hook_plain_registered
course.claim("ch5_hook_plain_registered", course.fmt(hook[""][0]))
course.claim("ch5_hook_exp_registered", course.fmt(hook["expandable_segments:True"][0]))
course.claim("ch5_hook_exp_mapped", course.fmt(hook["expandable_segments:True"][1]))

# %% ch5_pool_registered
course.claim("ch5_pool_registered", str(steps["MemPool"][0]))
course.claim("ch5_pool_deregistered", str(steps["MemPool"][1]))
course.claim("ch5_default_registered", str(steps["default"][0]))
course.claim("ch5_default_deregistered", str(steps["default"][1]))
course.claim("ch5_pool_closed", str(calls["MemPool"][1]))

# %% ch5_npu_small
course.claim("ch5_npu_small", f"{blocks[0].size} B")
course.claim("ch5_npu_align", f"{blocks[-1].ptr % 16384} B")

# %% ch5_npu_policy
course.claim("ch5_npu_policy", course.result_words(found.policy == "npu", "torch_npu's design", "PyTorch's design"))
course.claim("ch5_npu_exact", f"{found.to_json()['allocs_exact']}/{found.to_json()['allocs']}")
course.claim("ch5_npu_diverge", forced.first_divergence.index)
