# Ingot. `make run` serves the bundled skills; `make test` runs the whole suite.
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
export HF_HUB_OFFLINE := 1
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: run demo demo-reset install dev test test-image test-sandbox-nonroot check format bench bench-routing bench-latency bench-stdio bench-replica bench-agent bench-regress calibrate tune-procedure confidence-ceiling compose-check screenshots clean

$(PY):
	python3 -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

$(VENV)/.installed: pyproject.toml | $(PY)
	$(PIP) install --quiet -e .
	touch $@

$(VENV)/.dev-installed: pyproject.toml | $(PY)
	$(PIP) install --quiet -e '.[dev]'
	touch $@ $(VENV)/.installed

install: $(VENV)/.installed

dev: $(VENV)/.dev-installed

# GIT_HISTORY=false: the bundled skills live inside Ingot's own repository, whose branch an
# approval must not commit to (point SKILLS_DIRS at your own skills repository to get commits).
run: install
	GIT_HISTORY=false $(VENV)/bin/ingot serve

# The README's first ten minutes with models and no API key: a clean copy of the bundled skills in
# .demo/ each time (the last demo's folder is cleared first; `make demo KEEP=1` continues it), and
# `ingot serve` pointed at the scripted model server from tests/ (see scripts/demo.py). In another
# shell, `source .demo/env` puts this venv's `ingot` on PATH with the demo's settings.
demo: install
	$(PY) scripts/demo.py $(if $(KEEP),--keep)

# Remove the demo's folder (.demo/, or DEMO_DIR) without starting anything.
demo-reset: | $(PY)
	$(PY) scripts/demo.py --reset

# Two workers, each test file on one of them (--dist loadfile keeps module fixtures and a file's
# servers together): the suite is mostly waiting on child processes and servers, so two workers
# on two cores took it from 13.5 to 7.9 minutes. TEST_WORKERS=0 runs it in one process.
TEST_WORKERS ?= 2
test: dev
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile

# The image built on a real engine and the compose file run end to end as a user would
# (scripts/test_image.py): a container engine answering on DOCKER_HOST (or podman's / Docker's
# socket), else scripts/container-engine.sh brings podman up (as root).
test-image: dev
	$(PY) scripts/test_image.py

# The sandbox tests again as the unprivileged user `nobody` (run it as root, as CI does): as
# root the sandbox drops privileges with setpriv, as a normal user it relies on bubblewrap's own
# user namespace, and both must contain the same things. nobody cannot read root's home, where
# this checkout and its .venv may live, so the files are copied to a folder it can read and get
# their own venv from the system Python.
NONROOT_DIR ?= /tmp/ingot-nonroot
SANDBOX_TESTS := tests/optimize/measure/test_sandbox.py tests/optimize/measure/test_sandbox_docker.py \
	tests/optimize/measure/test_execcheck.py
test-sandbox-nonroot:
	@[ "$$(id -u)" = 0 ] || { echo "make test-sandbox-nonroot runs as root (it switches to nobody)"; exit 2; }
	rm -rf $(NONROOT_DIR) && mkdir -p $(NONROOT_DIR)
	tar --exclude=./.venv --exclude=./.git --exclude=./runs --exclude=./optimize/tasks \
		--exclude='*/__pycache__' --exclude=./.pytest_cache --exclude=./.ruff_cache -cf - . \
		| tar -xf - -C $(NONROOT_DIR)
	/usr/bin/python3 -m venv $(NONROOT_DIR)/.venv
	$(NONROOT_DIR)/.venv/bin/python -m pip install --quiet -e '$(NONROOT_DIR)[dev]'
	chmod -R a+rX $(NONROOT_DIR)
	cd $(NONROOT_DIR) && runuser -u nobody -- env HOME=/tmp PYTHONDONTWRITEBYTECODE=1 HF_HUB_OFFLINE=1 \
		.venv/bin/python -m pytest -q -p no:cacheprovider $(SANDBOX_TESTS)

check: dev
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: dev
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

SHARED ?= ../shared
# Both dev libraries, the same binary and settings: no per-library switch.
bench-routing: install
	$(VENV)/bin/ingot bench routing --skills $(SHARED)/corpus/skills --cases $(SHARED)/corpus/dev_cases.jsonl
	$(VENV)/bin/ingot bench routing --skills $(SHARED)/corpus-tools/skills --cases $(SHARED)/corpus-tools/cases.jsonl

bench-latency: install
	$(VENV)/bin/ingot bench latency

# `ingot mcp` as hosts launch it: cold start against a bare fastmcp server, stdio vs HTTP per call.
bench-stdio: install
	$(VENV)/bin/ingot bench stdio --skills skills

# Approve on a primary to served on three verifying replicas; a replica's sync cost at 100 and 1,000 skills.
bench-replica: install
	$(VENV)/bin/ingot bench replica --skills skills

bench-agent: dev
	$(VENV)/bin/ingot bench agent

bench-regress: dev
	$(VENV)/bin/ingot bench regress

bench: bench-routing bench-latency

# What the router derived for a library (SKILLS=...; CASES=... also scores it on labelled cases).
SKILLS ?= skills
calibrate: install
	$(VENV)/bin/ingot calibrate --skills $(SKILLS) $(if $(CASES),--cases $(CASES))

# Re-pick the calibration procedure's hyper-parameters, leave-one-library-out on both dev libraries;
# also measured on both served as one library (each one's skills distractors for the other's cases).
tune-procedure: dev
	$(PY) scripts/tune_procedure.py --mixed --near-domain \
		--library corpus=$(SHARED)/corpus/skills:$(SHARED)/corpus/dev_cases.jsonl \
		--library tools=$(SHARED)/corpus-tools/skills:$(SHARED)/corpus-tools/cases.jsonl

# What labels could buy the router on both dev libraries (ARCHITECTURE.md, "Routing calibration").
confidence-ceiling: dev
	$(PY) scripts/bench_confidence_ceiling.py \
		--library corpus=$(SHARED)/corpus/skills:$(SHARED)/corpus/dev_cases.jsonl \
		--library tools=$(SHARED)/corpus-tools/skills:$(SHARED)/corpus-tools/cases.jsonl

# README screenshots, taken by the browser tests from a real run (needs /usr/bin/chromium).
screenshots: dev
	INGOT_SCREENSHOTS=docs/screenshots $(PY) -m pytest -q tests/ui/test_browser.py -k "evidence_before or approve_in or removed_from_its_history"
	INGOT_SCREENSHOTS=docs/screenshots $(PY) -m pytest -q tests/ui/test_skills_page.py -k "body_rendered"
	INGOT_SCREENSHOTS=docs/screenshots $(PY) -m pytest -q tests/ui/test_walkthrough.py
	INGOT_SCREENSHOTS=docs/screenshots $(PY) -m pytest -q tests/ui/test_replay.py -k "in_the_browser or blocked_change"

compose-check:
	docker-compose -f docker-compose.yml config --quiet
	docker-compose -f docker-compose.yml -f docker-compose.sandbox.yml config --quiet

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis

# The documentation site (mkdocs-material): `make docs` serves docs/ with live reload on
# http://127.0.0.1:8001; `make docs-build` writes site/ failing on any warning, as tests/test_docs.py does.
.PHONY: docs docs-build
docs: dev
	$(PY) -m mkdocs serve --dev-addr 127.0.0.1:8001

docs-build: dev
	$(PY) -m mkdocs build --strict -d site
