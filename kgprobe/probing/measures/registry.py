"""The measure plug-in contract (docs/design.md §8): one protocol, one registry.

A probe run is a loop over facts; a measure is a value object the loop does not need to know.
Every measure declares

- its ``name``, the paper ``section`` it implements and its :class:`Param` list — every
  parameter that changes a score is part of its property key (when it differs from its
  default) and always part of the run's configuration hash;
- ``needs``: what the loop must fetch from the graph for each fact (:data:`NEEDS`), which may
  depend on the measure's parameters (set per instance); the loop fetches the union of the
  run's measures once per fact and nothing else;
- ``requests(facts, ctx)``: the scoring requests it emits for a batch, and
  ``values(facts, ctx, results)``: per-fact values (``"score"`` first; extra values become
  ``score__<model>__<key>_<name>`` properties);
- ``aggregate(rows, seed)``: its per-relation summary for the report.

Most measures are written as one ``score(runner, facts, ctx)`` method over a runner; the base
class turns that into the two phases the loop needs: ``requests`` runs ``score`` against a
recorder that captures the first engine round, the loop runs every measure's requests in ONE
engine call, and ``values`` runs ``score`` again against a replay of those results (a measure
that needs a second round, e.g. a beam before an embedding, sends only that round to the
engine). Adding a measure is one class with ``@register``: docs/measures.md has a worked
example.
"""

from __future__ import annotations

import contextlib
import math
import numbers
import statistics
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, TypeVar

from kgprobe.errors import ConfigError, KgprobeError, PluginError
from kgprobe.plugins import MEASURES, Registry
from kgprobe.probing.measures.common import EndMarker, Entity, LabelRule, Runner
from kgprobe.probing.requests import Request, Result
from kgprobe.probing.verbalize import CAREFUL_RULES_VERSION
from kgprobe.types import MeasureKeyParts, MeasureName

#: What a measure can ask the loop to fetch for each fact.
NEEDS: dict[str, str] = {
    "templates": "the relation's object-last and question templates (always fetched)",
    "distractors": "the ranked distractors of the run's strategy (Δ_n)",
    "past": "past objects of (s, r) at the reference date (staleness)",
    "other_objects": "every other correct object of (s, r) (BELIEF's C_t)",
    "other_subjects": "other subjects of the relation (KaRR's subject replacement)",
    "object_relations": "templates of other relations the object is an object of (KaRR)",
    "demonstrations": "other probed facts of the batch as in-context demonstrations",
}


@dataclass(frozen=True)
class Param:
    """One parameter of a measure. ``code`` is its short name in a property key (used only
    when the value differs from ``default``, so default configurations keep short keys)."""

    name: str
    default: Any
    help: str
    code: str
    choices: tuple[Any, ...] | None = None
    kind: type = int
    #: False for report-only parameters (they change no stored value, so not the key)
    stored: bool = True

    def parse(self, value: Any) -> Any:
        try:
            v = self.kind(value) if not isinstance(value, self.kind) else value
        except (TypeError, ValueError):
            raise ConfigError(f"parameter {self.name}: {value!r} is not a {self.kind.__name__}") from None
        if self.choices is not None and v not in self.choices:
            raise ConfigError(f"parameter {self.name}: {v!r}; choose from {', '.join(map(str, self.choices))}")
        if isinstance(v, int) and not isinstance(v, bool) and v < 0:
            raise ConfigError(f"parameter {self.name} must not be negative")
        return v


@dataclass(frozen=True)
class FactInput:
    """What the loop gathered for one fact, once, for every measure of the run."""

    key: str
    pid: str
    subject: Entity
    object: Entity
    templates: tuple[str, ...]
    distractors: tuple[Entity, ...] = ()
    past: tuple[Entity, ...] = ()
    other_objects: tuple[Entity, ...] = ()
    other_subjects: tuple[Entity, ...] = ()
    object_relation_templates: tuple[tuple[str, ...], ...] = ()
    demonstrations: tuple[FactInput, ...] = ()
    distractor_reason: str | None = None


@dataclass(frozen=True)
class RunContext:
    """Run-wide settings every measure sees (shared parameters, see :data:`SHARED`)."""

    end: EndMarker = field(default_factory=EndMarker)
    max_subject_labels: int = 1
    max_object_labels: int = 3
    label_rule: LabelRule = field(default_factory=LabelRule)
    #: how labels are written into templates: careful or raw (kgprobe.probing.verbalize)
    verbalizer: str = "careful"
    n: int = 5
    strategy: str = "temp+sem"
    seed: int = 0
    end_choice: str = "auto"  # as asked: auto (the model's documented marker), eos, tail, none


#: A measure's values for one fact as a plug-in may return them: a plain dict (``"score"``,
#: ``"known"``, ``"stale"``, the extras; ``"_reason"``/``"_details"`` as :class:`MeasureValue`'s
#: ``reason``/``details``). The loop turns it into a :class:`MeasureValue` (:func:`checked_values`).
Values = dict[str, Any]

#: A measure's summary of one relation's stored values (:meth:`Measure.aggregate`; the report's
#: ``measures``): free-form, since a measure names its own values and summary figures (per value
#: ``{n, mean, ci_low, ci_high}`` by default; BELIEF adds its scales' figures), and the catalog
#: adds ``measure``, ``measure_key``, ``pid`` and ``facts`` (``catalog.measure_aggregates``).
Aggregate = dict[str, Any]

#: the keys a plain dict of values used for :class:`MeasureValue`'s ``reason`` and ``details``
_REASON, _DETAILS = "_reason", "_details"


@dataclass(frozen=True, eq=False)
class MeasureValue(Mapping[str, Any]):
    """One measure's outcome on one fact: its ``score`` (None: not scored, ``reason`` says
    why), the ``stored`` values beside it (``known``, ``stale``, the measure's extras: FACT
    properties) and ``details``, a per-fact record for results files that is never stored.

    It reads as the plain dict a plug-in returns (``v["score"]``, ``v.get("known")``, with
    ``"_reason"``/``"_details"`` where set), so an ``on_fact`` callback written for dicts keeps
    working; kgprobe itself reads the fields."""

    score: float | None
    reason: str | None = None
    details: Mapping[str, Any] | None = None
    stored: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def unscored(cls, reason: str) -> MeasureValue:
        """A fact the measure cannot score, and why."""
        return cls(None, reason=reason)

    @classmethod
    def of(cls, values: Mapping[str, Any]) -> MeasureValue:
        """``values`` as a MeasureValue: itself, or a plain dict's ``score``, its
        ``"_reason"``/``"_details"`` keys and every other key as a stored value."""
        if isinstance(values, MeasureValue):
            return values
        reason = values.get(_REASON)
        return cls(values.get("score"), reason=str(reason) if reason else None,
                   details=values.get(_DETAILS) or None,
                   stored={k: v for k, v in values.items() if k not in ("score", _REASON, _DETAILS)})

    def _view(self) -> Values:
        out = {"score": self.score, **self.stored}
        if self.reason is not None:
            out[_REASON] = self.reason
        if self.details is not None:
            out[_DETAILS] = self.details
        return out

    def __getitem__(self, key: str) -> Any:
        return self._view()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._view())

    def __len__(self) -> int:
        return len(self._view())


#: What a probe calls with each fact it scored (its plan) and the fact's values per measure name
#: (``probe(on_fact=...)``; kgprobe.reports.results.FactDetails is one).
OnFact = Callable[[Any, dict[MeasureName, MeasureValue]], None]


class Measure:
    """Base class of every registered measure (see the module doc for the contract)."""

    name: ClassVar[str]
    section: ClassVar[str]
    summary: ClassVar[str]
    params: ClassVar[tuple[Param, ...]] = ()
    #: what the loop fetches per fact (:data:`NEEDS`); a measure whose needs depend on its
    #: parameters sets ``self.needs`` in ``__init__`` (BELIEF-ICL needs no distractor)
    needs: frozenset[str] = frozenset({"templates"})
    #: names of the extra per-fact values besides ``score`` (property suffixes)
    extras: ClassVar[tuple[str, ...]] = ()
    #: depends on the distractor strategy and n (they go into the key)
    uses_distractors: ClassVar[bool] = False
    #: uses the shared label/end-marker settings (they go into the key when not default)
    uses_labels: ClassVar[bool] = True
    #: whether "known" (score >= threshold) means anything for this measure
    has_known: ClassVar[bool] = True
    #: whether ``score`` may call the runner more than once (a later round, as BELIEF's): on a
    #: GPU the loop then reads a batch's values before it launches the next, so that the
    #: engine and its cache see the runs of one batch after the other. Without one (False)
    #: the next batch is launched first and the device never waits for the values' Python.
    #: A measure that says False and asks again still gets every value right.
    later_rounds: ClassVar[bool] = True
    #: one clear line when the measure cannot run here (e.g. no judge endpoint)
    def available(self) -> str | None:
        return None

    def __init__(self, settings: Mapping[str, Any] | None = None) -> None:
        settings = dict(settings or {})
        unknown = sorted(set(settings) - {p.name for p in self.params})
        if unknown:
            own = [p.name for p in self.params]
            if self.uses_distractors:  # listed by `kgprobe measures`; set per run
                own = [*RUN_WIDE, *own]
            raise ConfigError(
                f"measure {self.name}: unknown parameter {', '.join(unknown)}; "
                f"parameters: {', '.join(own) or '(none)'}"
            )
        self.settings: dict[str, Any] = {p.name: p.parse(settings.get(p.name, p.default))
                                         for p in self.params}

    # --- identity ----------------------------------------------------------------------------

    def key(self, ctx: RunContext) -> str:
        """The measure part of property names: name, strategy and n for distractor measures,
        then ``<code><value>`` for every parameter (own and shared) that is not its default."""
        from kgprobe.graph.probe_runs import key_part

        rest = []
        for p in self.params:
            v = self.settings[p.name]
            if p.stored and v != p.default:
                rest.append(key_part(f"{p.code}{v}"))
        if self.uses_labels:
            for sname, v in shared_values(ctx).items():
                if v != SHARED[sname].default:
                    rest.append(key_part(f"{SHARED[sname].code}{v}"))
        if self.uses_distractors:
            return MeasureKeyParts(key_part(self.name), key_part(ctx.strategy), int(ctx.n),
                                   "_".join(rest)).compose()
        return MeasureKeyParts(key_part(self.name), rest="_".join(rest)).compose()

    def config(self, ctx: RunContext) -> dict[str, object]:
        """Everything that changes this measure's values (goes into the configuration hash and
        the run's record, as JSON: its keys are the measure's settings)."""
        out: dict[str, object] = {"measure": self.name, "version": self.version,
                               **{p.name: self.settings[p.name] for p in self.params if p.stored}}
        if self.uses_distractors:
            out.update(strategy=ctx.strategy, n=ctx.n, seed=ctx.seed)
        if self.uses_labels:
            out.update(shared_values(ctx), end_kind=ctx.end.kind, end_text=ctx.end.text,
                       **verbalizer_config(ctx))
        return out

    version: ClassVar[int] = 1

    @classmethod
    def chance(cls, n: int | None) -> tuple[float, str] | None:
        """The expected score of a model that knows nothing, and how it is derived; None where
        the measure defines no such level (most do not). ``n``: the key's distractor count."""
        return None

    # --- the two phases the loop calls ---------------------------------------------------------

    def score(self, runner: Runner, facts: Sequence[FactInput],
              ctx: RunContext) -> Sequence[MeasureValue | Mapping[str, Any]]:
        raise NotImplementedError

    def requests(self, facts: Sequence[FactInput], ctx: RunContext) -> list[Request]:
        rec = _Recorder()
        with contextlib.suppress(_Recorded):
            self.score(rec, facts, ctx)
        return rec.requests

    def values(self, facts: Sequence[FactInput], ctx: RunContext,
               results: Replay) -> Sequence[MeasureValue | Mapping[str, Any]]:
        return self.score(results, facts, ctx)

    # --- per relation --------------------------------------------------------------------------

    def aggregate(self, rows: Sequence[Mapping[str, Any]], seed: int = 0) -> Aggregate:
        """Per-relation summary of the stored per-fact values: n and mean of each value, with a
        bootstrap interval only where n allows (``MIN_N_CI``, as everywhere in the report)."""
        from kgprobe.stats import MIN_N_CI, bootstrap_ci

        out: Aggregate = {}
        for name in ("score", *self.extras):
            vals = [float(r[name]) for r in rows if _is_num(r.get(name))]
            if not vals and any(isinstance(r.get(name), list) for r in rows):
                continue  # per-prompt lists: read by the measure's own aggregate
            lo, hi = bootstrap_ci(vals, seed) if len(vals) >= MIN_N_CI else (None, None)
            out[name] = {"n": len(vals), "mean": statistics.fmean(vals) if vals else None,
                         "ci_low": lo, "ci_high": hi}
        return out


# --- what the loop takes from a measure ------------------------------------------------------------

_T = TypeVar("_T")


def guarded(m: Measure, facts: Sequence[FactInput], phase: Callable[[], _T]) -> _T:
    """``phase()``, one of ``m``'s two phases over ``facts``. An exception a plug-in measure
    raises (or its ``sys.exit``) is one :class:`PluginError` line naming the measure, the
    plug-in and the facts; kgprobe's own errors (a lost server, an engine's one-line error
    raised from ``runner.run``) pass as they are, and so does everything of a built-in."""
    where = plugin_of(type(m))
    if where is None:
        return phase()
    try:
        return phase()
    except KgprobeError:
        raise
    except (Exception, SystemExit) as exc:
        text = " ".join(str(exc).split())
        raise PluginError(f"measure {m.name} of {where} failed while scoring {_facts_text(facts)}: "
                          f"{type(exc).__name__}{': ' + text if text else ''}") from exc


def checked_values(m: Measure, facts: Sequence[FactInput], values: Any) -> list[MeasureValue]:
    """``values`` as the contract says a measure returns them (docs/measures.md, "The
    contract"), as :class:`MeasureValue` (the one place a plug-in's plain dicts become one): a
    list with one dict (or MeasureValue) per fact, in the facts' order; each ``score`` None
    (with a reason, ``_reason`` in a dict: not scored) or a finite real number; ``known`` None
    or a bool; every number among the values that are stored (``score`` and the ``extras``,
    inside lists too) finite.
    Anything else is one line naming the measure (and its plug-in) and the first fact at fault,
    raised before any value of the batch is stored: :class:`PluginError` for a plug-in,
    :class:`KgprobeError` (a bug) for a built-in. numpy numbers become Python floats."""
    def bad(what: str) -> KgprobeError:
        where = plugin_of(type(m))
        text = f"measure {m.name} of {where}" if where else f"built-in measure {m.name}"
        msg = f"{text} {what}; nothing of this batch was stored"
        return PluginError(msg) if where else KgprobeError(msg + " (a bug in kgprobe: please report it)")

    if not isinstance(values, list | tuple):
        raise bad(f"returned {_kind(values)} for {_facts_text(facts)}, not a list with one dict per fact")
    if len(values) != len(facts):
        raise bad(f"returned {len(values)} values for {len(facts)} facts ({_facts_text(facts)}); "
                  "one dict per fact, in order")
    out: list[MeasureValue] = []
    for f, given in zip(facts, values, strict=True):
        if not isinstance(given, Mapping):
            raise bad(f"returned {_kind(given)} for fact {f.key}, not a dict such as {{'score': 0.5}}")
        v = MeasureValue.of(given)
        score = v.score
        if score is not None:
            if not _is_real(score):
                raise bad(f"returned score {_kind(score)} for fact {f.key}, not a number "
                          "(None with a '_reason' marks a fact it cannot score)")
            if not math.isfinite(score):
                raise bad(f"returned score {float(score)!r} for fact {f.key}, not a finite number "
                          "(None with a '_reason' marks a fact it cannot score)")
            if not isinstance(score, int | float):
                v = replace(v, score=float(score))
        known = v.stored.get("known")
        if known is not None and not isinstance(known, bool):
            raise bad(f"returned known {_kind(known)} for fact {f.key}, not True, False or None")
        for name in m.extras:
            found = _non_finite(v.stored.get(name))
            if found is not None:
                raise bad(f"returned {name} {found!r} for fact {f.key}, not a finite number")
        out.append(v)
    return out


def _is_real(v: Any) -> bool:
    """A real number, numpy's too, but not a bool."""
    return isinstance(v, numbers.Real) and not isinstance(v, bool)


def _non_finite(v: Any) -> float | None:
    """The first NaN or infinity in a stored value (a number, or lists of numbers); None."""
    if _is_real(v):
        return None if math.isfinite(v) else float(v)
    if isinstance(v, list | tuple):
        for x in v:
            found = _non_finite(x)
            if found is not None:
                return found
    return None


def _kind(v: Any) -> str:
    """A value as an error line shows it: its type, and its text when short."""
    if v is None:
        return "None"
    text = " ".join(repr(v).split())
    return f"a {type(v).__name__}" + (f" {text}" if len(text) <= 40 else f" {text[:37]}...")


def _facts_text(facts: Sequence[FactInput]) -> str:
    keys = [str(f.key) for f in facts[:3]]
    more = f" and {len(facts) - 3} more" if len(facts) > 3 else ""
    return f"fact{'s' if len(facts) != 1 else ''} {', '.join(keys)}{more}"


def _is_num(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and not math.isnan(v)


class _Recorded(Exception):
    """Raised by the recorder to stop a measure once its first engine round is captured."""


class _Recorder:
    def __init__(self) -> None:
        self.requests: list[Request] = []

    def run(self, requests: Sequence[Request]) -> list[Result]:
        self.requests.extend(requests)
        raise _Recorded


class Replay:
    """Results of the batch's one engine run; a request not among them (a measure's later
    round) goes to the engine."""

    def __init__(self, engine: Runner, results: Mapping[Request, Result]) -> None:
        self.engine = engine
        self.results = dict(results)

    def run(self, requests: Sequence[Request]) -> list[Result]:
        try:  # the usual case, every request among the results: one lookup each
            return [self.results[r] for r in requests]
        except KeyError:
            pass
        missing = list(dict.fromkeys(r for r in requests if r not in self.results))
        self.results.update(zip(missing, self.engine.run(missing), strict=True))
        return [self.results[r] for r in requests]


#: Settings every label-using measure shares; in its key when not the default.
SHARED: dict[str, Param] = {
    "max_subject_labels": Param("max_subject_labels", 1, "subject labels per cloze set", "s"),
    "max_object_labels": Param("max_object_labels", 3, "labels per object/distractor", "o"),
    "end": Param("end", "auto", "Eq. 1 end marker: auto (per model), eos, tail, none", "e",
                 ("auto", "eos", "tail", "none"), str),
    "label_rule": Param("label_rule", "names", "which aliases are labels: names or all", "lr",
                        ("names", "all"), str),
    "verbalizer": Param("verbalizer", "careful",
                        "how labels are written: careful (articles, capitals, quoted titles) "
                        "or raw (the label as it is, as the DFA paper)", "v",
                        ("careful", "raw"), str),
}


def verbalizer_config(ctx: RunContext) -> dict[str, str | int]:
    """What of the verbalizer goes into a configuration hash beside the shared settings: the
    careful rules' version (a change of the rules makes stored careful scores stale); nothing
    for raw, so KaRR scores stored before the verbalizer existed stay valid under raw."""
    if ctx.verbalizer == "raw":
        return {}
    return {"verbalizer": ctx.verbalizer, "verbalizer_rules": CAREFUL_RULES_VERSION}


def shared_values(ctx: RunContext) -> dict[str, int | str]:
    """The shared settings' values in ``ctx``, by :data:`SHARED` name."""
    return {"max_subject_labels": ctx.max_subject_labels,
            "max_object_labels": ctx.max_object_labels,
            "end": ctx.end_choice, "label_rule": ctx.label_rule.name,
            "verbalizer": ctx.verbalizer}


# --- the registry -------------------------------------------------------------------------------


def _check_measure(cls: type[Measure]) -> None:
    """A measure asks only for inputs the loop knows how to give (``NEEDS``)."""
    bad = set(cls.needs) - set(NEEDS)
    if bad:
        raise TypeError(f"measure {cls.name}: unknown needs {sorted(bad)}")


#: every measure by name: the built-ins (:mod:`.builtin`), then the plug-ins of the
#: ``kgprobe.measures`` group (:func:`kgprobe.probing.measures.catalog.load_all`)
REGISTRY: Registry[type[Measure]] = Registry(
    "measure", MEASURES, Measure, requires=("name", "section", "summary"), check=_check_measure,
    describe=lambda cls: cls.summary)


def register(cls: type[Measure], origin: str | None = None) -> type[Measure]:
    """Class decorator: make a measure available to probe, report, the CLI and the docs.
    ``origin``: the plug-in it comes from (by default the one :mod:`kgprobe.plugins` is
    importing), named in the lines about its values (:func:`plugin_of`)."""
    return REGISTRY.add(None, cls, origin=origin)  # type: ignore[no-any-return]


def plugin_of(cls: type[Measure]) -> str | None:
    """``plug-in <module> (<where it was loaded from>)`` for a measure from outside kgprobe,
    None for a built-in: what an error line about the measure's values names."""
    if cls.__module__.startswith("kgprobe."):
        return None
    origin = REGISTRY.origin_of(cls)
    return f"plug-in {cls.__module__}" + (f" ({origin})" if origin else "")


def parse_measure(spec: str) -> tuple[str, dict[str, str]]:
    """``name`` or ``name:param=value,param=value`` (the CLI form of ``--measure``)."""
    name, _, rest = spec.strip().partition(":")
    params: dict[str, str] = {}
    for item in filter(None, (x.strip() for x in rest.split(","))):
        k, eq, v = item.partition("=")
        if not eq or not k.strip():
            raise ConfigError(f"--measure {spec!r}: parameters are name=value, comma-separated")
        params[k.strip().replace("-", "_")] = v.strip()
    return name.strip(), params


#: Parameters ``kgprobe measures`` lists for every distractor measure that belong to the whole
#: run (the distractors are found once per fact): ``kmin:n=3`` means ``-n 3``.
RUN_WIDE = ("strategy", "n")
