"""Wikidata RDF: N-Triples and Turtle, truthy (``wdt:``) and full statements.

Parsed with pyoxigraph (a Rust parser, ~20-30× faster than rdflib's, docs/benchmarks.md);
``parser="rdflib"`` keeps the former rdflib parser (for comparison). Terms are handed on as
rdflib terms either way, so the reading below and the SPARQL loader share one term classifier.

Streaming: the file is cut *textually* into groups, one per entity — ``wd:Q42`` together with
its statement nodes (``wds:Q42-…``) and whatever follows them (value nodes, references,
sitelinks) up to the next entity. Whole groups are handed to rdflib a few at a time (about
``CHUNK_CHARS`` of text; rdflib's fixed cost per parse dominates otherwise), so memory is
bounded by one chunk or one entity, whichever is larger — never by the file. Turtle keeps its
``@prefix`` header, which is prepended to every chunk. This relies on the layout of Wikidata's
dumps (an entity's triples are contiguous); the one thing shared across entities there, time
value nodes (``wdv:``), is kept in a bounded cache.

A chunk that the parser rejects is re-parsed block by block (line by line for N-Triples): the bad
blocks become ErrorRecords with ``file:line``, the rest still loads.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import re
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pyoxigraph as ox
import rdflib
from rdflib import BNode, Graph, Literal, URIRef
from rdflib.namespace import OWL, RDF, RDFS, SKOS, XSD

from kgprobe.errors import InputError
from kgprobe.loaders.build import EntityData, Statement, Value, entity_records
from kgprobe.loaders.common import Filters, base_suffix, guarded, open_text, time_from_rdf
from kgprobe.loaders.formats import suffix_table
from kgprobe.loaders.validate import validated
from kgprobe.records import ErrorRecord, Record, RedirectRecord, SkipRecord

SOURCE = "rdf"

WIKIBASE = "http://wikiba.se/ontology#"
SCHEMA = "http://schema.org/"
GEO_WKT = "http://www.opengis.net/ont/geosparql#wktLiteral"
RANK_IRIS = {
    WIKIBASE + "PreferredRank": "preferred",
    WIKIBASE + "NormalRank": "normal",
    WIKIBASE + "DeprecatedRank": "deprecated",
}
_NUMERIC = {str(XSD.decimal), str(XSD.integer), str(XSD.double), str(XSD.float)}
COMMONS_FILE = "http://commons.wikimedia.org/wiki/Special:FilePath/"
COMMONS_DATA = "http://commons.wikimedia.org/data/main/"

_ENTITY_LOCAL = re.compile(r"^(Q[1-9]\d*|P[1-9]\d*|L[1-9]\d*(?:-[FS][1-9]\d*)?|M[1-9]\d*)\Z")
_STATEMENT_OWNER = re.compile(r"^([QPLMqplm][1-9]\d*)[-$]")
_PID = re.compile(r"^P[1-9]\d*\Z")
_PREFIX_LINE = re.compile(r"^\s*(?:@prefix\b|@base\b|prefix\s|base\s)", re.IGNORECASE)
_PREFIX_DECL = re.compile(r"^\s*@?prefix\s+([A-Za-z][\w.-]*)?:\s*<([^>]*)>", re.IGNORECASE)
_STRIP_TOKENS = re.compile(
    r'<[^>\s]*>|"""(?:[^"\\]|\\.|"(?!""))*"""|"(?:[^"\\\n]|\\.)*"|\'(?:[^\'\\\n]|\\.)*\''
)
#: a time value node: (lexical, is xsd:dateTime, precision, calendar IRI)
TimeInfo = tuple[str, bool, int | None, str | None]
#: how many time value nodes to remember across entities (Wikidata dumps emit each only once)
VALUE_CACHE_SIZE = 20_000
#: parses between two cyclic garbage collections
GC_EVERY = 50
#: text parsed by rdflib at once: whole entities, at least this many characters (one entity
#: larger than this is parsed alone, so memory is bounded by max(chunk, largest entity))
CHUNK_CHARS = 64 * 1024


@dataclass(frozen=True)
class Namespaces:
    """Where a Wikibase puts entities, properties and statements.

    Wikidata by default; ``Namespaces.for_base("http://acme.test/")`` for the Wikibase test
    namespace (entities ``base+Q1``, properties ``base+prop/…``, statements ``base+statement/…``).
    """

    entity: str = "http://www.wikidata.org/entity/"
    prop: str = "http://www.wikidata.org/prop/"
    statement: str = "http://www.wikidata.org/entity/statement/"

    @classmethod
    def for_base(cls, base: str) -> Namespaces:
        return cls(entity=base, prop=base + "prop/", statement=base + "statement/")

    def entity_id(self, iri: str) -> str | None:
        if iri.startswith(self.entity):
            local = iri[len(self.entity) :]
            if _ENTITY_LOCAL.fullmatch(local):
                return local
        return None

    def owner(self, iri: str) -> str | None:
        """The entity a subject belongs to, where its IRI says so (entity or statement node)."""
        eid = self.entity_id(iri)
        if eid is not None:
            return eid
        if iri.startswith(self.statement):
            m = _STATEMENT_OWNER.match(iri[len(self.statement) :])
            if m:
                return m.group(1).upper()
        return None

    def prop_kind(self, iri: str) -> tuple[str, str] | None:
        """``(kind, pid)`` for a property-derived predicate: kind ∈ p, direct, statement, …"""
        if not iri.startswith(self.prop):
            return None
        rest = iri[len(self.prop) :]
        kind, _, pid = rest.rpartition("/")
        if not _PID.fullmatch(pid):
            return None
        return (kind or "p"), pid


@contextlib.contextmanager
def _lexical_literals() -> Iterator[None]:
    """Keep literals' lexical forms (``+19.76…``, ``-0199-…``) and silence rdflib's cast warnings.

    rdflib normalizes literals at parse time and logs a traceback for every year it cannot hold
    in a ``datetime``; Wikidata has many such years and the lexical form is the truth.
    """
    old = rdflib.NORMALIZE_LITERALS
    log = logging.getLogger("rdflib.term")
    old_level = log.level
    rdflib.NORMALIZE_LITERALS = False
    log.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        rdflib.NORMALIZE_LITERALS = old
        log.setLevel(old_level)


#: the RDF parsers: pyoxigraph by default, rdflib as before (kept for comparison)
PARSERS = ("oxigraph", "rdflib")
_XSD_STRING = str(XSD.string)
_OX_FORMATS = {"nt": ox.RdfFormat.N_TRIPLES, "turtle": ox.RdfFormat.TURTLE}


class _Triples:
    """The few ``rdflib.Graph`` look-ups the reader uses, over plain dicts.

    pyoxigraph parses into a stream of triples; indexing them by subject here is far cheaper
    than adding them to an rdflib Graph (whose store keeps three indexes). A set of triples:
    a repeated triple is kept once, as in a Graph.
    """

    __slots__ = ("_spo",)

    def __init__(self) -> None:
        self._spo: dict[object, dict[object, dict[object, None]]] = {}

    def add(self, s: object, p: object, o: object) -> None:
        po = self._spo.get(s)
        if po is None:
            po = self._spo[s] = {}
        objs = po.get(p)
        if objs is None:
            objs = po[p] = {}
        objs[o] = None

    def __iadd__(self, other: _Triples) -> _Triples:
        for s, po in other._spo.items():
            for p, objs in po.items():
                for o in objs:
                    self.add(s, p, o)
        return self

    def __len__(self) -> int:
        return sum(len(objs) for po in self._spo.values() for objs in po.values())

    def subjects(self) -> Iterator[object]:
        return iter(list(self._spo))

    def objects(self, s: object, p: object) -> Iterator[object]:
        return iter(list(self._spo.get(s, {}).get(p, ())))

    def value(self, s: object, p: object) -> object | None:
        for o in self._spo.get(s, {}).get(p, ()):
            return o
        return None

    def predicate_objects(self, s: object) -> Iterator[tuple[object, object]]:
        for p, objs in list(self._spo.get(s, {}).items()):
            for o in objs:
                yield p, o

    def subject_objects(self, p: object) -> Iterator[tuple[object, object]]:
        for s, po in list(self._spo.items()):
            for o in po.get(p, ()):
                yield s, o


def _ox_parse(data: str, fmt: str, iris: dict[str, URIRef]) -> _Triples:
    """Parse with pyoxigraph into rdflib terms (IRIs interned in ``iris``: they repeat a lot).

    Literals keep their lexical form (rdflib's ``Literal`` is built inside
    :func:`_lexical_literals`); a simple literal gets no datatype, as rdflib's parser gives it.
    """
    out = _Triples()
    add = out.add

    def term(node: object) -> object:
        if isinstance(node, ox.NamedNode):
            v = node.value
            t = iris.get(v)
            if t is None:
                t = iris[v] = URIRef(v)
            return t
        if isinstance(node, ox.Literal):
            lang = node.language
            if lang:
                return Literal(node.value, lang=lang)
            dt = node.datatype.value
            if dt == _XSD_STRING:
                return Literal(node.value)
            dtype = iris.get(dt)
            if dtype is None:
                dtype = iris[dt] = URIRef(dt)
            return Literal(node.value, datatype=dtype)
        if isinstance(node, ox.BlankNode):
            return BNode(node.value)
        raise ValueError(f"unsupported RDF term: {node!r}")  # RDF-star quoted triples

    for t in ox.parse(data.encode("utf-8"), _OX_FORMATS[fmt]):
        add(term(t.subject), term(t.predicate), term(t.object))
    return out


@dataclass
class _Block:
    text: str
    line: int


@dataclass
class _Group:
    owner: str | None
    blocks: list[_Block] = field(default_factory=list)


# --------------------------------------------------------------------------- text → groups


def _nt_subject(line: str) -> str | None:
    if line.startswith("<"):
        end = line.find(">")
        return line[1:end] if end > 0 else None
    return None


def _nt_blocks(fh: Iterator[str]) -> Iterator[_Block]:
    """One block per non-empty, non-comment N-Triples line."""
    for lineno, line in enumerate(fh, start=1):
        s = line.strip()
        if s and not s.startswith("#"):
            yield _Block(s, lineno)


def _group_by_entity(
    blocks: Iterator[_Block], ns: Namespaces, subject_of: Callable[[str], str | None]
) -> Iterator[_Group]:
    """Consecutive blocks about one entity (itself and its statement nodes) as one group."""
    group = _Group(owner=None)
    for block in blocks:
        subj = subject_of(block.text)
        owner = ns.owner(subj) if subj else None
        if owner is not None and owner != group.owner:
            if group.owner is None:
                # what came before the first entity (headers, or statement nodes written
                # ahead of their entity) belongs with it
                group.owner = owner
            else:
                yield group
                group = _Group(owner=owner)
        group.blocks.append(block)
    if group.blocks:
        yield group


def _turtle_statement_end(clean: str) -> bool:
    # strings, IRIs and comments are already stripped; a local name cannot end with "."
    return clean.rstrip().endswith(".")


def _turtle_blocks(
    fh: Iterator[str], prefixes: dict[str, str], header: list[str]
) -> Iterator[_Block]:
    """Top-level Turtle statements with their first line; prefix lines go to ``header``."""
    buf: list[str] = []
    start = 0
    depth = 0
    in_long = False
    for lineno, line in enumerate(fh, start=1):
        if not buf and not in_long:
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            if _PREFIX_LINE.match(line):
                header.append(line.rstrip("\n") + ("\n" if line.endswith("\n") else "\n"))
                m = _PREFIX_DECL.match(line)
                if m:
                    prefixes[m.group(1) or ""] = m.group(2)
                continue
            start = lineno
        buf.append(line)
        if line.count('"""') % 2 == 1:
            in_long = not in_long
        if in_long:
            continue
        clean = _STRIP_TOKENS.sub('""', line)
        hash_at = clean.find("#")
        if hash_at >= 0:
            clean = clean[:hash_at]
        depth += clean.count("[") + clean.count("(") - clean.count("]") - clean.count(")")
        if depth <= 0 and _turtle_statement_end(clean):
            yield _Block("".join(buf), start)
            buf = []
            depth = 0
    if buf and "".join(buf).strip():
        yield _Block("".join(buf), start)


def _turtle_subject(text: str, prefixes: dict[str, str]) -> str | None:
    s = text.lstrip()
    if s.startswith("<"):
        end = s.find(">")
        return s[1:end] if end > 0 else None
    m = re.match(r"([A-Za-z][\w.-]*)?:([^\s;,]*)", s)
    if m and (m.group(1) or "") in prefixes:
        return prefixes[m.group(1) or ""] + m.group(2)
    return None


def _turtle_groups(
    fh: Iterator[str], ns: Namespaces, prefixes: dict[str, str], header: list[str]
) -> Iterator[_Group]:
    blocks = _turtle_blocks(fh, prefixes, header)
    return _group_by_entity(blocks, ns, lambda text: _turtle_subject(text, prefixes))


def _short_error(exc: BaseException) -> str:
    msg = " ".join(str(exc).split())
    return msg[:300] or exc.__class__.__name__


def term_value(obj: object, ns: Namespaces, info: TimeInfo | None = None) -> Value:
    """Classify an RDF term the way the JSON loader classifies a snak (same kinds, same text).

    ``info`` is the (lexical, is_xsd, precision, calendar) of the time value node, when known.
    """
    if isinstance(obj, BNode) or (isinstance(obj, URIRef) and "/.well-known/genid/" in str(obj)):
        return Value(kind="somevalue")
    if isinstance(obj, URIRef):
        iri = str(obj)
        eid = ns.entity_id(iri)
        if eid is not None:
            if eid.startswith("Q"):
                return Value(kind="item", text=eid)
            kind = {"P": "property", "L": "lexeme", "M": "mediainfo"}[eid[0]]
            if "-F" in eid:
                kind = "form"
            elif "-S" in eid:
                kind = "sense"
            return Value(kind=kind, text=eid)
        if iri.startswith(COMMONS_FILE):
            return Value(kind="string", text=unquote(iri[len(COMMONS_FILE) :]).replace("_", " "))
        if iri.startswith(COMMONS_DATA):
            return Value(kind="string", text=unquote(iri[len(COMMONS_DATA) :]))
        return Value(kind="string", text=iri)
    if isinstance(obj, Literal):
        lex = str(obj)
        if obj.datatype == XSD.dateTime or info is not None:
            prec = info[2] if info else None
            cal = info[3] if info else None
            try:
                tv = time_from_rdf(
                    lex, is_xsd_datetime=obj.datatype == XSD.dateTime, precision=prec, calendar=cal
                )
            except ValueError:
                return Value(kind="time", text=lex)
            return Value(kind="time", text=tv.time, time=tv)
        if obj.language:
            return Value(kind="monolingualtext", text=lex)
        if obj.datatype is not None and str(obj.datatype) in _NUMERIC:
            return Value(kind="quantity", text=lex)
        if obj.datatype is not None and str(obj.datatype) == GEO_WKT:
            return Value(kind="globecoordinate", text=lex)
        return Value(kind="string", text=lex)
    return Value(kind="string", text=str(obj))


class _RdfReader:
    def __init__(
        self, path: Path, fmt: str, filters: Filters, ns: Namespaces, source: str, parser: str = "oxigraph"
    ):
        if parser not in PARSERS:
            raise InputError(f"unknown RDF parser {parser!r}; one of {', '.join(PARSERS)}")
        self.parser = parser
        self.iris: dict[str, URIRef] = {}
        self.path = path
        self.fmt = fmt
        self.filters = filters
        self.ns = ns
        self.source = source
        self.values: OrderedDict[str, TimeInfo] = OrderedDict()
        self.groups = 0
        self.locations: dict[str, str] = {}
        self.items = 0

    # -- parsing ---------------------------------------------------------------------------

    def _parse(self, text: str, header: str) -> Any:
        """An rdflib ``Graph`` or a :class:`_Triples` (the same look-ups)."""
        if self.parser == "oxigraph":
            if len(self.iris) > VALUE_CACHE_SIZE * 5:
                self.iris.clear()  # bounded: entity IRIs do not repeat across a whole dump
            with _lexical_literals():
                return _ox_parse(header + text, self.fmt, self.iris)
        g = Graph()
        with _lexical_literals():
            g.parse(data=header + text, format="nt" if self.fmt == "nt" else "turtle")
        return g

    def parse_group(self, group: _Group, header: str) -> tuple[Any, list[ErrorRecord]]:
        text = (
            "\n".join(b.text for b in group.blocks)
            if self.fmt == "nt"
            else "".join(b.text for b in group.blocks)
        )
        # an rdflib Graph is a reference cycle (graph <-> namespace manager) that only the cyclic
        # GC frees; collecting every few hundred entities keeps the peak flat whatever the size
        self.groups += 1
        if self.groups % GC_EVERY == 0:
            gc.collect()
        try:
            return self._parse(text, header), []
        except Exception:  # noqa: BLE001 - parsers raise many types; find the bad block below
            pass
        g: Any = _Triples() if self.parser == "oxigraph" else Graph()
        errors: list[ErrorRecord] = []
        for b in group.blocks:
            try:
                g += self._parse(b.text + ("\n" if self.fmt == "nt" else ""), header)
            except Exception as exc:  # noqa: BLE001
                errors.append(
                    ErrorRecord(location=f"{self.path}:{b.line}", message=_short_error(exc))
                )
        return g, errors

    # -- values ----------------------------------------------------------------------------

    def remember_values(self, g: Graph) -> None:
        tv = URIRef(WIKIBASE + "timeValue")
        for node, lit in g.subject_objects(tv):
            if not isinstance(lit, Literal):
                continue
            prec = g.value(node, URIRef(WIKIBASE + "timePrecision"))
            cal = g.value(node, URIRef(WIKIBASE + "timeCalendarModel"))
            self.values[str(node)] = (
                str(lit),
                lit.datatype == XSD.dateTime,
                int(str(prec)) if prec is not None else None,
                str(cal) if cal is not None else None,
            )
            self.values.move_to_end(str(node))
        while len(self.values) > VALUE_CACHE_SIZE:
            self.values.popitem(last=False)

    def value_of(self, g: Graph, obj: object, value_node: object | None = None) -> Value:
        info = self.values.get(str(value_node)) if value_node is not None else None
        return term_value(obj, self.ns, info)

    def _value_with_node(
        self, g: Graph, subj: URIRef, pid: str, obj: object, value_kind: str
    ) -> Value:
        """Resolve a ps:/pq: literal with its psv:/pqv: value node (for time precision)."""
        node = None
        if isinstance(obj, Literal):
            lex = str(obj)
            for vn in g.objects(subj, URIRef(f"{self.ns.prop}{value_kind}/value/{pid}")):
                info = self.values.get(str(vn))
                if info is not None and info[0] == lex:
                    node = vn
                    break
        return self.value_of(g, obj, node)

    # -- entities --------------------------------------------------------------------------

    def _term(self, g: Graph, subj: URIRef, preds: list[URIRef]) -> str | None:
        lang = self.filters.language
        for pred in preds:
            vals = sorted(
                str(o)
                for o in g.objects(subj, pred)
                if isinstance(o, Literal) and (o.language or "").lower() == lang
            )
            if vals:
                return vals[0]
        return None

    def entity(self, g: Graph, subj: URIRef, eid: str) -> EntityData:
        ns = self.ns
        lang = self.filters.language
        kind = {"Q": "item", "P": "property", "L": "lexeme", "M": "mediainfo"}[eid[0]]
        ent = EntityData(
            id=eid,
            kind=kind,
            label=self._term(g, subj, [RDFS.label, SKOS.prefLabel, URIRef(SCHEMA + "name")]),
            description=self._term(g, subj, [URIRef(SCHEMA + "description")]),
            aliases=sorted(
                str(o)
                for o in g.objects(subj, SKOS.altLabel)
                if isinstance(o, Literal) and (o.language or "").lower() == lang
            ),
        )
        for pred, obj in g.predicate_objects(subj):
            if pred == RDF.type and isinstance(obj, URIRef):
                pk = ns.prop_kind(str(obj))
                if pk and pk[0] == "novalue":
                    ent.truthy.append((pk[1], Value(kind="novalue")))
                continue
            pk = ns.prop_kind(str(pred))
            if pk is None:
                continue
            pkind, pid = pk
            if pkind == "direct":
                ent.truthy.append((pid, self.value_of(g, obj)))
            elif pkind == "p" and isinstance(obj, URIRef | BNode):
                ent.statements.append(self.statement(g, obj, pid))
        ent.statements.sort(key=lambda st: (st.pid, st.statement_id or ""))
        return ent

    def statement(self, g: Graph, node: URIRef | BNode, pid: str) -> Statement:
        ns = self.ns
        rank_iri = g.value(node, URIRef(WIKIBASE + "rank"))
        rank = RANK_IRIS.get(str(rank_iri), "normal") if rank_iri is not None else "normal"
        main = g.value(node, URIRef(f"{ns.prop}statement/{pid}"))
        value = (
            Value(kind="novalue")
            if main is None
            else self._value_with_node(g, node, pid, main, "statement")  # type: ignore[arg-type]
        )
        qualifiers: list[tuple[str, Value]] = []
        for pred, obj in g.predicate_objects(node):
            if pred == RDF.type and isinstance(obj, URIRef):
                pk = ns.prop_kind(str(obj))
                if pk and pk[0] == "novalue" and pk[1] != pid:
                    qualifiers.append((pk[1], Value(kind="novalue")))
                continue
            pk = ns.prop_kind(str(pred))
            if pk and pk[0] == "qualifier":
                qualifiers.append((pk[1], self._value_with_node(g, node, pk[1], obj, "qualifier")))  # type: ignore[arg-type]
        iri = str(node)
        sid = iri[len(ns.statement) :] if iri.startswith(ns.statement) else iri.rsplit("/", 1)[-1]
        qualifiers.sort(key=lambda q: (q[0], q[1].kind, q[1].text))
        return Statement(pid=pid, value=value, rank=rank, statement_id=sid, qualifiers=qualifiers)

    def entities(self, chunk: list[_Group], header: str) -> Iterator[EntityData | Record]:
        """Parse a chunk of whole entity groups; yield errors, redirects, skips, EntityData.

        Entities come out in file order; any entity subject no group announced (a file not
        laid out entity by entity) follows, in IRI order.
        """
        merged = _Group(owner=None, blocks=[b for grp in chunk for b in grp.blocks])
        g, errors = self.parse_group(merged, header)
        yield from errors
        self.remember_values(g)
        first = f"{self.path}:{chunk[0].blocks[0].line}"
        where = {
            grp.owner: f"{self.path}:{grp.blocks[0].line}" for grp in reversed(chunk) if grp.owner
        }
        announced = [
            URIRef(self.ns.entity + o) for o in where if self.ns.entity_id(self.ns.entity + o)
        ]
        order = list(dict.fromkeys(reversed(announced)))
        present = {s for s in g.subjects() if isinstance(s, URIRef)}
        rest = sorted(
            (s for s in present if s not in set(order) and self.ns.entity_id(str(s))), key=str
        )
        for subj in [s for s in order if s in present] + rest:
            eid = self.ns.entity_id(str(subj))
            if eid is None:
                continue
            location = where.get(eid, first)
            targets = sorted(
                t for o in g.objects(subj, OWL.sameAs) if (t := self.ns.entity_id(str(o)))
            )
            if targets:
                yield RedirectRecord(source=eid, target=targets[0], location=location)
                continue
            ent = self.entity(g, subj, eid)
            if ent.kind not in ("item", "property"):
                yield SkipRecord(reason=f"entity:{ent.kind}", location=location)
                continue
            self.locations[eid] = location
            yield ent

    def records(self, chunk: list[_Group], header: str) -> Iterator[Record]:
        for item in self.entities(chunk, header):
            if not isinstance(item, EntityData):
                yield item
                continue
            if item.kind == "item":
                if self.filters.limit is not None and self.items >= self.filters.limit:
                    return
                self.items += 1
            location = self.locations.pop(item.id, str(self.path))
            yield from entity_records(item, self.filters, location, self.source)


def _chunked(groups: Iterator[_Group], max_chars: int) -> Iterator[list[_Group]]:
    """Whole entity groups, several to a parse: rdflib's per-parse cost dominates otherwise."""
    chunk: list[_Group] = []
    size = 0
    for grp in groups:
        chunk.append(grp)
        size += sum(len(b.text) for b in grp.blocks)
        if size >= max_chars:
            yield chunk
            chunk, size = [], 0
    if chunk:
        yield chunk


def _reader_chunks(
    path: str | Path, fmt: str | None, filters: Filters, ns: Namespaces, source: str, parser: str
) -> Iterator[tuple[_RdfReader, list[_Group], str]]:
    p = Path(path)
    kind = fmt or suffix_table(plugins=False).get(base_suffix(p))  # the registry's suffixes
    if kind not in ("nt", "turtle"):
        raise InputError(f"{p}: not an RDF file this loader reads (use .nt or .ttl)")
    reader = _RdfReader(p, kind, filters, ns, source, parser)
    with open_text(p) as fh:
        try:
            if kind == "nt":
                for chunk in _chunked(_group_by_entity(_nt_blocks(fh), ns, _nt_subject), CHUNK_CHARS):
                    yield reader, chunk, ""
            else:
                prefixes: dict[str, str] = {}
                header: list[str] = []
                for chunk in _chunked(_turtle_groups(fh, ns, prefixes, header), CHUNK_CHARS):
                    yield reader, chunk, "".join(header)
        except UnicodeDecodeError as exc:
            raise InputError(f"{p}: not UTF-8 text ({exc.reason})") from exc


def load_rdf(
    path: str | Path,
    filters: Filters | None = None,
    *,
    fmt: str | None = None,
    namespaces: Namespaces | None = None,
    source: str = SOURCE,
    parser: str = "oxigraph",
) -> Iterator[Record]:
    """Stream records from Wikidata N-Triples or Turtle (plain, .gz or .bz2).

    ``fmt`` is ``"nt"`` or ``"turtle"``; by default taken from the extension. ``parser`` is
    ``"oxigraph"`` (default) or ``"rdflib"`` (the former parser, slower; same records).
    """
    f = filters or Filters()
    if parser not in PARSERS:
        raise InputError(f"unknown RDF parser {parser!r}; one of {', '.join(PARSERS)}")
    records = _load_rdf(path, f, fmt, namespaces or Namespaces(), source, parser)
    return validated(guarded(Path(path), records))


def _load_rdf(
    path: str | Path, f: Filters, fmt: str | None, ns: Namespaces, source: str, parser: str
) -> Iterator[Record]:
    for reader, chunk, header in _reader_chunks(path, fmt, f, ns, source, parser):
        yield from reader.records(chunk, header)
        if f.limit is not None and reader.items >= f.limit:
            return


def rdf_entities(
    path: str | Path,
    *,
    fmt: str | None = None,
    namespaces: Namespaces | None = None,
    language: str = "en",
    parser: str = "oxigraph",
) -> Iterator[EntityData | Record]:
    """Unfiltered :class:`EntityData` (all statements, any value type) — for comparisons."""
    f = Filters(language=language)
    ns = namespaces or Namespaces()
    for reader, chunk, header in _reader_chunks(path, fmt, f, ns, SOURCE, parser):
        yield from reader.entities(chunk, header)


__all__ = ["PARSERS", "Namespaces", "SOURCE", "TimeInfo", "load_rdf", "rdf_entities", "term_value"]
