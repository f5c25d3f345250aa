# shardviz: `make lab` opens the notebooks, `make test` runs everything.
# Both create or update .venv from pyproject.toml first.

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
JOBS   ?= 2
CHROMIUM ?= /usr/bin/chromium
SUDO   := $(shell [ "$$(id -u)" = 0 ] || command -v sudo)
# JupyterLab refuses to run as root unless told; containers often are root.
LAB_FLAGS := $(shell [ "$$(id -u)" = 0 ] && echo --allow-root)

.PHONY: setup browser lab lint test notebooks bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	@echo "installing shardviz and its extras into $(VENV) (log: $(VENV)/install.log)"
	@$(BIN)/python -m pip install --quiet -e ".[test,lab,hub,tpu]" > $(VENV)/install.log 2>&1 \
	  || (cat $(VENV)/install.log; exit 1)
	touch $(STAMP)

setup: $(STAMP)

# The browser test drives Debian's Chromium with Playwright (never `playwright install`).
browser:
	@test -x $(CHROMIUM) || ( $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq chromium > /dev/null )
	@# Debian's launcher script warns on stderr on some machines; the version line is what matters.
	@$(CHROMIUM) --version 2>/dev/null

# make lab PORT=8890 IP=0.0.0.0 NO_BROWSER=1 LAB_ARGS="--ServerApp.token=..."
PORT ?= 8888
IP ?= 127.0.0.1
LAB_ARGS ?=
NO_BROWSER ?=
lab: setup
	$(BIN)/jupyter lab $(LAB_FLAGS) --port=$(PORT) --ip=$(IP) \
	  $(if $(NO_BROWSER),--no-browser) $(LAB_ARGS) notebooks/

NBVAL  := --nbval --nbval-current-env --nbval-sanitize-with notebooks/nbval_sanitize.cfg

# Lint and types first: a lint error fails the suite.
lint: setup
	$(BIN)/ruff check shardviz tests bench
	$(BIN)/mypy

test: setup browser lint
	SHARDVIZ_REQUIRE_BROWSER=1 SHARDVIZ_REQUIRE_HUB=1 SHARDVIZ_REQUIRE_TPU=1 $(BIN)/python -m pytest -n $(JOBS) --dist loadfile $(NBVAL) tests notebooks

# Re-execute every notebook and store it with its outputs.
notebooks: setup
	PATH=$(abspath $(BIN)):$$PATH $(BIN)/jupyter nbconvert --to notebook --execute --inplace \
	  --ExecutePreprocessor.timeout=600 --ExecutePreprocessor.record_timing=False \
	  --ExecutePreprocessor.store_widget_state=False notebooks/*.ipynb

bench: setup
	for script in bench/bench_*.py; do $(BIN)/python $$script || exit 1; done

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis *.egg-info
