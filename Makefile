PYTHON ?= python3
VENV ?= .venv
PIP = $(VENV)/bin/pip
KB = $(VENV)/bin/kb
export KNOWBASE_HOME ?= $(CURDIR)/.kb-home

.PHONY: demo test setup setup-test lint

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)

setup: $(VENV)/bin/python
	$(PIP) install -q torch==2.13.0 -e ".[local]"

setup-test: $(VENV)/bin/python
	$(PIP) install -q torch==2.13.0 -e ".[local,multilingual,server,postgres,test]"

demo: setup
	$(KB) base create samples --embedding local:all-minilm-l6-v2-int8 --if-not-exists
	$(KB) add samples samples --conflict replace
	$(KB) search samples "what happens to my import if the computer crashes?"
	$(KB) search samples "how do I bake bread with wild yeast"

test: setup-test
	$(VENV)/bin/pytest -q

lint:
	$(VENV)/bin/ruff check src tests bench
