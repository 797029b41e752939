# Quick start:  make chat   (set up, index the seeds, open the chat UI)
#               make test   (set up with test tools, run lint, types and tests)
.PHONY: setup setup-dev chat test lint bench

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
	.venv/bin/python -m pytest -q -ra
