#!/usr/bin/env bash
# `make test`: the whole suite on the managed ArcadeDB server, then on Neo4j 5 (the test server of
# tools/neo4j-test-server, KGPROBE_TEST_SERVER=neo4j), then both pytest summaries. Fails if either
# fails. Without Java 17+ or Maven the Neo4j half is not run (one line says why), except with
# CI=true, where that is a failure.
set -uo pipefail
PY=${1:?usage: test_both_servers.sh PYTHON}
cd "$(dirname "$0")/.."
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
summary() { grep -E '^[0-9]+ (passed|failed|error|skipped|deselected)|^no tests ran' "$1" | tail -n1; }

# Each half on KGPROBE_TEST_WORKERS pytest-xdist workers (default 2; 0: one process), a test
# file per worker at a time (--dist loadfile: a file's module fixtures and its order stay as in
# a serial run). Every worker has its own graph server, home, ports and temporary folders
# (tests/conftest.py's session fixtures). --durations=25: the slowest tests of each half are in
# the log (issue 39: where the suite's time goes).
workers=${KGPROBE_TEST_WORKERS:-2}
case "$workers" in ''|*[!0-9]*) echo "KGPROBE_TEST_WORKERS=$workers: expected a number of workers (0: none)"; exit 2;; esac
par=(-n "$workers" --dist loadfile)
if ! "$PY" -c "import xdist" 2>/dev/null; then
  echo "pytest-xdist is not installed (pip install -e '.[dev]'): one process per half"
  par=()
fi
echo "== test suite on the managed ArcadeDB server (${workers} workers)"
"$PY" -m pytest -q -rs --durations=25 "${par[@]}" 2>&1 | tee "$logs/arcadedb.log"
arcadedb_rc=${PIPESTATUS[0]}

neo4j_rc=0
if why=$("$PY" tests/neo4j_server.py check); then
  echo "== test suite on Neo4j 5 (KGPROBE_TEST_SERVER=neo4j, ${workers} workers)"
  # what `make test-neo4j` does, for the tests that reach the graph server (tests/conftest.py:
  # the others never talk to it and have just run in the ArcadeDB half)
  { (cd tools/neo4j-test-server && mvn -q -B package) \
    && KGPROBE_TEST_SERVER=neo4j KGPROBE_TEST_SERVER_ONLY=1 "$PY" -m pytest -q -rs --durations=25 "${par[@]}"; } \
    2>&1 | tee "$logs/neo4j.log"
  neo4j_rc=${PIPESTATUS[0]}
  neo4j_line="neo4j: $(summary "$logs/neo4j.log")"
elif [ "${CI:-}" = "true" ]; then
  neo4j_rc=1
  neo4j_line="neo4j: not run, and CI=true requires it: $why"
else
  neo4j_line="neo4j: not run: $why (ArcadeDB users need neither Java nor Maven)"
fi

echo "== both servers"
echo "arcadedb: $(summary "$logs/arcadedb.log")"
echo "$neo4j_line"
[ "$arcadedb_rc" -eq 0 ] && [ "$neo4j_rc" -eq 0 ]
