# Two commands for a newcomer: `make up` runs the system, `make test` passes the tests.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
INTEROP := tests/interop/node

.PHONY: up test unit integration interop interop-deps lint typecheck check settings-doc clean venv

venv: $(STAMP)

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "inferbus needs Python >= 3.11"'
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,fast]'
	@touch $(STAMP)

up: $(STAMP)
	$(BIN)/inferbus up $(ARGS)

test: $(STAMP) interop-deps
	$(BIN)/python -m pytest -q -ra $(PYTEST_ARGS)

# kafkajs for the JavaScript producer's test (tests/integration/test_node_producer.py); where
# npm is missing or cannot reach its registry, that one test is skipped, said in its reason.
interop-deps:
	@if command -v npm >/dev/null 2>&1; then \
		test -d $(INTEROP)/node_modules/kafkajs || npm ci --prefix $(INTEROP) --no-audit --no-fund --silent --fetch-retries=1 --fetch-timeout=30000 \
		|| echo "interop: npm ci failed; the JavaScript producer's test will be skipped"; \
	else echo "interop: no npm; the JavaScript producer's test will be skipped"; fi

interop: $(STAMP) interop-deps
	$(BIN)/python -m pytest -q -ra tests/integration/test_node_producer.py

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
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache $(INTEROP)/node_modules
