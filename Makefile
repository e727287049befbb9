# Ingot. `make run` serves the bundled skills; `make test` runs the whole suite.
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
export HF_HUB_OFFLINE := 1
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: run install dev test check format bench bench-routing bench-latency calibrate compose-check screenshots clean

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

run: install
	$(VENV)/bin/ingot serve

test: dev
	$(PY) -m pytest

check: dev
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: dev
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

SHARED ?= ../shared/corpus
bench-routing: install
	$(VENV)/bin/ingot bench routing --skills $(SHARED)/skills --cases $(SHARED)/dev_cases.jsonl

bench-latency: install
	$(VENV)/bin/ingot bench latency

bench: bench-routing bench-latency

calibrate: install
	$(PY) scripts/calibrate_router.py --skills $(SHARED)/skills --cases $(SHARED)/dev_cases.jsonl

# README screenshots, taken by the browser tests from a real run (needs /usr/bin/chromium).
screenshots: dev
	INGOT_SCREENSHOTS=docs/screenshots $(PY) -m pytest -q tests/ui/test_browser.py -k "evidence_before or approve_in"

compose-check:
	docker-compose -f docker-compose.yml config --quiet

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis
