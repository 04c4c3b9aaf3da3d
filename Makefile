# Two commands for a newcomer: `make up` runs the system, `make test` passes the tests.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: up test unit integration lint typecheck check settings-doc clean venv

venv: $(STAMP)

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "inferbus needs Python >= 3.11"'
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,fast]'
	@touch $(STAMP)

up: $(STAMP)
	$(BIN)/inferbus up $(ARGS)

test: $(STAMP)
	$(BIN)/python -m pytest -q -ra $(PYTEST_ARGS)

unit: $(STAMP)
	$(BIN)/python -m pytest -q tests/unit

integration: $(STAMP)
	$(BIN)/python -m pytest -q -m integration tests/integration

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

check: lint typecheck test

settings-doc: $(STAMP)
	$(BIN)/python -m infra.settings_reference > docs/settings.md

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
