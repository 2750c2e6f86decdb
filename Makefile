# Trainyard. The README names two targets: `make run` and `make test`.
PYTHON ?= python3.11
VENV   ?= .venv
BIN    := $(VENV)/bin
PY     := $(BIN)/python
comma  := ,
export PATH := $(CURDIR)/$(BIN):$(PATH)

# `make run` is for a laptop: debug on, SQLite under var/ unless DATABASE_URL is set, its own
# Redis (a Unix socket and a password under var/) unless REDIS_URL is set, and a development
# host: the host runtime may run jobs as your user (LOCAL_HOST_RUNTIME_DEV_ONLY).
RUN_ENV := DEBUG=$${DEBUG:-1} LOCAL_HOST_RUNTIME_DEV_ONLY=$${LOCAL_HOST_RUNTIME_DEV_ONLY:-1} \
  SSH_GATEWAY_PORT=$${SSH_GATEWAY_PORT-2222}
# `make test` runs against PostgreSQL and Redis on this machine unless told otherwise.
TEST_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/trainyard

.PHONY: run serve test test-fast install install-dev lint format migrate seed bench clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

# Reinstalled when a top-level package appears (editable installs map packages at install
# time). The `train` extra is the LoRA trainer (torch, transformers, peft): `make run` seeds a demo
# model with it and the tests train with it. `--no-compile`: pip would byte-compile every
# module of every wheel, one file at a time (half of a fresh install's minute); Python compiles
# the few it imports on first use and keeps them.
# constraints.txt: the versions every clone gets (its header says why and how to move them).
#
# The wheels of those versions are kept in a wheelhouse beside pip's own cache, one per
# pyproject.toml, constraints.txt and Python (made by the first install, about 13 s): a clean
# clone installs from it without the indexes, whose pages pip would otherwise fetch and parse
# again for each of the 200 packages (12 of a fresh install's 30 seconds here). The wheelhouse
# holds what `.[dev,train]` resolves to, so both installs find all they need; an install from
# it that fails for any reason is done again from the indexes. WHEELHOUSE= turns it off.
CACHE_HOME := $(or $(XDG_CACHE_HOME),$(HOME)/.cache)
WHEELHOUSES := $(CACHE_HOME)/trainyard/wheels
WHEELHOUSE ?= $(WHEELHOUSES)/$(shell { $(PYTHON) -VV 2>&1; cat pyproject.toml constraints.txt; } | sha256sum | cut -c1-16)

define pip_install
	@if [ -n "$(WHEELHOUSE)" ] && [ ! -d "$(WHEELHOUSE)" ]; then \
	  echo "Filling the wheelhouse $(WHEELHOUSE) (once for these versions)"; \
	  rm -rf "$(WHEELHOUSE).$$$$" && \
	  $(PY) -m pip download --quiet -d "$(WHEELHOUSE).$$$$" -c constraints.txt '.[dev,train]' \
	    'setuptools>=69' && \
	  find "$(WHEELHOUSES)" -mindepth 1 -maxdepth 1 -type d -mtime +30 -exec rm -rf {} + ; \
	  mv -T "$(WHEELHOUSE).$$$$" "$(WHEELHOUSE)" 2>/dev/null || rm -rf "$(WHEELHOUSE).$$$$"; \
	fi
	@if [ -n "$(WHEELHOUSE)" ] && [ -d "$(WHEELHOUSE)" ]; then \
	  echo "$(PY) -m pip install --no-index --find-links $(WHEELHOUSE) -c constraints.txt -e '.[$(1)]'"; \
	  $(PY) -m pip install --quiet --no-compile --no-index --find-links "$(WHEELHOUSE)" \
	    -c constraints.txt -e '.[$(1)]' \
	  || $(PY) -m pip install --quiet --no-compile -c constraints.txt -e '.[$(1)]'; \
	else \
	  echo "$(PY) -m pip install -c constraints.txt -e '.[$(1)]'"; \
	  $(PY) -m pip install --quiet --no-compile -c constraints.txt -e '.[$(1)]'; \
	fi
endef

$(VENV)/.installed: pyproject.toml constraints.txt $(wildcard */__init__.py) | $(PY)
	$(call pip_install,train)
	touch $@

$(VENV)/.installed-dev: pyproject.toml constraints.txt $(wildcard */__init__.py) | $(PY)
	$(call pip_install,dev$(comma)train)
	touch $@ $(VENV)/.installed

install: $(VENV)/.installed
install-dev: $(VENV)/.installed-dev

# Before anything else, check_runtime makes a tiny container run (flags it finds go to the
# stack's environment); a runtime that cannot start containers stops it at once, naming the
# fix. With those flags, `serve` migrates, seeds the demo, and has build_images make the image
# fine-tunes and serve jobs run in when it is missing or stale (minutes the first time, with
# progress; nothing on the host runtime), then starts web, worker and beat.
run: install
	$(RUN_ENV) $(PY) manage.py runstack --check-port
	$(RUN_ENV) $(PY) manage.py check_runtime --exec $(MAKE) --no-print-directory serve

# What `make run` does once the runtime check passed (not meant to be run on its own).
serve:
	$(RUN_ENV) $(PY) manage.py migrate --noinput
	$(RUN_ENV) $(PY) manage.py seed_demo
	$(RUN_ENV) $(PY) manage.py collectstatic --noinput --verbosity 0
	$(RUN_ENV) $(PY) manage.py ensure_redis
	-$(RUN_ENV) $(PY) manage.py build_images --if-missing
	@echo "Trainyard: http://$${WEB_HOST:-127.0.0.1}:$${WEB_PORT:-8000}/  (Ctrl-C stops web, worker, beat and the SSH gateway)"
	@echo "Into a running job: ssh -p $${SSH_GATEWAY_PORT-2222} JOB_ID@127.0.0.1  (or: trainyard ssh JOB_ID)"
	@echo 'Command line: $(abspath $(BIN))/trainyard  (on PATH in another shell: export PATH="$(abspath $(BIN)):$$PATH", or . $(BIN)/activate; then trainyard login)'
	$(RUN_ENV) exec $(PY) manage.py runstack

lint: install-dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

format: install-dev
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

# Every test, on TEST_WORKERS pytest-xdist workers (3 on two cores: a third worker fills the
# time the others wait on processes; a fourth was measured no faster, the cores being busy).
# Tests that share a daemon, a port or a module fixture stay together on one worker, the
# longest groups first (tests/parallel.py).
XDIST := -n $${TEST_WORKERS:-3} --dist loadgroup --no-loadscope-reorder
# The suite starts hundreds of Python processes (stacks, runners, manage.py): the project's
# bytecode is compiled once up front and may be cached during the run, whatever
# PYTHONDONTWRITEBYTECODE says outside (else every process compiles what it imports again).
BYTECODE := $(PY) -m compileall -q -j 0 apps config runner trainer engine trainyard_cli
PYTEST_ENV := PYTHONDONTWRITEBYTECODE= DATABASE_URL=$${DATABASE_URL:-$(TEST_DATABASE_URL)}

test: lint
	DATABASE_POOL=0 DATABASE_URL=sqlite://:memory: $(PY) manage.py makemigrations --check --dry-run --settings config.test_settings
	$(BYTECODE) >/dev/null
	$(PYTEST_ENV) $(BIN)/pytest $(XDIST) $(PYTEST_ARGS)

# For a local loop, not CI: no live stack, no real daemons, no torch.
test-fast: install-dev
	$(BYTECODE) >/dev/null
	$(PYTEST_ENV) $(BIN)/pytest $(XDIST) -m "not live and not torch" $(PYTEST_ARGS)

bench: install-dev
	DATABASE_URL=$${DATABASE_URL:-$(TEST_DATABASE_URL)} $(PY) bench/run.py

clean:
	rm -rf $(VENV) var/staticfiles .pytest_cache .ruff_cache
