"""A Wikidata-shaped SPARQL endpoint through SPARQLWrapper (WDQS, QLever, a local oxigraph…).

The endpoint must hold full statements (``p:`` / ``ps:`` / ``pq:`` / ``wikibase:rank``, as the
Wikidata Query Service does). Items are fetched in pages of subjects; for each page four small
queries read statements, qualifiers (with the ``pqv:`` time precision where the endpoint has
value nodes), terms and redirects. The rows are assembled into the same :class:`EntityData` the
file loaders build, so filters and skips behave exactly as for a dump.

SPARQL has no bind parameters: every id that enters a query is validated (``is_qid`` /
``is_pid``), the language tag is checked against a strict pattern, and literals are escaped.
"""

from __future__ import annotations

import json
import re
import time
import urllib.error
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

from rdflib import BNode, Literal, URIRef
from SPARQLWrapper import JSON, POST, SPARQLWrapper
from SPARQLWrapper.SPARQLExceptions import EndPointInternalError, SPARQLWrapperException

from kgprobe._version import __version__
from kgprobe.errors import InputError
from kgprobe.loaders.build import EntityData, Statement, Value, entity_records
from kgprobe.loaders.common import LANG_RE, Filters, skip_entity
from kgprobe.loaders.rdf import (
    RANK_IRIS,
    SCHEMA,
    WIKIBASE,
    Namespaces,
    TimeInfo,
    _lexical_literals,
    term_value,
)
from kgprobe.loaders.validate import validated
from kgprobe.records import (
    INSTANCE_OF,
    SUBCLASS_OF,
    EntityRecord,
    Record,
    RedirectRecord,
    SkipRecord,
    is_pid,
    is_qid,
)

#: one row of a SELECT's JSON results: variable -> {"type", "value", "xml:lang"?, "datatype"?}
Binding = dict[str, dict[str, str]]

SOURCE = "sparql"
USER_AGENT = (
    f"kgprobe/{__version__} (https://pypi.org/project/kgprobe/; measures language models' "
    "factual knowledge against Wikidata) SPARQLWrapper"
)
RETRY_STATUS = frozenset({429, 500, 502, 503, 504})


class EndpointError(InputError):
    """The SPARQL endpoint failed for good (unreachable, refused the query, retries exhausted)."""


def escape_literal(text: str) -> str:
    """A SPARQL string literal, quotes included (ECHAR escapes of SPARQL 1.1 §19.7)."""
    out = (
        text.replace("\\", "\\\\")
        .replace('"', '\\"')
        .replace("\n", "\\n")
        .replace("\r", "\\r")
        .replace("\t", "\\t")
    )
    return f'"{out}"'


def _iri(text: str) -> str:
    if any(c in text for c in '<>"{}|^`\\ \n'):
        raise InputError(f"not a usable IRI: {text!r}")
    return f"<{text}>"


def _check_ids(ids: Iterable[str], check: Callable[[str], bool], what: str) -> list[str]:
    ids = list(ids)
    bad = [i for i in ids if not check(i)]
    if bad:
        raise InputError(f"not a Wikidata {what} id: {', '.join(sorted(bad)[:5])}")
    return ids


@dataclass(frozen=True)
class QueryBuilder:
    """Builds the loader's queries for one namespace layout; validates every id it inlines."""

    ns: Namespaces = Namespaces()

    def _values(self, var: str, iris: Sequence[str]) -> str:
        return f"VALUES ?{var} {{ {' '.join(iris)} }}"

    def _items(self, qids: Sequence[str]) -> str:
        qids = _check_ids(qids, is_qid, "item")
        return self._values("item", [_iri(self.ns.entity + q) for q in qids])

    def _props(self, pids: Sequence[str] | None) -> str:
        if pids is None:
            return ""
        pids = _check_ids(pids, is_pid, "property")
        return self._values("p", [_iri(self.ns.prop + p) for p in sorted(set(pids))])

    def _statement_pattern(self, qids: Sequence[str] | None, pids: Sequence[str] | None) -> str:
        parts = []
        if qids is not None:
            parts.append(self._items(qids))
        parts.append(self._props(pids))
        parts.append(
            f"?item ?p ?st . ?st {_iri(WIKIBASE + 'rank')} ?rank . "
            f"FILTER(STRSTARTS(STR(?p), {escape_literal(self.ns.prop + 'P')})) "
            f"FILTER(STRSTARTS(STR(?item), {escape_literal(self.ns.entity + 'Q')}))"
        )
        return "\n  ".join(p for p in parts if p)

    @staticmethod
    def _page(limit: int, offset: int) -> str:
        return f"LIMIT {int(limit)} OFFSET {int(offset)}"

    def subjects(self, pids: Sequence[str] | None, limit: int, offset: int) -> str:
        """Distinct items having a statement of one of ``pids`` (all items when None)."""
        return (
            f"SELECT DISTINCT ?item WHERE {{\n  {self._statement_pattern(None, pids)}\n}}\n"
            f"ORDER BY ?item {self._page(limit, offset)}"
        )

    def statements(
        self, qids: Sequence[str], pids: Sequence[str] | None, limit: int, offset: int
    ) -> str:
        """Statement id, rank and main value of the given items (and relations)."""
        ps = escape_literal(self.ns.prop + "statement/")
        pp = escape_literal(self.ns.prop)
        return (
            "SELECT ?item ?p ?st ?rank ?value WHERE {\n  "
            + self._statement_pattern(qids, pids)
            + f"\n  BIND(IRI(CONCAT({ps}, STRAFTER(STR(?p), {pp}))) AS ?ps)"
            + "\n  OPTIONAL { ?st ?ps ?value }\n}\n"
            + f"ORDER BY ?item ?st ?value {self._page(limit, offset)}"
        )

    def qualifiers(
        self, qids: Sequence[str], pids: Sequence[str] | None, limit: int, offset: int
    ) -> str:
        """Qualifier values of those statements, with time precision/calendar where present."""
        pq = self.ns.prop + "qualifier/"
        nv = self.ns.prop + "novalue/"
        w = WIKIBASE
        return (
            "SELECT ?st ?pq ?qv ?prec ?cal ?nv WHERE {\n  "
            + self._statement_pattern(qids, pids)
            + "\n  {\n    ?st ?pq ?qv ."
            + f"\n    FILTER(STRSTARTS(STR(?pq), {escape_literal(pq + 'P')}))"
            + f"\n    BIND(IRI(CONCAT({escape_literal(pq + 'value/')}, "
            + f"STRAFTER(STR(?pq), {escape_literal(pq)}))) AS ?pqv)"
            + f"\n    OPTIONAL {{ ?st ?pqv ?node . ?node {_iri(w + 'timeValue')} ?tv ;"
            + f" {_iri(w + 'timePrecision')} ?prec ."
            + f" OPTIONAL {{ ?node {_iri(w + 'timeCalendarModel')} ?cal }}"
            + " FILTER(STR(?tv) = STR(?qv)) }"
            + "\n  } UNION {\n    ?st a ?nv ."
            + f" FILTER(STRSTARTS(STR(?nv), {escape_literal(nv)}))\n  }}\n}}\n"
            + f"ORDER BY ?st ?pq ?qv ?nv ?prec {self._page(limit, offset)}"
        )

    def terms(self, qids: Sequence[str], language: str, limit: int, offset: int) -> str:
        """Label, description, aliases in ``language``, and owl:sameAs redirects."""
        if not LANG_RE.fullmatch(language):
            raise InputError(f"not a language code: {language!r}")
        lang = escape_literal(language.lower())
        rdfs_label = _iri("http://www.w3.org/2000/01/rdf-schema#label")
        alt = _iri("http://www.w3.org/2004/02/skos/core#altLabel")
        same = _iri("http://www.w3.org/2002/07/owl#sameAs")
        return (
            "SELECT ?item ?kind ?text WHERE {\n  "
            + self._items(qids)
            + "\n  { ?item "
            + rdfs_label
            + ' ?text . BIND("label" AS ?kind) FILTER(LCASE(LANG(?text)) = '
            + lang
            + ") }"
            + f"\n  UNION {{ ?item {_iri(SCHEMA + 'description')} ?text . "
            + f'BIND("description" AS ?kind) FILTER(LCASE(LANG(?text)) = {lang}) }}'
            + f"\n  UNION {{ ?item {alt} ?text . "
            + f'BIND("alias" AS ?kind) FILTER(LCASE(LANG(?text)) = {lang}) }}'
            + f'\n  UNION {{ ?item {same} ?text . BIND("redirect" AS ?kind) }}'
            + f"\n}}\nORDER BY ?item ?kind ?text {self._page(limit, offset)}"
        )


def _term(binding: dict[str, str] | None) -> object:
    """A SPARQL JSON result term → the rdflib term the RDF loader classifies."""
    if binding is None:
        return None
    t = binding.get("type")
    v = binding.get("value", "")
    if t == "uri":
        return URIRef(v)
    if t == "bnode":
        return BNode(v)
    with _lexical_literals():
        dt = binding.get("datatype")
        lang = binding.get("xml:lang")
        return Literal(v, lang=lang) if lang else Literal(v, datatype=URIRef(dt) if dt else None)


class SparqlClient:
    """SPARQLWrapper with a descriptive User-Agent, POST, and retry with exponential backoff.

    Retries on 429 and 5xx (and dropped connections), honouring ``Retry-After``; ``sleep`` is
    injectable so tests can observe the waits without sleeping.
    """

    def __init__(
        self,
        endpoint: str,
        *,
        user_agent: str = USER_AGENT,
        timeout: int = 120,
        max_retries: int = 5,
        backoff: float = 1.0,
        max_wait: float = 120.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not re.match(r"^https?://", endpoint):
            raise InputError(f"not an http(s) SPARQL endpoint: {endpoint!r}")
        self.endpoint = endpoint
        self.user_agent = user_agent
        self.timeout = timeout
        self.max_retries = max_retries
        self.backoff = backoff
        self.max_wait = max_wait
        self.sleep = sleep
        self.requests = 0
        self.retries = 0

    def _wait(self, attempt: int, retry_after: str | None) -> float:
        if retry_after:
            try:
                return min(self.max_wait, max(0.0, float(retry_after)))
            except ValueError:
                pass  # an HTTP date: fall back to backoff
        return min(self.max_wait, self.backoff * (2**attempt))

    def select(self, query: str) -> list[Binding]:
        """Run a SELECT; return its bindings. Raises EndpointError once retries are spent."""
        last = ""
        for attempt in range(self.max_retries + 1):
            sw = SPARQLWrapper(self.endpoint, agent=self.user_agent)
            sw.setMethod(POST)
            sw.setReturnFormat(JSON)
            sw.setTimeout(self.timeout)
            sw.setQuery(query)
            self.requests += 1
            retry_after: str | None = None
            try:
                result = sw.query().convert()
                if not isinstance(result, dict):
                    raise EndpointError(f"{self.endpoint}: not a SPARQL JSON result")
                return list(result["results"]["bindings"])
            except urllib.error.HTTPError as exc:
                if exc.code not in RETRY_STATUS:
                    raise EndpointError(f"{self.endpoint}: HTTP {exc.code} {exc.reason}") from exc
                retry_after = exc.headers.get("Retry-After") if exc.headers else None
                last = f"HTTP {exc.code}"
            except EndPointInternalError as exc:
                last = "HTTP 500"
                del exc
            except SPARQLWrapperException as exc:
                msg = " ".join(str(exc).split())[:200]
                raise EndpointError(f"{self.endpoint}: {msg}") from exc
            except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
                last = f"unreachable ({getattr(exc, 'reason', exc)})"
            except (json.JSONDecodeError, KeyError) as exc:
                raise EndpointError(f"{self.endpoint}: malformed SPARQL JSON result") from exc
            if attempt < self.max_retries:
                self.retries += 1
                self.sleep(self._wait(attempt, retry_after))
        raise EndpointError(f"{self.endpoint}: {last} after {self.max_retries + 1} attempts")

    def paged(self, make: Callable[[int, int], str], page_size: int) -> Iterator[Binding]:
        """All rows of a query, ``page_size`` at a time (LIMIT/OFFSET over a stable ORDER BY)."""
        offset = 0
        while True:
            rows = self.select(make(page_size, offset))
            yield from rows
            if len(rows) < page_size:
                return
            offset += page_size


def _local(iri: str, prefix: str) -> str:
    return iri[len(prefix) :] if iri.startswith(prefix) else iri.rsplit("/", 1)[-1]


def load_sparql(
    endpoint: str | SparqlClient,
    filters: Filters | None = None,
    *,
    subjects: Iterable[str] | None = None,
    page_size: int = 1000,
    batch_size: int = 50,
    namespaces: Namespaces | None = None,
    source: str = SOURCE,
) -> Iterator[Record]:
    """Stream records for items of an endpoint: ``subjects`` if given, else every item with a
    statement of ``filters.relations`` (every item with statements when relations is None).
    """
    return validated(
        _load_sparql(endpoint, filters, subjects, page_size, batch_size, namespaces, source)
    )


def _load_sparql(
    endpoint: str | SparqlClient,
    filters: Filters | None,
    subjects: Iterable[str] | None,
    page_size: int,
    batch_size: int,
    namespaces: Namespaces | None,
    source: str,
) -> Iterator[Record]:
    f = filters or Filters()
    ns = namespaces or Namespaces()
    client = endpoint if isinstance(endpoint, SparqlClient) else SparqlClient(endpoint)
    qb = QueryBuilder(ns)
    pids: list[str] | None = None
    if f.relations is not None:
        pids = sorted(set(f.relations) | {INSTANCE_OF, SUBCLASS_OF})
    if page_size < 1 or batch_size < 1:
        raise InputError("page_size and batch_size must be >= 1")

    def subject_stream() -> Iterator[str]:
        if subjects is not None:
            yield from _check_ids(subjects, is_qid, "item")
            return
        wanted = sorted(f.relations) if f.relations is not None else None
        for row in client.paged(lambda lim, off: qb.subjects(wanted, lim, off), page_size):
            qid = ns.entity_id(row["item"]["value"])
            if qid:
                yield qid

    done = 0
    batch: list[str] = []

    def flush(qids: list[str]) -> Iterator[Record]:
        nonlocal done
        if f.limit is not None:
            qids = qids[: max(0, f.limit - done)]
        for rec in _batch_records(client, qb, qids, pids, f, page_size, source, ns):
            if isinstance(rec, EntityRecord):
                done += 1
            yield rec

    for qid in subject_stream():
        if f.limit is not None and done >= f.limit:
            return
        batch.append(qid)
        if len(batch) >= batch_size:
            yield from flush(batch)
            batch = []
    if batch and (f.limit is None or done < f.limit):
        yield from flush(batch)


def _batch_records(
    client: SparqlClient,
    qb: QueryBuilder,
    qids: list[str],
    pids: list[str] | None,
    f: Filters,
    page_size: int,
    source: str,
    ns: Namespaces,
) -> Iterator[Record]:
    """Four paged queries for one batch of items, assembled into EntityData."""
    if not qids:
        return
    ents = {q: EntityData(id=q) for q in qids}
    redirects: dict[str, str] = {}
    labels: dict[str, list[str]] = {}
    descs: dict[str, list[str]] = {}
    for row in client.paged(lambda lim, off: qb.terms(qids, f.language, lim, off), page_size):
        qid = ns.entity_id(row["item"]["value"])
        if qid not in ents:
            continue
        kind = row["kind"]["value"]
        text = row["text"]["value"]
        if kind == "redirect":
            target = ns.entity_id(text)
            if target:
                redirects.setdefault(qid, target)
        elif kind == "label":
            labels.setdefault(qid, []).append(text)
        elif kind == "description":
            descs.setdefault(qid, []).append(text)
        elif kind == "alias":
            ents[qid].aliases.append(text)
    statements: dict[str, Statement] = {}
    for row in client.paged(lambda lim, off: qb.statements(qids, pids, lim, off), page_size):
        qid = ns.entity_id(row["item"]["value"])
        st_iri = row["st"]["value"]
        if qid not in ents or st_iri in statements:
            continue
        pid = _local(row["p"]["value"], ns.prop)
        value = term_value(_term(row["value"]), ns) if "value" in row else Value(kind="novalue")
        st = Statement(
            pid=pid,
            value=value,
            rank=RANK_IRIS.get(row["rank"]["value"], "normal"),
            statement_id=_local(st_iri, ns.statement),
        )
        statements[st_iri] = st
        ents[qid].statements.append(st)
    for row in client.paged(lambda lim, off: qb.qualifiers(qids, pids, lim, off), page_size):
        owner = statements.get(row["st"]["value"])
        if owner is None:
            continue
        if "nv" in row:
            qpid = _local(row["nv"]["value"], ns.prop + "novalue/")
            if qpid != owner.pid and is_pid(qpid):
                owner.qualifiers.append((qpid, Value(kind="novalue")))
            continue
        qpid = _local(row["pq"]["value"], ns.prop + "qualifier/")
        term = _term(row["qv"])
        info: TimeInfo | None = None
        if "prec" in row:
            dt = row["qv"].get("datatype", "")
            info = (
                row["qv"]["value"],
                dt.endswith("#dateTime"),
                int(row["prec"]["value"]),
                row["cal"]["value"] if "cal" in row else None,
            )
        val = term_value(term, ns, info)
        key = (qpid, val.kind, val.text)
        if all((p, v.kind, v.text) != key for p, v in owner.qualifiers):
            owner.qualifiers.append((qpid, val))
    for qid in qids:
        if qid in redirects:
            yield RedirectRecord(
                source=qid, target=redirects[qid], location=f"{client.endpoint}#{qid}"
            )
            continue
        ent = ents[qid]
        if qid not in labels and qid not in descs and not ent.aliases and not ent.statements:
            yield SkipRecord(reason=skip_entity("missing"), location=f"{client.endpoint}#{qid}")
            continue
        ent.label = min(labels[qid]) if qid in labels else None
        ent.description = min(descs[qid]) if qid in descs else None
        ent.aliases.sort()
        ent.statements.sort(key=lambda s: (s.pid, s.statement_id or ""))
        for st in ent.statements:
            st.qualifiers.sort(key=lambda q: (q[0], q[1].kind, q[1].text))
        yield from entity_records(ent, f, f"{client.endpoint}#{qid}", source)


__all__ = [
    "EndpointError",
    "QueryBuilder",
    "SOURCE",
    "SparqlClient",
    "USER_AGENT",
    "escape_literal",
    "load_sparql",
]
