# The course in two commands:  make lab   (start JupyterLab)   and   make test   (run every test).
# Both create .venv with plain `python3 -m venv` + pip if it is missing.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check
# pip prints one "Location ... is ignored" line per package for this machine's local indexes; hide that noise only.
QUIET_PIP := 2>&1 | grep -v "^WARNING: Location" || true
LAB_ARGS ?=
STAMP := $(VENV)/.installed

.PHONY: workshop site lab test test-fast venv student gpu-check bench bench-quick clean sync-notebooks
.PHONY: check-labs nbgrader translations hand-out collect autograde feedback rehearse test-labs image

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@echo "Installing the course into $(VENV) (first time: a few minutes)..."
	@set -o pipefail; $(PIP) install -q --upgrade pip "setuptools>=77" $(QUIET_PIP)
	@set -o pipefail; $(PIP) install -q -e ".[test,workshop,publish]" $(QUIET_PIP)
	@$(MAKE) -s $(SLOW_IMPORT_GONE)
	@$(PY) -c "import allocator_ref, jupyterlab, ipywidgets, matplotlib, cupy, cuda.bindings" || (echo "install failed: see the pip output above"; exit 1)
	@touch $(STAMP)

venv: $(STAMP)

# jsonschema (which nbformat, nbclient, nbgrader and JupyterLab's server import) imports rfc3987-syntax,
# its optional IRI format checker, which builds ~35 Earley grammars at import: 1.1 s of CPU in every
# process that reads a notebook (jsonschema issue #1428), and no Jupyter schema checks an IRI.  Without
# the package jsonschema leaves that one format unchecked.  Measured: two labs' grading test, 43 -> 30 CPU s.
SLOW_IMPORT_GONE := rfc3987-syntax-removed
.PHONY: $(SLOW_IMPORT_GONE)
$(SLOW_IMPORT_GONE):
	@$(PIP) uninstall -y -q rfc3987-syntax >/dev/null 2>&1 || true

# torch for `make lab`: chapter 7's predict cells and `python -m allocator_ref predict` record on PyTorch's
# meta tensors.  The local CPU wheel when this machine has one (TORCH_WHEEL, below), else torch from the
# package index.  Installed once (its stamp); `make test` installs the local wheel itself and never needs the index.
TORCH_STAMP := $(VENV)/.torch-installed
$(TORCH_STAMP): $(STAMP)
	@if $(PY) -c "import torch" 2>/dev/null; then :; \
	 elif [ -n "$(TORCH_WHEEL)" ]; then echo "Installing torch from $(TORCH_WHEEL)..."; set -o pipefail; $(PIP) install -q "$(TORCH_WHEEL)" $(QUIET_PIP); \
	 else echo "Installing torch from the package index (a large download, once)..."; set -o pipefail; $(PIP) install -q torch $(QUIET_PIP); fi
	@if $(PY) -c "import torch" 2>/dev/null; then touch $(TORCH_STAMP); \
	 else echo "(torch did not install: chapter 7's predict cells say so and skip; make lab tries again next time)"; fi

# Start the course in JupyterLab, chapter 0 first.  Headless: make lab LAB_ARGS="--no-browser --port 8899"
# (as root, e.g. in a container, JupyterLab needs --allow-root)
ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root)
# JUPYTER_CONFIG_PATH adds .jupyter-course/, which hides each chapter's and lab source's jupytext .md
# twin from the file browser: JupyterLab would otherwise list and open every chapter twice.
# The language a learner starts in: COURSE_LANG=zh, or a Chinese locale (LC_ALL, LC_MESSAGES or LANG=zh_CN.UTF-8), opens the Chinese
# edition's chapter 0 (README.zh-CN.md); anything else the English one.
# The locale as POSIX orders it for messages: LC_ALL, else LC_MESSAGES, else LANG (the first one set).
COURSE_LOCALE := $(firstword $(LC_ALL) $(LC_MESSAGES) $(LANG))
COURSE_LANG ?= $(if $(filter zh%,$(COURSE_LOCALE)),zh,en)
FIRST_CHAPTER := $(if $(filter zh%,$(COURSE_LANG)),chapters/zh/00_setup_and_tour.ipynb,chapters/00_setup_and_tour.ipynb)
# A Chinese lab also has JupyterLab's menus in Chinese: .jupyter-course-zh/ sets the language pack
# (jupyterlab-language-pack-zh-CN, installed with the course) as the default locale.
LAB_CONFIG := $(CURDIR)/.jupyter-course$(if $(filter zh%,$(COURSE_LANG)),:$(CURDIR)/.jupyter-course-zh)
lab: $(STAMP) $(TORCH_STAMP)
	JUPYTER_CONFIG_PATH="$(LAB_CONFIG)$${JUPYTER_CONFIG_PATH:+:$$JUPYTER_CONFIG_PATH}" $(VENV)/bin/jupyter lab --notebook-dir=. $(ROOT_FLAG) $(LAB_ARGS) $(FIRST_CHAPTER)

# Every test.  Passes on a 2-core machine without a GPU (GPU tests skip and say why).
# Optional extras the tests use when they can have them cheaply (else those tests skip and say why):
# a CPU torch wheel already on this machine (for torch.cuda._memory_viz), Debian's chromium, and
# Debian's buildah with a debootstrapped Debian 12 to build the course image FROM (tools/install_image_builder.sh).
TORCH_WHEEL ?= $(firstword $(wildcard /opt/wheels/torch-*cpu*.whl))
# Test workers (pytest-xdist): one per core, at most 4 (each module stays on one worker; the notebook
# modules share one: tests/conftest.py).  TEST_WORKERS=0 runs the suite in this process.
TEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 1); [ $$n -gt 4 ] && n=4; echo $$n)
# The tests start hundreds of Python processes (kernels, the command line, judges) that import the course's
# package; compiled once here, none compiles it again where PYTHONDONTWRITEBYTECODE keeps Python from caching
# it (a CLI-and-grading sample: 18.6 -> 17.0 CPU s).

test: $(STAMP)
	@if [ -n "$(TORCH_WHEEL)" ]; then $(PIP) install -q "$(TORCH_WHEEL)" >/dev/null 2>&1 || echo "(torch CPU wheel did not install: the _memory_viz tests will skip)"; \
	 else echo "(no local torch CPU wheel: the _memory_viz tests will skip; pip install torch to run them)"; fi
	@test -x /usr/bin/chromium || bash tools/install_browser.sh >/dev/null 2>&1 || echo "(chromium not installed: the browser test will skip)"
	@sh tools/install_node.sh >/dev/null 2>&1 || echo "(Node.js not installed: the workshop hub test will skip)"
	@$(MAKE) -s $(PROXY) || echo "(npm missing: the workshop hub test will skip)"
	@sh tools/install_image_builder.sh >/dev/null 2>&1 || echo "(buildah or the image's base not installed: the image test will skip)"
	@$(PY) -m compileall -q allocator_ref >/dev/null 2>&1 || true
	MPLBACKEND=Agg $(PY) -m pytest -q -p no:cacheprovider --durations=30 -n $(TEST_WORKERS)

test-fast: $(STAMP)
	MPLBACKEND=Agg $(PY) -m pytest -q -p no:cacheprovider -m "not slow and not browser"

# Regenerate from each lab's one source (labs/source/labNN_*.md): its paired .ipynb, the student copy
# and labs/solutions.json.
student: $(STAMP)
	$(PY) -m allocator_ref.labs.generate
	$(PY) -m allocator_ref.editions build

# The Chinese edition (README.zh-CN.md): refresh each catalogue (locale/zh_CN/**.po, one entry per English
# paragraph; a changed paragraph becomes untranslated, its old Chinese kept as a fuzzy hint) from the
# English sources, then write chapters/zh/*.ipynb and labs/{source,student}/zh/*.ipynb and say what is
# left to translate (allocator_ref/editions).
translations: $(STAMP)
	$(PY) -m allocator_ref.editions update
	$(PY) -m allocator_ref.editions build

# The fast lab tests (make test runs all of them, notebooks included).
test-labs: $(STAMP)
	MPLBACKEND=Agg $(PY) -m pytest -q -p no:cacheprovider -m "not slow" tests/test_labs.py tests/test_labs_guard.py

# The labs' own rules (labs/README.md): every exercise has a solution that passes, a check cell, its row in
# the guide's table, hidden cases that meet every edge of its rule for every seed, and a known-wrong answer
# that the hidden cases alone reject.  make check-labs LAB=2 checks one lab.
# It also fails when the Chinese edition is out of step (an English paragraph changed without its
# catalogue entry, or a stale labs/source/zh or labs/student/zh copy): Chinese learners would get it in English.
check-labs: $(STAMP)
	$(PY) -m allocator_ref.labs.verify $(if $(LAB),--lab $(LAB))
	$(PY) -m allocator_ref.editions check

# Graded labs with nbgrader (labs/README.md, "Grading"): make nbgrader LAB=02 (the release, and
# build/nbgrader/course.git: the course without its solutions, which a graded room's learners pull:
# workshop/room_copy.py), the hub hands it out (WORKSHOP_GRADED=build/nbgrader), make collect LAB=02 gathers the learners'
# copies into build/nbgrader/submitted/, make autograde LAB=02 grades everyone (build/nbgrader/grades.csv;
# a broken submission is named, with what to do, and the others are graded), make feedback LAB=02 puts
# each learner's report in their ~/graded/lab02/feedback/.  Submissions, grades and feedback are
# readable by the instructor only (allocator_ref/labs/gradebook.py); collect and feedback need sudo
# when the hub made the learners' Unix users.  make rehearse [LAB=02]: a right and a wrong submission
# per lab, graded in build/rehearsal, before the day.
NBGRADER_DIR ?= build/nbgrader
# absolute: feedback writes into each home as its learner, from / (a relative path would point nowhere)
WORKSHOP_HOMES ?= $(CURDIR)/workshop/.run/homes
GRADEBOOK := $(PY) -m allocator_ref.labs.gradebook
nbgrader: $(STAMP)
	@test -n "$(LAB)" || (echo "usage: make nbgrader LAB=02"; exit 2)
	$(PY) -m allocator_ref.labs.grading release $(LAB) --course $(NBGRADER_DIR)
	@$(GRADEBOOK) private --course $(NBGRADER_DIR)
	$(PY) workshop/room_copy.py $(NBGRADER_DIR)

# A room on Kubernetes (homes are volumes there): HUB=https://... sends hand-out, collect and feedback
# through the hub with the instructor's token (HUB_TOKEN_FILE, mode 600; workshop/hub_exchange.py).
HUB ?=
HUB_TOKEN_FILE ?= $(HOME)/.room-token
HUB_CERT ?=
HUB_EXCHANGE = $(PY) workshop/hub_exchange.py $(1) $(LAB) $(HUB) --token-file $(HUB_TOKEN_FILE) --course $(NBGRADER_DIR) $(if $(HUB_CERT),--cert $(HUB_CERT))
hand-out: $(STAMP)
	@test -n "$(LAB)" -a -n "$(HUB)" || (echo "usage: make hand-out LAB=02 HUB=https://your-hub (one machine: the hub hands out by itself)"; exit 2)
	$(call HUB_EXCHANGE,hand-out)

collect: $(STAMP)
	@test -n "$(LAB)" || (echo "usage: make collect LAB=02 [HUB=https://your-hub]"; exit 2)
	$(if $(HUB),$(call HUB_EXCHANGE,collect),$(GRADEBOOK) collect $(LAB) --homes $(WORKSHOP_HOMES) --course $(NBGRADER_DIR))

# Run as root (sudo), each submission runs as another user (the learner's, or a numeric one), who needs a
# Python it can run: workshop/learner_python.py finds or makes one (ALLOCATOR_REF_GRADER_PYTHON picks one),
# in its own folder: the room's (workshop/.run/python) is re-made at each start, under the learners' servers.
GRADER_PYTHON = $(if $(ALLOCATOR_REF_GRADER_PYTHON),,$(if $(filter 0,$(shell id -u)),ALLOCATOR_REF_GRADER_PYTHON="$$(WORKSHOP_PYTHON_DIR=workshop/.run/grader-python $(PY) workshop/learner_python.py)"))
autograde: $(STAMP)
	@test -n "$(LAB)" || (echo "usage: make autograde LAB=02"; exit 2)
	$(GRADER_PYTHON) $(GRADEBOOK) autograde $(LAB) --course $(NBGRADER_DIR)

feedback: $(STAMP)
	@test -n "$(LAB)" || (echo "usage: make feedback LAB=02 [HUB=https://your-hub]"; exit 2)
	$(if $(HUB),$(call HUB_EXCHANGE,feedback),$(GRADEBOOK) feedback $(LAB) --homes $(WORKSHOP_HOMES) --course $(NBGRADER_DIR))

rehearse: $(STAMP)
	MPLBACKEND=Agg $(GRADER_PYTHON) $(GRADEBOOK) rehearse $(LAB)

# Who is who, when a lab closes, and the grades for a course platform (labs/README.md, "Grading"):
# make roster FILE=people.csv (user,name,email), make due LAB=02 AT="2026-12-06 17:00" (the lab closes
# then), make export: build/nbgrader/grades-moodle.csv, Moodle's grade import CSV.
# A lab closes at its date: a copy changed after it scores 0 and never replaces one collected before it;
# make extend LAB=02 LEARNER=ada AT="2026-12-07 17:00" moves one learner's date (allocator_ref/labs/due.py).
# Both write each learner's ~/graded/lab02/due.json (their date) when the hub's homes are here (sudo).
.PHONY: roster due extend export
roster: $(STAMP)
	@$(GRADEBOOK) roster --course $(NBGRADER_DIR) $(if $(FILE),--file $(FILE))

due: $(STAMP)
	@$(GRADEBOOK) due $(LAB) --course $(NBGRADER_DIR) --homes $(WORKSHOP_HOMES) $(if $(AT),--at "$(AT)")

extend: $(STAMP)
	@$(GRADEBOOK) extend $(LAB) --course $(NBGRADER_DIR) --homes $(WORKSHOP_HOMES) $(if $(LEARNER),--learner $(LEARNER)) $(if $(AT),--at "$(AT)")

export: $(STAMP)
	@$(GRADEBOOK) export --course $(NBGRADER_DIR)

# Keep every .ipynb paired with its MyST .md (edit either, then run this): the side edited since the
# last sync is copied into the other; untouched pairs are not rewritten; when both sides were edited
# it writes nothing for that pair and says how to keep one (make sync-notebooks KEEP=chapters/02_....md).
sync-notebooks: $(STAMP)
	$(PY) tools/sync_notebooks.py $(if $(KEEP),--keep $(KEEP))

# On a machine with an NVIDIA GPU: the gpu-marked tests, the measurement script, and real torch
# snapshots of the chapter workloads replayed with --verify (each script skips, saying why, without one).
gpu-check: $(STAMP)
	MPLBACKEND=Agg $(PY) -m pytest -q -p no:cacheprovider -m gpu -rs
	$(PY) tools/gpu_measure.py
	$(PY) tools/record_torch_snapshots.py

# Download the real PyTorch snapshots the chapters and labs replay (once, online; sha256-checked) into
# the per-user cache, or into ALLOCATOR_REF_TRACES when set.  `python -m allocator_ref traces list` says where they are.
.PHONY: traces
traces: $(STAMP)
	$(PY) -m allocator_ref traces fetch

bench: $(STAMP)
	$(PY) -m benchmarks.run

bench-quick: $(STAMP)
	$(PY) -m benchmarks.run --quick

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis

# A workshop room: a real JupyterHub on this machine, run as root: one Unix user, one server and one
# copy of the course per learner, over HTTPS (workshop/README.md).  The instructor's password comes
# from a file (never the command line):  sudo make workshop WORKSHOP_ADMIN_PASSWORD_FILE=~/.room-admin
# or is asked for at the terminal.  WORKSHOP_IP / WORKSHOP_PORT say where it listens (0.0.0.0:8000).
PROXY := workshop/node_modules/.bin/configurable-http-proxy
$(PROXY): workshop/package.json workshop/package-lock.json
	npm ci --prefix workshop --no-audit --no-fund --loglevel=error
	@touch $(PROXY)
# The learners' servers need a Python every user can run: the course's own when it is open to them,
# else (pyenv or conda under /root) a venv of the machine's Python in workshop/.run/python, made here
# (workshop/learner_python.py says which, and proves it as `nobody`); WORKSHOP_PYTHON picks one yourself.
workshop: $(STAMP) $(PROXY)
	@learner_python="$$($(PY) workshop/learner_python.py)" && \
	 WORKSHOP_PYTHON="$$learner_python" $(VENV)/bin/jupyterhub -f workshop/jupyterhub_config.py

# Before the room arrives, with the hub running: two test learners log in, start their servers and run
# chapter 0 and lab 1 (workshop/room_check.py).  make room-check [HUB=https://127.0.0.1:8000] [USERS=2]
.PHONY: room-check
room-check: $(STAMP)
	$(PY) workshop/room_check.py $(or $(HUB),https://127.0.0.1:8000) --users $(or $(USERS),2) \
	  $(if $(or $(HUB_CERT),$(wildcard workshop/.run/hub/tls/hub.crt)),--cert $(or $(HUB_CERT),workshop/.run/hub/tls/hub.crt))

# A fix mid-workshop: commit it, then give learners this link (nbgitpuller: pulls into their copy, their
# edits win, no restart):  make pull-link HUB=https://SERVER:8000 [PAGE=labs/student/lab02_build_the_core.ipynb]
# The repository is the room's: a hub on this machine pulls this checkout (a graded one, WORKSHOP_GRADED=
# build/nbgrader: its course.git, after make nbgrader), a hub elsewhere is the cluster's, which pulls the
# values file's repository (workshop/pull.py room_repo); WORKSHOP_REPO / WORKSHOP_BRANCH say otherwise.
.PHONY: pull-link
pull-link: $(STAMP)
	@test -n "$(HUB)" || (echo "usage: make pull-link HUB=https://your-hub [PAGE=chapters/...ipynb]"; exit 2)
	@WORKSHOP_GRADED="$(WORKSHOP_GRADED)" $(PY) workshop/pull.py --link $(HUB) $(or $(WORKSHOP_REPO),-) \
	  $(or $(WORKSHOP_BRANCH),main) $(PAGE)

# After the workshop (collect and grade first): remove the learners' Unix accounts the hub made and
# their homes (KEEP_HOMES=1 keeps the homes): sudo make workshop-clean
.PHONY: workshop-clean
workshop-clean:
	$(PY) workshop/clean_up.py $(if $(KEEP_HOMES),--keep-homes)

# The course image for Zero to JupyterHub (workshop/z2jh-values.yaml): workshop/Dockerfile, built from
# Debian's archive and PyPI by `docker build` where a Docker engine runs, else by buildah (no daemon:
# apt-get install buildah), else by podman.
#   make image IMAGE=REGISTRY/allocator-course:2026.11      then docker push (or buildah push) it
# IMAGE_BASE=NAME builds FROM another Debian 12 image than Docker Hub's debian:bookworm-slim (the test
# uses a debootstrapped one: tests/test_workshop_image.py); IMAGE_TOOL=docker|buildah|podman picks the tool.
IMAGE ?= allocator-course:latest
IMAGE_BASE ?=
IMAGE_TOOL ?= $(shell if docker info >/dev/null 2>&1; then echo docker; \
	elif command -v buildah >/dev/null 2>&1; then echo buildah; \
	elif command -v podman >/dev/null 2>&1; then echo podman; fi)
# IMAGE_CUDA=no leaves CuPy and cuda-python out of the image (244 MB installed, measured in the course's venv):
# enough for rooms on the simulated device.
IMAGE_CUDA ?= yes
IMAGE_BUILD_ARGS = $(strip -f workshop/Dockerfile -t $(IMAGE) --build-arg CUDA_WHEELS=$(IMAGE_CUDA) \
	$(if $(IMAGE_BASE),--build-arg BASE=$(IMAGE_BASE)))
# buildah's chroot isolation needs no runc and no namespaces of its own (CI containers, VMs)
export BUILDAH_ISOLATION ?= chroot
image:
	@test -n "$(IMAGE_TOOL)" || { echo "make image needs a running Docker engine, or buildah or podman (Debian: apt-get install buildah)"; exit 1; }
	$(if $(filter buildah,$(IMAGE_TOOL)),buildah bud --layers,$(IMAGE_TOOL) build) $(IMAGE_BUILD_ARGS) .

# The course website (Jupyter Book 1, all from PyPI): every chapter executed on the simulated
# device, the labs, the FAQ, the guides -> _build/html/index.html (tools/build_site.py).
site: $(STAMP)
	MPLBACKEND=Agg $(PY) tools/build_site.py
