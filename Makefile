# shardviz: `make lab` opens the notebooks, `make test` runs everything.
# Both create or update .venv from pyproject.toml first.

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
JOBS   ?= 2

.PHONY: setup lab test unit notebooks-check notebooks bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[test,lab]"
	touch $(STAMP)

setup: $(STAMP)

lab: setup
	$(BIN)/jupyter lab notebooks/

test: setup
	$(BIN)/python -m pytest -n $(JOBS) --dist loadfile tests

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis *.egg-info
