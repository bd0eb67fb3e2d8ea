"""The doctor's words about expandable segments say what chapter 5 teaches: 20 MiB pages in the large pool
(large_segment_size), 2 MiB in the small one; it once said "2 MiB pages" for both."""
from allocator_ref.caching.config import AllocatorConfig
from allocator_ref.memory_doctor import doctor
from allocator_ref.memory_doctor.examples import shortage_run

MiB = 2**20


def test_the_report_names_both_page_sizes_and_they_are_the_allocators():
    snapshot = shortage_run(900)
    snapshot.setdefault("allocator_settings", {})["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
    text = str(doctor(snapshot, remedies=False))
    assert "2 MiB pages" not in text
    assert "20 MiB pages in the large pool, 2 MiB in the small one" in text, text
    assert AllocatorConfig().large_segment_size == 20 * MiB
