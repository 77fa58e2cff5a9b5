# Quick start: `make demo` and `make test` on a fresh machine.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# CPU build of torch for the capture tests; an unpinned torch pulls a multi-GB CUDA build.
TORCH  ?= torch==2.13.0
DEMO_DB := $(VENV)/demo.duckdb
# The post's attention variants recorded on an H200 (see the folder's README), naive first:
# the report compares every variant with the first.
DEMO_TRACES := $(addprefix sample_traces/gpu_h200/,naive.json.gz inplace.json.gz math.json.gz \
	efficient.json.gz flash.json.gz cudnn.json.gz flex.json.gz)
DEMO_HTML := $(VENV)/demo-report.html

.PHONY: demo test lint browser bench docs check-docs clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

# Analyzer only: what a laptop user installs.
$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e .
	touch $@

# Tests also need pytest and CPU torch (the capture module's round trips).
$(VENV)/.installed-dev: pyproject.toml $(VENV)/.installed
	$(BIN)/python -m pip install -q -e '.[dev]' '$(TORCH)'
	touch $@

# Headless Chromium renders the HTML report in tests/test_report.py. Best effort: without
# root or network the install fails quietly and that one test skips, saying why.
browser:
	@command -v chromium >/dev/null 2>&1 || apt-get install -y chromium >/dev/null 2>&1 \
	  || (apt-get update >/dev/null 2>&1 && apt-get install -y chromium >/dev/null 2>&1) \
	  || echo "note: could not install chromium (apt-get install -y chromium); the HTML rendering test will skip"

demo: $(VENV)/.installed
	$(BIN)/tracekit load $(DEMO_TRACES) -o $(DEMO_DB) --force
	$(BIN)/tracekit report $(DEMO_DB) --brief --html $(DEMO_HTML)

# Lint, format and type gate first: a slip fails fast, before the long suite.
lint: $(VENV)/.installed-dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# Tests run in parallel worker processes (pytest-xdist; auto: one per core), each test file on one worker
# so that its module fixtures are built once, in collection order (the longest files first: see
# tests/conftest.py) rather than xdist's most-tests-first. TEST_WORKERS=0 runs them in one process.
# Tests marked slow (exhaustive matrices, fuzzing) run only with TRACEKIT_SLOW=1, as in CI.
TEST_WORKERS ?= auto
test: $(VENV)/.installed-dev browser lint
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

bench: $(VENV)/.installed
	$(BIN)/python bench/bench_load.py

# Regenerate the generated reference docs (a test fails when they are stale).
docs: $(VENV)/.installed
	$(BIN)/python -m tracekit.docgen

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
