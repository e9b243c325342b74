"""The report's data: plain dataclasses that ``reports.build`` fills and every writer
(``text``, ``console``, ``html``, ``results``, ``write``) reads. They are at the bottom of the
package so that no writer imports the builder for its types."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import PurePath
from typing import Any, NotRequired, TypedDict

from kgprobe.reports.wording import WordingMove
from kgprobe.stats import MIN_N_CI
from kgprobe.types import PID, QID, FactKey, MeasureKey, Properties

POPULARITY_UNIT = (
    "Entity.popularity as ingested (the demo graph: DistFactAssessLM's WikidataPopularity, "
    "a log scale of Wikipedia page views; larger = more popular)"
)


class ReportFact(TypedDict):
    """One probed fact as the report reads it: the graph's row of ``FACT_ROWS``
    (kgprobe/graph/results.py) or the same row built from a probe set (``build.set_report``).
    ``others``: the fact's scores under the run's other measure keys; ``scale``: its rank scale
    (a BELIEF report only)."""

    key: FactKey
    pid: PID
    subject: QID
    object: QID
    subject_label: str | None
    object_label: str | None
    popularity: float | None
    object_popularity: float | None
    score: float
    stale: float | None
    run: str | None
    others: dict[MeasureKey, float | None]
    scale: NotRequired[str]


@dataclass
class Group:
    """Aggregates over a set of probed facts (a relation, a type, a popularity bucket)."""

    key: str
    label: str | None
    facts: int
    mean: float | None
    ci_low: float | None  # None when facts < MIN_N_CI
    ci_high: float | None
    known: int
    known_share: float | None
    history_facts: int = 0
    staleness: float | None = None
    stale_ci_low: float | None = None
    stale_ci_high: float | None = None
    by_popularity: dict[str, Group] = field(default_factory=dict)

    @property
    def pid(self) -> str:  # the key of a per-relation group
        return self.key

    @property
    def name(self) -> str:
        if self.key == "all":
            return "all facts"
        return f"{self.key} {self.label}" if self.label and self.label != self.key else self.key


#: Kept for callers of the per-relation API.
RelationStats = Group


@dataclass
class ModelReport:
    model: str
    model_key: str
    measure_key: str
    measure_label: str
    score_property: str
    threshold: float
    runs: list[str]
    relations: list[Group]  # sorted by mean score, best first
    overall: Group
    groups: list[Group]  # by ``Report.by`` (== relations for "relation")
    #: each run's ProbeRun properties as a report shows them (``build.run_fields``)
    run_info: list[Properties] = field(default_factory=list)
    facts: list[ReportFact] = field(default_factory=list)  # per-fact rows (not in to_dict)
    #: a measure ranking facts on different scales (BELIEF): the scale of every figure above
    #: (``facts`` holds only its facts) ...
    scale: str | None = None
    #: ... and the facts ranked on each other scale, apart (per relation, then ``all``): two
    #: scales are never pooled into one figure (docs/measures.md)
    apart: dict[str, list[Group]] = field(default_factory=dict)
    apart_facts: list[ReportFact] = field(default_factory=list)  # their rows (not in to_dict)

    @property
    def display(self) -> str:
        """The model's name for titles and legends: as it was probed (``smollm2-135m``, a hub
        id), a local file or directory by its own name; never the property key."""
        name = self.model.rstrip("/")
        if name.startswith(("/", "./", "../", "~")):
            return PurePath(name).name or self.model_key
        return name or self.model_key


@dataclass
class Report:
    primary: ModelReport
    other: ModelReport | None
    popularity_edges: list[float] | None  # tertile edges of the subjects' popularity
    comparison: dict[str, int] | None
    seed: int
    bootstrap: int
    #: per relation, every measure probed for the primary model
    #: (:func:`kgprobe.probing.measures.catalog.relation_aggregates`: that module's rows, read here)
    measures: Sequence[Mapping[str, Any]] = field(default_factory=list)
    by: str = "relation"
    type_of: str = "subject"
    min_n_ci: int = MIN_N_CI
    popularity_facts: int = 0  # probed facts (primary) whose subject has a popularity
    popularity_unit: str = POPULARITY_UNIT
    generated: str = ""
    code: dict[str, str | None] = field(default_factory=dict)
    calibration: list[tuple[float, bool]] | None = None  # BELIEF (confidence, correct) pairs
    #: with ``other``: per relation (sorted as the primary's relations) then ``all``
    paired: list[PairedGroup] = field(default_factory=list)
    chance: Chance | None = None
    #: which facts: "all" (every fact scored for the model) or "run" (the facts of one probe
    #: run: ``probe --output-path``)
    scope: str = "all"
    #: one model under two wordings (the demo's careful vs raw): the facts whose score moved,
    #: each with the sentences that changed (kgprobe.reports.wording.wording_moves)
    moves: list[WordingMove] = field(default_factory=list)

    @property
    def same_model(self) -> bool:
        """One model against itself under two measure keys (``report --vs-measure``)."""
        return self.other is not None and self.other.model_key == self.primary.model_key

    def names(self) -> tuple[str, str | None]:
        """Display names of the primary and the other model; their property keys where the two
        names are the same (one model at two dtypes). One model under two measure keys
        (``report --vs-measure``): "careful" and "raw" for a key and its ``_vraw`` twin (the
        verbalizer), else the two measure keys; titles then name the model once."""
        a, b = self.primary, self.other
        if b is None:
            return a.display, None
        if self.same_model:
            if b.measure_key == f"{a.measure_key}_vraw":
                return "careful", "raw"
            if a.measure_key == f"{b.measure_key}_vraw":
                return "raw", "careful"
            return a.measure_key, b.measure_key
        if a.display == b.display:
            return a.model_key, b.model_key
        return a.display, b.display

    def fact_overlap(self) -> dict[str, int] | None:
        """With a second model: how many scored facts both have (``shared``) and how many each
        has alone (``primary_only``, ``other_only``), from the facts' keys; None with one
        model. Each model's own rows and figures are over its own facts, so a reader needs
        these three counts to know whether they compare."""
        if self.other is None:
            return None
        a = {str(r["key"]) for r in self.primary.facts}
        b = {str(r["key"]) for r in self.other.facts}
        return {"shared": len(a & b), "primary_only": len(a - b), "other_only": len(b - a)}

    def to_dict(self) -> dict[str, object]:
        """The ``--json`` document: the dataclasses as dicts, without the per-fact rows."""
        d = asdict(self)
        for m in ("primary", "other"):
            if d.get(m):
                d[m].pop("facts", None)
                d[m].pop("apart_facts", None)
        d["fact_overlap"] = self.fact_overlap()
        return d


@dataclass
class PairedGroup:
    """Two models on the same facts (a relation, or ``all``): both means, the paired difference
    mean(B) − mean(A) with its paired-bootstrap interval (only where n >= MIN_N_CI) and McNemar's
    exact test on known/unknown (``b``: only A knows, ``c``: only B knows)."""

    key: str
    label: str | None
    facts: int
    mean_a: float | None  # None only when no fact was scored for both
    mean_b: float | None
    diff: float | None
    diff_ci_low: float | None
    diff_ci_high: float | None
    a_known: int
    b_known: int
    b: int
    c: int
    p: float

    @property
    def name(self) -> str:
        if self.key == "all":
            return "all facts"
        return f"{self.key} {self.label}" if self.label and self.label != self.key else self.key


@dataclass
class Chance:
    """The score a model with no knowledge gets in expectation, where the measure defines one."""

    level: float
    rule: str  # how it is derived, e.g. "1/(n+1) for n = 5 distractors"
