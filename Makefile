# Two entry points (see README.md):
#   make run   - set up, then run the API server and one worker on SQLite (Ctrl-C stops both)
#   make test  - set up, then run the whole test suite (honours DATABASE_URL)
# Setup is idempotent: the virtualenv is created once and dependencies are reinstalled only
# when pyproject.toml changes. `make test` also installs the real codex CLI the tests run
# (the version pinned in tests/worker/real_codex/codex-version) from npm into .cache/; without
# npm those tests skip (and fail in CI). It also installs Chromium for the console's browser
# tests when it is missing and apt can be used (as root); without it they skip (fail in CI).
# And pgvector into the local PostgreSQL server (scripts/pgvector-install.sh), where auto
# memory keeps its memory vectors; without it ranking falls back to keywords.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
ADDR ?= 127.0.0.1:8000
PYTEST_ARGS ?=
CODEX_VERSION := $(shell cat tests/worker/real_codex/codex-version)
CODEX_DIR := .cache/codex-cli/$(CODEX_VERSION)
CODEX_BIN := $(CODEX_DIR)/bin/codex

.PHONY: run run-model model test setup lint codex-cli browser sandbox git pgvector

# `make run` serves as a deployment does (DEBUG off, gunicorn, static files by whitenoise),
# with a secret key generated once into var/ (an exported SECRET_KEY wins). ADDR=HOST:PORT.
DEV_SECRET_KEY := var/dev-secret-key
# Sign-in locks and throttle counters are shared by the server's processes through a file
# cache under var/ unless CACHE_URL names another (e.g. redis://...).
RUN_ENV = DEBUG=False SECRET_KEY="$${SECRET_KEY:-$$(cat $(DEV_SECRET_KEY))}" \
	CACHE_URL="$${CACHE_URL:-filecache://$(CURDIR)/var/cache}"

run: setup sandbox git pgvector $(DEV_SECRET_KEY)
	$(RUN_ENV) $(PY) manage.py migrate --noinput
	$(RUN_ENV) $(PY) manage.py demo_setup
	$(RUN_ENV) $(PY) manage.py demo_auto_memory --addrport $(ADDR)
	$(RUN_ENV) $(PY) manage.py run_main --addrport $(ADDR)

# The local memory model (docs/auto-memory.md, "Trying model extraction locally"): `make
# model` builds the llama.cpp server once (several minutes; kept under .cache/) and fetches
# the pinned weights (1.1 GB, hash checked); `make run-model` is `make run` with that model
# extracting and consolidating the demo user's memories. The tests that use it skip without
# it (in CI they fail).
model: setup
	$(PY) -m automemory.local_model install
	$(PY) -m automemory.local_model fetch

run-model: setup model sandbox git pgvector $(DEV_SECRET_KEY)
	$(RUN_ENV) $(PY) manage.py migrate --noinput
	$(RUN_ENV) $(PY) manage.py demo_setup
	$(RUN_ENV) $(PY) manage.py run_with_local_model --addrport $(ADDR)

$(DEV_SECRET_KEY):
	mkdir -p $(@D)
	umask 077 && $(PYTHON) -c 'import secrets; print(secrets.token_urlsafe(50))' > $@

test: setup codex-cli browser sandbox git pgvector model
	$(PY) -m pytest $(PYTEST_ARGS)

# The OS's Chromium for the console's browser tests (Playwright drives it; its own browser
# download is not used). Not fatal: without it those tests skip, saying why.
browser:
	@if [ -z "$$CONSOLE_BROWSER" ] && ! command -v chromium >/dev/null 2>&1 \
		&& ! command -v chromium-browser >/dev/null 2>&1; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
			(apt-get update -qq && apt-get install -y -qq chromium >/dev/null) \
				|| echo "could not install chromium: the console browser tests will skip"; \
		else \
			echo "chromium not found: the console browser tests will skip (in CI they fail)"; \
		fi; \
	fi

# bubblewrap, the sandbox agents run in (worker/sandbox.py). Not fatal here: without it
# WORKER_SANDBOX=auto runs agents unsandboxed with a warning, and the sandbox tests skip (in
# CI they fail).
sandbox:
	@if ! command -v bwrap >/dev/null 2>&1; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
			(apt-get update -qq && apt-get install -y -qq bubblewrap >/dev/null) \
				|| echo "could not install bubblewrap: agents would run unsandboxed"; \
		else \
			echo "bwrap not found: agents run unsandboxed, the sandbox tests skip (in CI they fail)"; \
		fi; \
	fi

# git, which repositories and worktrees run (controlplane/git.py). Without it a task on a
# project with a repository fails, saying so, and the git tests skip (in CI they fail).
git:
	@if ! command -v git >/dev/null 2>&1; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
			(apt-get update -qq && apt-get install -y -qq git >/dev/null) \
				|| echo "could not install git: tasks on repositories will fail"; \
		else \
			echo "git not found: tasks on repositories fail, the git tests skip (in CI they fail)"; \
		fi; \
	fi

# pgvector for the local PostgreSQL server's major version (a no-op without a local server or
# once installed). Not fatal: without it memories are ranked by keywords alone, `manage.py
# check --deploy` says so, and the PostgreSQL vector tests skip (in CI they fail).
pgvector:
	@sh scripts/pgvector-install.sh \
		|| echo "could not install pgvector: memories will be ranked by keywords alone"

lint: setup
	$(PY) -m ruff check .

setup: $(STAMP)

$(PY):
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

codex-cli: $(CODEX_BIN)

$(CODEX_BIN): tests/worker/real_codex/codex-version
	@if command -v npm >/dev/null 2>&1; then \
		npm install --global --prefix $(CODEX_DIR) --no-audit --no-fund --loglevel=error \
			@openai/codex@$(CODEX_VERSION) && touch $(CODEX_BIN) \
			|| echo "could not install @openai/codex@$(CODEX_VERSION): real-CLI tests will skip"; \
	else \
		echo "npm not found: the real codex CLI tests will skip (in CI they fail)"; \
	fi
