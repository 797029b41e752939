# Quick start:  make chat   (set up, index the seeds, open the chat UI)
#               make test   (set up with test tools, run lint, types and tests)
.PHONY: setup setup-dev chat test test-fast lint check format bench
# The suite runs on every core (at most 4 workers): most tests wait on subprocesses, servers and a browser.
# loadgroup, in collection order: the slow tests are handed out first and a few modules with costly fixtures
# stay on one worker (tests/conftest.py: pytest_collection_modifyitems, pytest_xdist_make_scheduler).
PYTEST = .venv/bin/python -m pytest -q -ra -n auto --maxprocesses 4 --dist loadgroup --no-loadscope-reorder --durations=15

setup:
	scripts/setup

setup-dev:
	scripts/setup --dev

chat: setup
	.venv/bin/rag-papers ingest
	.venv/bin/rag-papers chat

SOURCES = rag_papers tests app.py eval

lint:
	.venv/bin/ruff check $(SOURCES)
	.venv/bin/mypy rag_papers app.py tests

# What CI checks before the tests: formatting, lint, and types (strict on the package: pyproject.toml).
check: lint
	.venv/bin/ruff format --check $(SOURCES)

format:
	.venv/bin/ruff format $(SOURCES)
	.venv/bin/ruff check --fix $(SOURCES)

test: setup-dev check
	$(PYTEST)

# The inner loop: no browser, no bench, no end-to-end runs of the console script with models.
test-fast:
	$(PYTEST) -m "not slow and not browser"
