"""The catalogue of measures: the registry filled with the built-in measures (and the
plug-ins: :func:`load_all`), and what needs all of them: creating a measure by name, the
run-wide settings of ``--measure`` specs, ``kgprobe measures``' table and the per-relation aggregates of the report.

Kept apart from :mod:`.registry` so that the built-in measures import the registry's base
classes and this module imports them, with no import going back (docs/design.md §1).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, NotRequired, TypedDict

from kgprobe.errors import ConfigError
from kgprobe.graph import probe_runs as pr
from kgprobe.plugins import Registry
from kgprobe.probing.measures import builtin  # noqa: F401  (registers the built-in measures)
from kgprobe.probing.measures.registry import (
    REGISTRY,
    RUN_WIDE,
    SHARED,
    Aggregate,
    Measure,
    Param,
    parse_measure,
)
from kgprobe.provenance import read_run
from kgprobe.stats import group_seed
from kgprobe.types import PID, MeasureKey, MeasureKeyParts


def load_all() -> Registry[type[Measure]]:
    """The registry by name: the built-in measures (imported with this module), then the
    plug-ins (entry points of ``kgprobe.measures``, ``--plugin`` and ``KGPROBE_PLUGINS``
    modules; :mod:`kgprobe.plugins`). Built-ins come first, so a plug-in that takes a built-in's
    name is the one refused (one line, exit 2)."""
    return REGISTRY.load()


def create(name: str, settings: Mapping[str, Any] | None = None) -> Measure:
    reg = load_all()
    if name not in reg:
        raise ConfigError(f"unknown measure {name}; choose from: {', '.join(reg)} (a measure of another "
                          "package: install it, or kgprobe --plugin MODULE; docs/measures.md)")
    return reg[name](settings)


def run_wide_settings(
    specs: Sequence[str], n: int | None, strategy: str | None,
) -> tuple[tuple[str, ...], int | None, str | None]:
    """Move ``n`` and ``strategy`` out of the ``--measure`` specs of distractor measures into
    the run's settings (they are listed as those measures' parameters, but one run finds one
    set of distractors per fact). A value that contradicts ``-n``/``--strategy`` or another
    spec is refused; ``n``/``strategy`` on a measure without distractors stays an unknown
    parameter. Returns the specs without them, and the run's n and strategy (None = default)."""
    reg = load_all()
    given: dict[str, tuple[str, Any]] = {}
    if n is not None:
        given["n"] = ("-n", n)
    if strategy is not None:
        given["strategy"] = ("--strategy", strategy)
    out = []
    for spec in specs:
        name, params = parse_measure(spec)
        cls = reg.get(name)
        if cls is None or not cls.uses_distractors or not set(RUN_WIDE) & set(params):
            out.append(spec)
            continue
        for k in RUN_WIDE:
            if k not in params:
                continue
            raw = params.pop(k)
            value: Any = Param(k, 0, "", k).parse(raw) if k == "n" else raw
            if k in given and given[k][1] != value:
                raise ConfigError(f"--measure {spec!r}: {k}={raw} contradicts {given[k][0]} "
                                  f"{given[k][1]}; {k} is one per run (distractors are found once per fact)")
            given[k] = (f"--measure {spec!r}", value)
        out.append(name + (":" + ",".join(f"{k}={v}" for k, v in params.items()) if params else ""))
    return (tuple(out), given["n"][1] if "n" in given else None,
            given["strategy"][1] if "strategy" in given else None)


class ParamEntry(TypedDict):
    """One parameter of a measure as ``kgprobe measures`` lists it."""

    name: str
    default: object
    help: str
    key_code: str
    choices: NotRequired[list[object]]


class MeasureEntry(TypedDict):
    """One registered measure as ``kgprobe measures [--json]`` lists it (:func:`describe`)."""

    name: str
    section: str
    summary: str
    parameters: list[ParamEntry]
    shared_parameters: list[str]
    needs: list[str]
    values: list[str]
    property: str


def _param_entry(p: Param) -> ParamEntry:
    entry: ParamEntry = {"name": p.name, "default": p.default, "help": p.help, "key_code": p.code}
    if p.choices:
        entry["choices"] = list(p.choices)
    return entry


def describe() -> list[MeasureEntry]:
    """Every registered measure with its parameters (what ``kgprobe measures`` prints)."""
    out: list[MeasureEntry] = []
    for name, cls in load_all().items():
        params = [_param_entry(p) for p in cls.params]
        if cls.uses_distractors:
            params = [{"name": "strategy", "default": "temp+sem", "help": "distractor strategy (--strategy)",
                       "key_code": "(always)"},
                      {"name": "n", "default": 5, "help": "distractors per fact (-n)", "key_code": "n"},
                      *params]
        shared = [p.name for p in SHARED.values()] if cls.uses_labels else []
        out.append({
            "name": name, "section": cls.section, "summary": cls.summary, "parameters": params,
            "shared_parameters": shared, "needs": sorted(cls.needs),
            "values": ["score", *cls.extras],
            "property": f"score__<model>__{name}{'_<strategy>_n<n>' if cls.uses_distractors else ''}"
                        "[_<non-default parameters>]",
        })
    return out


# --- per-relation aggregates for the report -----------------------------------------------------


def relation_aggregates(
    graph: Any, model_key: str, *, seed: int = 0,
    read: Callable[..., object] | None = None,
    facts: Collection[str] | None = None,
) -> list[Aggregate]:
    """Per relation and per measure key probed for ``model_key``: each measure's
    :meth:`Measure.aggregate` over the values stored on the FACT edges (what
    ``kgprobe report --json`` shows under ``measures``); with ``facts``, over those fact keys
    only (one run's)."""
    seen, params = _probed_specs(graph, model_key)
    reg = load_all()
    out = []
    for mkey, (name, extras) in sorted(seen.items()):
        props = pr.ScoreProps(model_key, mkey)
        names = {"score": props.score, **{e: f"{props.score}_{e}" for e in extras}}
        if reg.get(name) is None:
            continue  # a measure this version no longer has
        rows = pr.measure_rows(graph, names)
        if facts is not None:  # one run's facts (``probe --output-path``)
            rows = [r for r in rows if r["key"] in facts]
        out.extend(measure_aggregates(name, mkey, params.get(mkey), rows, seed=seed))
    return out


def measure_aggregates(name: str, measure_key: str, params: Mapping[str, object] | None,
                       rows: Sequence[Mapping[str, Any]], *, seed: int = 0) -> list[Aggregate]:
    """Per relation, measure ``name``'s :meth:`Measure.aggregate` over ``rows`` ({key, pid,
    score, <extra>: value}), wherever they were read from (the graph, a scored probe set)."""
    cls = load_all().get(name)
    if cls is None:
        return []
    by_pid: dict[PID, list[Mapping[str, Any]]] = {}
    for row in rows:
        by_pid.setdefault(row["pid"], []).append(row)
    measure = cls(params)
    out: list[Aggregate] = []
    for pid in sorted(by_pid, key=lambda p: int(p[1:])):
        # the report's seed rule: the same values get the same interval as its table
        agg = measure.aggregate(by_pid[pid], group_seed(seed, pid))
        out.append({"measure": name, "measure_key": measure_key, "pid": pid,
                    "facts": len(by_pid[pid]), **agg})
    return out


def chance_level(graph: Any, model_key: str, measure_key: str) -> tuple[float, str] | None:
    """The chance level the measure of ``measure_key`` declares (:meth:`Measure.chance`), with
    n read from the key's ``_n<N>`` part; None for an unknown measure or one without a level."""
    seen, _ = _probed_specs(graph, model_key)
    return chance_of(seen[measure_key][0] if measure_key in seen
                     else MeasureKeyParts.parse(measure_key).name, measure_key)


def chance_of(name: str, measure_key: str) -> tuple[float, str] | None:
    """:func:`chance_level` of measure ``name`` under ``measure_key``, no graph needed."""
    cls = load_all().get(name)
    if cls is None:
        return None
    try:
        n = MeasureKeyParts.parse(measure_key, pr.key_part(name)).n
    except ConfigError:  # not a key of this measure: no count to read
        n = None
    return cls.chance(n)


def _probed_specs(
    graph: Any, model_key: str,
) -> tuple[dict[MeasureKey, tuple[str, list[str]]], dict[MeasureKey, Mapping[str, object]]]:
    """Every measure key the probe runs of ``model_key`` recorded: key -> (measure name,
    extra value names), and key -> parameters."""
    seen: dict[str, tuple[str, list[str]]] = {}
    params: dict[MeasureKey, Mapping[str, object]] = {}
    for r in map(read_run, pr.list_runs(graph)):
        if r.model_key != model_key or not isinstance(r.measure_specs, list):
            continue
        for spec in r.measure_specs:
            seen[spec["key"]] = (spec["name"], spec.get("extras") or [])
            params[spec["key"]] = spec.get("params") or {}
    return seen, params


def rank_scales(graph: Any, model_key: str, measure_key: str) -> tuple[str, dict[str, str]] | None:
    """For a measure whose facts are ranked on different scales (BELIEF: the vocabulary, the
    candidate set, generation), its primary scale and each scored fact's scale (``unseparated``
    for values stored before scales were recorded), so that a report never pools two scales;
    None for every other measure."""
    seen, params = _probed_specs(graph, model_key)
    name, extras = seen.get(measure_key, ("", []))
    cls = load_all().get(name)
    if cls is None or "scale" not in extras or not hasattr(cls, "primary_scale"):
        return None
    props = pr.ScoreProps(model_key, measure_key)
    rows = pr.measure_rows(graph, {"score": props.score, "scale": props.extra("scale")})
    return (str(cls(params.get(measure_key)).primary_scale()),  # type: ignore[attr-defined]
            {r["key"]: str(r.get("scale") or "unseparated") for r in rows})


def belief_calibration(graph: Any, model_key: str) -> list[tuple[float, bool]] | None:
    """BELIEF's (confidence, top-1 correct) pair of every prompt of every fact probed with the
    model's first BELIEF key (sorted), for the report's reliability diagram; None without one.
    A prompt is correct when the gold object is ranked first (rank 1)."""
    seen, params = _probed_specs(graph, model_key)
    keys = sorted(k for k, (name, extras) in seen.items()
                  if name == "belief" and {"ranks", "confidences"} <= set(extras))
    if not keys:
        return None
    props = pr.ScoreProps(model_key, keys[0])
    rows = pr.measure_rows(graph, {"score": props.score, "ranks": props.extra("ranks"),
                                   "confidences": props.extra("confidences"),
                                   "scale": props.extra("scale")})
    cls = load_all().get("belief")
    primary = cls(params.get(keys[0])).primary_scale() if cls is not None else "vocab"  # type: ignore[attr-defined]
    # one rank scale only (never the vocabulary's and the candidate set's pooled); rows stored
    # before scales were recorded have none and are taken as they are
    pairs = [(float(c), int(rank) == 1) for r in rows if r.get("ranks") and r.get("confidences")
             and r.get("scale") in (None, primary)
             for rank, c in zip(r["ranks"], r["confidences"], strict=False)]
    return pairs or None
