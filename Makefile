# Two entry points (see README.md):
#   make run   - set up, then run the API server and one worker on SQLite (Ctrl-C stops both)
#   make test  - set up, then run the whole test suite (honours DATABASE_URL)
# Setup is idempotent: the virtualenv is created once and dependencies are reinstalled only
# when pyproject.toml changes.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
ADDR ?= 127.0.0.1:8000
PYTEST_ARGS ?=

.PHONY: run test setup lint

run: setup
	$(PY) manage.py migrate --noinput
	$(PY) manage.py demo_setup
	$(PY) manage.py demo_auto_memory
	$(PY) manage.py run_main --addrport $(ADDR)

test: setup
	$(PY) -m pytest $(PYTEST_ARGS)

lint: setup
	$(PY) -m ruff check .

setup: $(STAMP)

$(PY):
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)
