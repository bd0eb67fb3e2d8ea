"""The course website: built with Jupyter Book 1 here, then read in Chromium as a reader would.

`tools/build_site.py` (make site) executes every chapter on the simulated device and renders
the book with Sphinx (MyST-NB, sphinx-book-theme); this test builds it in a folder of its own from the
chapter runs the chapter tests already made (``chapter_run``: one run per chapter and session), serves it on
127.0.0.1, and with Playwright driving Debian's Chromium checks that:

* every chapter page renders its title and its executed pictures, and no picture on any page
  is broken (an <img> that loaded nothing); pictures on other sites (the README's badges) are
  not fetched, there is no network here;
* every internal link on every page resolves to a page of the site, and a link with an anchor
  finds that element on the page;
* each FAQ link lands on the chapter section that answers the question;
* the lab pages show the student copies (the exercises' stubs, not the solutions), and the
  search box is there and the search page finds a chapter;
* ``make site``'s own run of a chapter (``build_site.run_chapter``: ``gpu`` cells shown, not run) makes
  the same page as the chapter tests' run: the same cells, the same kinds of output, widgets as snapshots;
* the site opens on the learner's start page (START_HERE.md), which links every chapter and
  lab, and the instructors' guides sit in their own "Instructors" section, not among the labs.
"""
from __future__ import annotations

import copy
import functools
import http.server
import re
import sys
import threading
from pathlib import Path
from urllib.parse import urljoin, urlparse

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import build_site  # noqa: E402

CHROMIUM = Path("/usr/bin/chromium")
pytestmark = [pytest.mark.slow, pytest.mark.browser]


def chapter_run(path: Path) -> tuple:
    """The chapter as the chapter tests ran it (test_notebooks.execute_notebook, the suite's
    profile, once per session), copied: the site is built from those runs, not from new ones.
    The site's page of it (build_site.page_of) drops the claim checks the tests added (hidden
    cells) and what the ``gpu`` cells printed on a machine without one, as ``make site`` shows them."""
    from test_notebooks import PROFILES, execute_notebook
    run, seconds = execute_notebook(path, PROFILES[0])
    return copy.deepcopy(run), seconds


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    if not (Path(sys.executable).parent / "jupyter-book").exists():
        pytest.skip("Jupyter Book is not installed: pip install '.[publish]' (make test does)")
    # Built in a folder of the test's own: `make site`'s _build/ is left alone, and two runs of the
    # suite at once (two checkouts' worth of work on one machine) do not write over each other's pages.
    folder = tmp_path_factory.mktemp("site")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(build_site, "STAGE", folder / "site-src")
        patch.setattr(build_site, "OUT", folder / "html")
        out = build_site.build(run=chapter_run)
        class Quiet(http.server.SimpleHTTPRequestHandler):
            def log_message(self, *args):
                pass
        handler = functools.partial(Quiet, directory=str(out))
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        yield f"http://127.0.0.1:{server.server_address[1]}"
        server.shutdown()


@pytest.fixture(scope="module")
def browser():
    if not CHROMIUM.exists():
        pytest.skip("Debian's chromium is not installed (tools/install_browser.sh)")
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        yield b
        b.close()


def _url(site, path: Path) -> str:
    """The page of a repository file (Sphinx names pages after their files)."""
    url = build_site.page_url(path.relative_to(ROOT).as_posix())
    assert (build_site.OUT / url.lstrip("/")).is_file(), f"{path.name} has no page on the site"
    return site + url


# Half a screen at a time to the bottom, in the page itself: two animation frames per step let the
# browser see what came into view (lazy pictures start loading) without a round trip per step.
SCROLL_THROUGH = """async () => {
    const step = Math.max(100, Math.floor(window.innerHeight / 2));
    for (let y = 0; y <= document.body.scrollHeight + step; y += step) {
        window.scrollTo(0, y);
        await new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)));
    }
}"""


def _open(browser, url):
    """Open a page as a reader does: load it and scroll through it (lazy pictures load when
    they come into view)."""
    page = browser.new_page(viewport={"width": 1300, "height": 1400})
    page.route(re.compile(r"^https?://(?!127\.0\.0\.1)"), lambda route: route.abort())   # no network
    response = page.goto(url, wait_until="networkidle")     # the root page sends the reader on to the start page
    assert response is not None and response.ok, f"{url}: HTTP {response and response.status}"
    page.evaluate(SCROLL_THROUGH)
    page.wait_for_load_state("networkidle")
    return page


BROKEN_IMAGES = """() => [...document.images]
    .filter(i => new URL(i.currentSrc || i.src, location.href).origin === location.origin
                 || (i.currentSrc || i.src).startsWith('data:'))
    .filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.src.slice(0, 120))"""

def _pictures_in(notebook: Path) -> int:
    """Picture outputs of the executed chapter the site was built from (PNG, SVG, HTML with SVG)."""
    import nbformat
    nb = nbformat.read(build_site.STAGE / notebook.relative_to(ROOT), as_version=4)
    count = 0
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            count += bool({"image/png", "image/svg+xml"} & set(data) or "<svg" in data.get("text/html", ""))
    return count


OUTERMOST_PICTURES = """() => document.querySelectorAll('article img').length
    + [...document.querySelectorAll('article svg')].filter(s => !s.parentElement.closest('svg')).length"""


def _internal_links(page, site):
    hrefs = page.evaluate("() => [...document.querySelectorAll('a[href]')].map(a => a.href)")
    return {h for h in hrefs if urlparse(h).netloc == urlparse(site).netloc}


def _start_pages(site) -> list[str]:
    """Where the link check starts: every page a reader arrives at from the navigation."""
    start = [f"{site}/"] + [_url(site, n) for n in sorted(ROOT.glob("chapters/*.ipynb"))]
    start += [f"{site}/faq.html", _url(site, sorted(ROOT.glob("labs/student/*.ipynb"))[0])]
    start += [_url(site, ROOT / guide) for guide in build_site.GUIDES]
    start += [_url(site, ROOT / "README.md")]
    start += [_url(site, n) for n in sorted(ROOT.glob("chapters/zh/*.ipynb"))]      # the Chinese edition
    start += [_url(site, ROOT / p) for p in build_site.ZH_PAGES if (ROOT / p).exists()]
    return start


@pytest.fixture(scope="module")
def read_pages(site, browser) -> dict[str, dict]:
    """Each start page opened once, as a reader does, and what the tests below look at on it: its
    title, its broken pictures, how many pictures it shows, its internal links and its elements' ids.
    Opening a chapter page is most of this file's time after the build: the chapter test and the link
    check read the same pages, so they read them from one pass."""
    seen = {}
    for url in _start_pages(site):
        page = _open(browser, url)
        seen[url] = {"title": page.locator("h1").first.inner_text(),
                     "broken": page.evaluate(BROKEN_IMAGES),
                     "pictures": page.evaluate(OUTERMOST_PICTURES),
                     "links": _internal_links(page, site),
                     "ids": set(page.evaluate("() => [...document.querySelectorAll('[id]')].map(e => e.id)"))}
        page.close()
    return seen


def test_every_chapter_renders_with_its_pictures(site, read_pages):
    for notebook in sorted(ROOT.glob("chapters/*.ipynb")):
        page = read_pages[_url(site, notebook)]
        number = int(notebook.name[:2])
        assert f"Chapter {number}" in page["title"], (notebook.name, page["title"])
        assert page["broken"] == [], notebook.name
        wanted, shown = _pictures_in(notebook), page["pictures"]
        assert shown >= wanted, f"{notebook.name}: {wanted} pictures executed, {shown} on the page"


def test_every_internal_link_resolves(site, browser, read_pages):
    links = set()
    for url, page in read_pages.items():
        assert page["broken"] == [], url
        links |= page["links"]
    assert len(links) > 20
    pages: dict[str, set[str]] = {}
    for link in links:
        base, _, anchor = link.partition("#")
        pages.setdefault(base, set()).update({anchor} if anchor else set())
    checked = browser.new_page()
    for base, anchors in sorted(pages.items()):
        response = checked.request.get(base)
        assert response.ok, f"broken internal link {base} ({response.status})"
        if anchors:
            if base in read_pages:                  # opened above: its ids were read there
                ids = read_pages[base]["ids"]
            else:
                checked.goto(base, wait_until="networkidle")
                ids = set(checked.evaluate("() => [...document.querySelectorAll('[id]')].map(e => e.id)"))
            assert anchors <= ids, f"{base}: no element for #{sorted(anchors - ids)}"


def test_faq_links_land_on_the_answering_section(site, browser):
    readme = (ROOT / "README.md").read_text()
    entries = build_site.faq_entries(readme)
    questions = set(re.findall(r"^\| *(Q\d+)\b", readme, flags=re.M))    # every FAQ row of the README
    assert len(entries) == len(questions) >= 25
    page = _open(browser, f"{site}/faq.html")
    target = browser.new_page()
    rows = page.evaluate("""() => Object.fromEntries([...document.querySelectorAll('article tr')]
        .filter(tr => tr.querySelector('td a'))
        .map(tr => [tr.cells[0].innerText.trim(), tr.querySelector('td a').getAttribute('href')]))""")
    for entry in entries:
        href = rows.get(entry["q"])
        assert href and "#" in href, f"{entry['q']}: the FAQ row links to no section ({href})"
        assert href.split("#")[0] == Path(entry["notebook"]).with_suffix(".html").as_posix(), href
        wanted_page = urljoin(page.url, href.split("#")[0])
        if target.url.split("#")[0] != wanted_page:      # several questions land on one chapter: load it once
            target.goto(wanted_page, wait_until="networkidle")
        anchor = href.split("#", 1)[1]
        section = target.locator(f"[id='{anchor}']")
        assert section.count() == 1, f"{entry['q']}: {href} lands on no element"
        heading = section.evaluate("e => (e.matches('h1,h2,h3,h4,h5,h6') ? e"
                                   " : e.querySelector('h1,h2,h3,h4,h5,h6')).innerText")
        wanted = re.sub(r"[`*]", "", entry["section"]).lower()
        shown = heading.lower().replace("\u2019", "'").replace("\u2018", "'")    # Sphinx's smart quotes
        assert shown.startswith(wanted[:40]), \
            f"{entry['q']} landed on {heading!r}, not {entry['section']!r}"
    target.close()


def test_labs_show_the_student_copy_and_search_is_there(site, browser):
    lab = sorted(ROOT.glob("labs/student/*.ipynb"))[0]
    page = _open(browser, _url(site, lab))
    text = page.locator("article").first.inner_text()
    assert "NotImplementedError" in text            # the stub a learner replaces
    assert "BEGIN SOLUTION" not in text
    assert page.locator("button:has-text('Search'), [aria-label*='earch']").count() > 0
    # the search page works offline (Sphinx's own index) and finds the chapter on the topic
    results = browser.new_page()
    results.goto(f"{site}/search.html?q=expandable", wait_until="networkidle")
    results.wait_for_selector("#search-results li", timeout=30_000)
    found = results.evaluate("() => [...document.querySelectorAll('#search-results li a')].map(a => a.href)")
    assert any("05_vmm_and_expandable_segments" in h for h in found), found[:10]


NAV_SECTIONS = """() => Object.fromEntries([...document.querySelectorAll('nav p.caption')].map(p => {
    const list = p.nextElementSibling;
    return [p.innerText.trim(), list ? [...list.querySelectorAll('a')].map(a => a.getAttribute('href')) : []];
}))"""


def test_the_site_opens_on_the_learners_start_page_and_instructors_have_their_own_section(site, browser):
    page = _open(browser, f"{site}/")
    assert page.locator("h1").first.inner_text().startswith("Start here"), page.locator("h1").first.inner_text()
    hrefs = set(page.evaluate("() => [...document.querySelectorAll('article a')].map(a => a.getAttribute('href'))"))
    for notebook in [*ROOT.glob("chapters/*.ipynb"), *ROOT.glob("labs/student/*.ipynb")]:
        wanted = build_site.page_url(notebook.relative_to(ROOT).as_posix()).lstrip("/")
        assert wanted in hrefs, f"the start page does not link {wanted}"
    sections = page.evaluate(NAV_SECTIONS)
    assert {"Chapters", "Labs", "Instructors"} <= set(sections), sections
    guides = {build_site.page_url(g).lstrip("/") for g in build_site.GUIDES}
    assert guides <= set(sections["Instructors"]), sections["Instructors"]
    assert not guides & set(sections["Labs"]), sections["Labs"]
    assert all("labs/student/" in h for h in sections["Labs"]), sections["Labs"]


HREF = re.compile(r'href="([^"#?]*)(?:[#?][^"]*)?"')


def test_both_editions_with_a_language_switch(site):
    """The built HTML, read as files (no browser needed): every Chinese chapter and lab has a page
    under its own sections, each page of either edition links its twin in the other language,
    and no link on a page of either edition points at a file the site does not have."""
    out = build_site.OUT
    chinese = [*ROOT.glob("chapters/zh/*.ipynb"), *ROOT.glob("labs/student/zh/*.ipynb")]
    if not chinese:
        pytest.skip("no Chinese edition built (make translations)")
    for notebook in chinese:
        page = out / notebook.relative_to(ROOT).with_suffix(".html")
        english = out / notebook.relative_to(ROOT).parent.parent / page.name
        assert page.is_file(), f"{notebook.relative_to(ROOT)} has no page"
        assert f'href="../{page.name}"' in page.read_text(encoding="utf-8"), f"{page.name}: no switch to English"
        assert f'href="zh/{page.name}"' in english.read_text(encoding="utf-8"), f"{english.name}: no switch to 中文"
    pages = [*out.glob("chapters/**/*.html"), *out.glob("labs/student/**/*.html"), out / "README.zh-CN.html"]
    broken = set()
    for page in pages:
        for target in HREF.findall(page.read_text(encoding="utf-8")):
            if target and not re.match(r"^[a-z][a-z0-9+.-]*:|^/", target) and not (page.parent / target).exists():
                broken.add(f"{page.relative_to(out)} -> {target}")
    assert not broken, sorted(broken)[:20]


def _page_shape(page) -> list:
    """What a reader sees of a page, less the figures a run measures: each cell's kind and source, and
    the kinds of output under it."""
    return [(c.cell_type, c.source, sorted({mime for out in c.get("outputs", [])
                                            for mime in (out.get("data") or {"stream": 1})}))
            for c in page.cells]


def test_make_site_runs_a_chapter_into_the_page_the_chapter_tests_run_makes(monkeypatch):
    """make site executes the chapters itself; the suite's site is built from the chapter tests' runs.
    Chapter 0 (a ``gpu`` cell, a player widget, pictures) must make the same page either way."""
    chapter = ROOT / "chapters" / "00_setup_and_tour.ipynb"
    monkeypatch.setenv("ALLOCATOR_REF_DEVICE", "sim")           # as build() sets it for its kernels
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    own = build_site.page_of(build_site.run_chapter(chapter)[0], chapter)
    suites = build_site.page_of(chapter_run(chapter)[0], chapter)
    assert _page_shape(own) == _page_shape(suites)
    snapshots = [out["data"]["text/html"] for c in own.cells for out in c.get("outputs", [])
                 if "widget-snapshot" in out.get("data", {}).get("text/html", "")]
    assert snapshots and all("<svg" in html for html in snapshots), "the player shows no block map on the page"
    assert not any(build_site.WIDGET_VIEW in out.get("data", {}) for c in own.cells for out in c.get("outputs", []))
