# Quick start:  make chat   (set up, index the seeds, open the chat UI)
#               make test   (set up with test tools, run lint, types and tests)
.PHONY: setup setup-dev chat test test-fast lint bench
# The suite runs on every core (at most 4 workers): most tests wait on subprocesses, servers and a browser.
PYTEST = .venv/bin/python -m pytest -q -ra -n auto --maxprocesses 4

setup:
	scripts/setup

setup-dev:
	scripts/setup --dev

chat: setup
	.venv/bin/rag-papers ingest
	.venv/bin/rag-papers chat

lint:
	.venv/bin/ruff check rag_papers tests app.py eval
	.venv/bin/mypy rag_papers app.py tests

test: setup-dev lint
	$(PYTEST)

# The inner loop: no browser, no bench, no end-to-end runs of the console script with models.
test-fast:
	$(PYTEST) -m "not slow and not browser"
