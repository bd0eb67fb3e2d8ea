"""The doctor's HTML report, opened in a real browser (Debian's Chromium, driven by Playwright).

What it proves: the report is one self-contained file -- opened from disk with every network
request refused, each picture (the timeline, the remedy chart, the block map at the peak)
loads and has a real size on the page.  Runs on a course-made OOM run always, and on the real
OOM trace when ../shared/traces is there.
"""
import os
from pathlib import Path

import pytest

import allocator_ref as ar

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(600)]

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
MiB = 2**20
TRACES = Path(os.environ.get("ALLOCATOR_REF_TRACES") or Path(__file__).resolve().parents[1].parent / "shared" / "traces")
REAL_OOM = TRACES / "hf-finetune-expandable-oom.pickle"


def course_oom_snapshot():
    a = ar.CachingAllocator(ar.SimDevice("tiny-1gb"), "")
    a.record_memory_history(max_entries=100_000)
    live = [a.malloc(6 * MiB) for _ in range(120)]
    for i, x in enumerate(live):
        if i % 3 != 2:
            a.free(x)
    with pytest.raises(ar.OutOfMemoryError):
        a.malloc(200 * MiB)
    return a.snapshot()


def pictures_in_browser(html_path):
    """Open the file with the network cut off; what each picture looks like on the page."""
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"{CHROMIUM} is missing: run tools/install_browser.sh (apt-get install chromium) first")
    sync_api = pytest.importorskip("playwright.sync_api", reason="python playwright is not installed in this venv")
    fetched = []
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1300, "height": 900})

            def refuse(route):
                fetched.append(route.request.url)
                route.abort()
            page.route("http*://**/*", refuse)
            page.goto(Path(html_path).resolve().as_uri())
            page.wait_for_load_state("load")
            images = page.evaluate("""() => [...document.images].map(i => ({
                name: i.dataset.figure, complete: i.complete, w: i.naturalWidth, h: i.naturalHeight,
                shown: i.getBoundingClientRect().width}))""")
            blockmap = page.evaluate("""() => {
                const svg = document.querySelector('[data-figure=blockmap] svg');
                if (!svg) return null;
                const box = svg.getBoundingClientRect();
                const rects = [...svg.querySelectorAll('rect')].filter(r => r.getBBox().width > 0);
                return {w: box.width, h: box.height, rects: rects.length,
                        states: [...new Set([...svg.querySelectorAll('[data-state]')].map(r => r.dataset.state))]};
            }""")
            verdict = page.evaluate("() => document.querySelector('.verdict')?.dataset.verdict")
        finally:
            browser.close()
    return images, blockmap, verdict, fetched


def check_report(report, tmp_path):
    path = tmp_path / "report.html"
    report.html(path)
    images, blockmap, verdict, fetched = pictures_in_browser(path)
    assert fetched == [], f"the report asked the network for {fetched}"
    assert sorted(i["name"] for i in images) == ["remedies", "timeline"]
    for image in images:
        assert image["complete"] and image["w"] > 400 and image["h"] > 150 and image["shown"] > 400, image
    assert blockmap is not None and blockmap["w"] > 400 and blockmap["h"] > 50 and blockmap["rects"] > 10
    assert "active_allocated" in blockmap["states"]
    assert verdict == report.verdict.kind


def test_course_made_oom_report_renders_in_chromium(tmp_path):
    check_report(ar.doctor(course_oom_snapshot()), tmp_path)


@pytest.mark.skipif(not REAL_OOM.exists(), reason=f"real trace {REAL_OOM} not here (set ALLOCATOR_REF_TRACES)")
def test_real_oom_report_renders_in_chromium(tmp_path):
    check_report(ar.doctor(REAL_OOM), tmp_path)
