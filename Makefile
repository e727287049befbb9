# Ingot. `make run` serves the bundled skills; `make test` runs the whole suite.
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
export HF_HUB_OFFLINE := 1
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: run install dev test check format bench bench-routing bench-latency calibrate tune-procedure compose-check screenshots clean

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

SHARED ?= ../shared
# Both dev libraries, the same binary and settings: no per-library switch.
bench-routing: install
	$(VENV)/bin/ingot bench routing --skills $(SHARED)/corpus/skills --cases $(SHARED)/corpus/dev_cases.jsonl
	$(VENV)/bin/ingot bench routing --skills $(SHARED)/corpus-tools/skills --cases $(SHARED)/corpus-tools/cases.jsonl

bench-latency: install
	$(VENV)/bin/ingot bench latency

bench: bench-routing bench-latency

# What the router derived for a library (SKILLS=...; CASES=... also scores it on labelled cases).
SKILLS ?= skills
calibrate: install
	$(VENV)/bin/ingot calibrate --skills $(SKILLS) $(if $(CASES),--cases $(CASES))

# Re-pick the calibration procedure's hyper-parameters, leave-one-library-out on both dev libraries.
tune-procedure: dev
	$(PY) scripts/tune_procedure.py \
		--library corpus=$(SHARED)/corpus/skills:$(SHARED)/corpus/dev_cases.jsonl \
		--library tools=$(SHARED)/corpus-tools/skills:$(SHARED)/corpus-tools/cases.jsonl

# README screenshots, taken by the browser tests from a real run (needs /usr/bin/chromium).
screenshots: dev
	INGOT_SCREENSHOTS=docs/screenshots $(PY) -m pytest -q tests/ui/test_browser.py -k "evidence_before or approve_in"

compose-check:
	docker-compose -f docker-compose.yml config --quiet

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis
