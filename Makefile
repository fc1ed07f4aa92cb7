# Quick start:  make demo   (set up .venv, generate a MADMAN dataset from the bundled MNIST digits, write a preview)
#               make test   (set up .venv if needed, lint with ruff, run the test suite)
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin

$(BIN)/madman: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[all]"
	touch $@

.PHONY: setup demo test
setup: $(BIN)/madman

demo: setup
	$(BIN)/madman generate --out data/madman-demo --overwrite
	$(BIN)/madman preview data/madman-demo --out data/madman-demo/preview.png

test: setup
	$(BIN)/ruff check bindscope tests benchmarks
	$(BIN)/python -m pytest -q
