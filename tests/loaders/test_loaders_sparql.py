"""SPARQL loader against a REAL endpoint: the oxigraph server (PyPI ``oxigraph``) loaded with the
Wikidata Turtle samples. Retry is exercised through a real HTTP server on 127.0.0.1 that
answers 429/503 first and then forwards to oxigraph — a server, not a mock object.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from loaders_support import WD, entities, fact_key, facts

from kgprobe.errors import InputError
from kgprobe.loaders import Filters, detect_format, open_source, sparql_records
from kgprobe.loaders.rdf import load_rdf
from kgprobe.loaders.sparql import (
    USER_AGENT,
    EndpointError,
    QueryBuilder,
    SparqlClient,
    escape_literal,
    load_sparql,
)
from kgprobe.records import RedirectRecord, SkipRecord

SAMPLES = [WD / "wdqs-rdf" / n for n in ("Q42.ttl", "Q24628793.ttl", "small_dump.ttl")]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _oxigraph() -> str:
    exe = shutil.which("oxigraph") or str(Path(sys.executable).parent / "oxigraph")
    if not Path(exe).exists():
        pytest.fail("the oxigraph server is missing: pip install -e '.[dev]' (PyPI 'oxigraph')")
    return exe


@pytest.fixture(scope="module")
def endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    exe = _oxigraph()
    db = tmp_path_factory.mktemp("oxigraph") / "db"
    subprocess.run(
        [exe, "load", "--location", str(db), "--file", *map(str, SAMPLES)],
        check=True,
        capture_output=True,
    )
    port = _free_port()
    proc = subprocess.Popen(
        [exe, "serve", "--location", str(db), "--bind", f"127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}/query"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(f"{url}?query=ASK%7B%7D", timeout=2).read()
                break
            except (urllib.error.URLError, ConnectionError):
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("oxigraph did not start") from None
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


class _Flaky(BaseHTTPRequestHandler):
    """Answers the first ``fail`` requests with ``status`` (and Retry-After), then proxies."""

    upstream = ""
    fail = 0
    status = 429
    retry_after: str | None = None
    seen_agents: list[str] = []

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        type(self).seen_agents.append(self.headers.get("User-Agent", ""))
        if type(self).fail > 0:
            type(self).fail -= 1
            self.send_response(type(self).status)
            if type(self).retry_after is not None:
                self.send_header("Retry-After", type(self).retry_after)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        req = urllib.request.Request(
            type(self).upstream,
            data=body,
            headers={
                "Content-Type": self.headers.get("Content-Type", ""),
                "Accept": self.headers.get("Accept", ""),
            },
        )
        with urllib.request.urlopen(req, timeout=30) as resp:
            data = resp.read()
            ctype = resp.headers.get("Content-Type", "application/sparql-results+json")
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


@pytest.fixture
def flaky(endpoint: str) -> Iterator[type[_Flaky]]:
    handler = type("Flaky", (_Flaky,), {"upstream": endpoint, "seen_agents": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    handler.url = f"http://127.0.0.1:{server.server_address[1]}/query"  # type: ignore[attr-defined]
    try:
        yield handler
    finally:
        server.shutdown()
        server.server_close()


def _file_facts() -> set[tuple[object, ...]]:
    return {fact_key(f) for p in SAMPLES for f in facts(load_rdf(p))}


def test_endpoint_yields_the_same_records_as_the_files(endpoint: str) -> None:
    recs = list(open_source(endpoint))
    assert detect_format(endpoint) == "sparql"
    assert {fact_key(f) for f in facts(recs)} == _file_facts()
    from_files = {e.qid: e for p in SAMPLES for e in entities(load_rdf(p))}
    for ent in entities(recs):
        assert ent == from_files[ent.qid]
    temporal = [f for f in facts(recs) if f.start is not None]
    assert temporal and all(f.start.precision in (9, 10, 11) for f in temporal)  # type: ignore[union-attr]


def test_paging_gives_the_same_result_in_more_requests(endpoint: str) -> None:
    small = SparqlClient(endpoint)
    big = SparqlClient(endpoint)
    paged = list(load_sparql(small, page_size=40, batch_size=1))
    whole = list(load_sparql(big, page_size=10_000))
    assert [fact_key(f) for f in facts(paged)] == [fact_key(f) for f in facts(whole)]
    assert small.requests > big.requests + 5


def test_relations_subjects_redirects_and_limit(endpoint: str) -> None:
    only = list(load_sparql(endpoint, Filters.make(relations=["P69"])))
    assert {f.pid for f in facts(only)} == {"P69"}
    assert [(e.qid, e.types) for e in entities(only)] == [("Q42", ["Q5"])]

    chosen = list(
        sparql_records(endpoint, Filters(), subjects=["Q24628793", "Q6825", "Q999999999"])
    )
    assert [e.qid for e in entities(chosen)] == ["Q24628793"]
    assert RedirectRecord(source="Q6825", target="Q26709563") in chosen
    assert any(isinstance(r, SkipRecord) and r.reason == "entity:missing" for r in chosen)

    limited = list(load_sparql(endpoint, Filters(limit=1), batch_size=1))
    assert len(entities(limited)) == 1


def test_values_are_validated_and_literals_escaped(endpoint: str) -> None:
    qb = QueryBuilder()
    with pytest.raises(InputError, match="item id"):
        qb.statements(["Q42 } DELETE { ?s ?p ?o } #"], None, 10, 0)
    with pytest.raises(InputError, match="property id"):
        qb.statements(["Q42"], ["P31>"], 10, 0)
    with pytest.raises(InputError, match="language"):
        qb.terms(["Q42"], 'en") } #', 10, 0)
    with pytest.raises(InputError):
        list(load_sparql(endpoint, subjects=["wd:Q42"]))
    nasty = 'a "quoted" \\ back\nslash\ttab \' } # end'
    rows = SparqlClient(endpoint).select(
        f"SELECT ?x WHERE {{ BIND({escape_literal(nasty)} AS ?x) }}"
    )
    assert rows[0]["x"]["value"] == nasty


def test_retry_after_429_is_honoured_and_user_agent_sent(flaky: type[_Flaky]) -> None:
    flaky.fail, flaky.status, flaky.retry_after = 2, 429, "3"
    waits: list[float] = []
    client = SparqlClient(flaky.url, sleep=waits.append)  # type: ignore[attr-defined]
    recs = list(load_sparql(client, subjects=["Q42"]))
    assert waits == [3.0, 3.0]
    assert {fact_key(f) for f in facts(recs)} == {fact_key(f) for f in facts(load_rdf(SAMPLES[0]))}
    assert flaky.seen_agents and all(a == USER_AGENT for a in flaky.seen_agents)
    assert USER_AGENT.startswith("kgprobe/")


def test_5xx_backs_off_exponentially_then_gives_up(flaky: type[_Flaky]) -> None:
    flaky.fail, flaky.status, flaky.retry_after = 2, 503, None
    waits: list[float] = []
    client = SparqlClient(flaky.url, backoff=0.5, sleep=waits.append)  # type: ignore[attr-defined]
    assert len(client.select("SELECT * WHERE { ?s ?p ?o } LIMIT 1")) == 1
    assert waits == [0.5, 1.0]

    flaky.fail = 10
    waits.clear()
    client = SparqlClient(flaky.url, max_retries=2, backoff=0.5, sleep=waits.append)  # type: ignore[attr-defined]
    with pytest.raises(EndpointError, match="HTTP 503 after 3 attempts"):
        client.select("SELECT * WHERE { ?s ?p ?o } LIMIT 1")
    assert waits == [0.5, 1.0]


def test_bad_query_is_not_retried_and_dead_endpoint_is_one_clear_error(endpoint: str) -> None:
    waits: list[float] = []
    client = SparqlClient(endpoint, sleep=waits.append)
    with pytest.raises(EndpointError) as exc:
        client.select("SELECT WHERE { this is not sparql")
    assert waits == [] and "\n" not in str(exc.value)
    dead = SparqlClient(f"http://127.0.0.1:{_free_port()}/query", max_retries=1, sleep=waits.append)
    with pytest.raises(EndpointError, match="unreachable"):
        dead.select("SELECT * WHERE { ?s ?p ?o } LIMIT 1")
    with pytest.raises(InputError):
        SparqlClient("ftp://example.org/sparql")
