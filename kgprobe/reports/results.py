"""Results files a researcher keeps next to a paper: ``results.json``, ``harness.json`` and
per-fact records.

``results.json`` (schema ``kgprobe-results/2``) has kgprobe's own top-level keys — none named
like a key of lm-evaluation-harness's results file with another meaning — and records every
setting that can change a number (model arguments, dtype, device, batch sizes, threads, seeds,
Python, platform, accelerator, times); ``harness.json`` is the primary model's figures in the
harness's layout, each key meaning what it means there. ``samples.jsonl`` holds one record per
(model, fact) — subject, relation, object, labels, templates, every measure's value and, for
facts scored in the same process as the file was written (``kgprobe probe --output-path``,
``kgprobe demo``), the distractors and their log-plausibilities per cloze sentence.
``samples.parquet`` is written beside it when pyarrow is installed. The schema is
docs/results.md; :func:`load` reads a directory back into pandas.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NotRequired, TypeAlias, TypedDict

from kgprobe.errors import ConfigError, InputError
from kgprobe.probing.measures.registry import MeasureValue
from kgprobe.reports.sections import added_sections, chance_section
from kgprobe.types import PID, QID, FactKey, JSONObject, MeasureKey, ModelKey

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

    from kgprobe.outputs import Owner
    from kgprobe.reports.data import Group, ModelReport, Report

SCHEMA = "kgprobe-results/2"
RESULTS = "results.json"
HARNESS = "harness.json"
SAMPLES = "samples.jsonl"
SAMPLES_PARQUET = "samples.parquet"


#: what a probe saw of one fact: ``unscorable`` (why not, or None) and the measure's
#: ``MeasureValue.details`` (templates, clozes, distractors, ...): free-form, as their keys are
#: each measure's own (a plug-in's too), and they go to samples.jsonl as they are
FactDetail: TypeAlias = dict[str, Any]


class SampleRecord(TypedDict):
    """One record of ``samples.jsonl`` (docs/results.md): a (model, fact) of the report with
    its scores and, for the probe's own facts, what the probe saw (templates, clozes and the
    distractors' scores)."""

    model: ModelKey
    measure_key: MeasureKey
    key: FactKey
    relation: PID
    relation_label: str | None
    subject: QID
    subject_label: str | None
    object: QID
    object_label: str | None
    subject_popularity: float | None
    score: float
    known: bool
    stale: float | None
    run: str | None
    scale: str | None
    scores: dict[MeasureKey, float | None]
    template_ids: list[str] | None
    templates: Any
    clozes: Any
    distractors: Any


class BucketFigures(TypedDict):
    """A popularity bucket's figures in ``results.json``."""

    n: int
    mean: float | None
    ci_low: float | None
    ci_high: float | None
    known: int


class GroupFigures(TypedDict):
    """A group's figures in ``results.json`` (``results.<PID>``, ``overall``)."""

    label: str | None
    n: int
    mean: float | None
    ci_low: float | None
    ci_high: float | None
    known: int
    known_share: float | None
    history_n: int
    staleness: float | None
    staleness_ci_low: float | None
    staleness_ci_high: float | None
    by_popularity: dict[str, BucketFigures]


# --- per-fact details from a probe run ---------------------------------------------------------


class FactDetails:
    """Collects, per fact key, what the probe saw: the cloze sentences it scored and every
    distractor's (and past value's) log-plausibility on each. Pass it as ``on_fact`` to
    ``kgprobe.probing.run.probe``; ``.records`` then maps fact key -> detail dict."""

    def __init__(self) -> None:
        self.records: dict[FactKey, FactDetail] = {}

    def __call__(self, plan: Any, values: Mapping[str, Mapping[str, Any]]) -> None:
        key = str(plan.row["key"])
        outcomes = [MeasureValue.of(v) for v in values.values()]  # a caller's plain dicts too
        shown = next((v.details for v in outcomes if v.details), None)
        if shown is None:
            reason = plan.reason or next((v.reason for v in outcomes if v.reason), None)
            self.records[key] = {"unscorable": reason, "templates": None, "clozes": None,
                                 "distractors": None}
            return
        self.records[key] = {"unscorable": None, **shown}


# --- writing ----------------------------------------------------------------------------------------


def _group_dict(g: Group) -> GroupFigures:
    return {"label": g.label, "n": g.facts, "mean": g.mean, "ci_low": g.ci_low, "ci_high": g.ci_high,
            "known": g.known, "known_share": g.known_share, "history_n": g.history_facts,
            "staleness": g.staleness, "staleness_ci_low": g.stale_ci_low,
            "staleness_ci_high": g.stale_ci_high,
            "by_popularity": {b: {"n": bg.facts, "mean": bg.mean, "ci_low": bg.ci_low,
                                  "ci_high": bg.ci_high, "known": bg.known}
                              for b, bg in g.by_popularity.items()}}


def _wall_seconds(run: Mapping[str, Any]) -> float | None:
    """A run's wall time from its ProbeRun timestamps (creation to the last write)."""
    try:
        start = dt.datetime.fromisoformat(str(run["started"]))
        end = dt.datetime.fromisoformat(str(run["finished"]))
    except (KeyError, TypeError, ValueError):
        return None
    return round((end - start).total_seconds(), 3)


def _model_block(m: ModelReport, rep: Report) -> dict[str, object]:
    runs = [{**r, "wall_seconds": _wall_seconds(r)} for r in m.run_info]
    last = runs[-1] if runs else {}
    env: Mapping[str, Any] = last["environment"] if isinstance(last.get("environment"), dict) else {}
    return {
        "model_name": m.model,
        "model_key": m.model_key,
        "model_fingerprint": sorted({str(r["model_fingerprint"]) for r in runs if r.get("model_fingerprint")}),
        # the served model's server(s), as its runs recorded them (none for a local model)
        "model_base_url": sorted({str(r["model_base_url"]) for r in runs if r.get("model_base_url")}),
        "dtype": last.get("dtype"),
        "device": last.get("device"),
        "threads": env.get("torch_threads"),
        "batch_facts": last.get("batch_facts"),
        "batch_tokens": env.get("batch_tokens"),
        "model_args": env.get("model_args"),
        "environment": env or None,
        "library_versions": last.get("library_versions"),
        "measure_key": m.measure_key,
        "measure": m.measure_label,
        "score_property": m.score_property,
        "threshold": m.threshold,
        "seconds": round(sum(float(r.get("seconds") or 0.0) for r in runs), 3),
        "wall_seconds": (round(sum(r["wall_seconds"] for r in runs), 3)
                         if runs and all(r["wall_seconds"] is not None for r in runs) else None),
        "results": {g.key: _group_dict(g) for g in m.relations},
        "overall": _group_dict(m.overall),
        "groups": {g.key: _group_dict(g) for g in m.groups} if rep.by != "relation" else None,
        "runs": runs,
    }


class ResultsDocument(TypedDict):
    """``results.json`` as kgprobe writes it (schema ``kgprobe-results/2``: docs/results.md).
    The nested parts are documented there; ``sections`` only where a plug-in added one."""

    schema: str
    written: str
    kgprobe: dict[str, str | None]
    primary_model: str
    scope: dict[str, object]
    report_settings: dict[str, object]
    probe_settings: object
    timing: dict[str, float | None]
    popularity: dict[str, object]
    graph_snapshot: object
    comparison: dict[str, int] | None
    paired: list[dict[str, object]]
    chance: object
    models: list[dict[str, object]]
    sections: NotRequired[dict[str, object]]


def results_document(rep: Report, *, command_seconds: float | None = None) -> ResultsDocument:
    """The content of ``results.json`` (schema ``kgprobe-results/2``: docs/results.md). Its
    top-level keys are kgprobe's own: none is named like a key of lm-evaluation-harness's
    results file with another meaning (that file is :func:`harness_document`)."""
    a = rep.primary
    last = a.run_info[-1] if a.run_info else {}
    doc: ResultsDocument = {
        "schema": SCHEMA,
        "written": rep.generated,
        "kgprobe": {"version": rep.code.get("kgprobe"), "git": rep.code.get("git")},
        "primary_model": a.model,
        "scope": {"facts": rep.scope, "runs": sorted({r for m in (rep.primary, rep.other)
                                                      if m is not None for r in m.runs})},
        "report_settings": {
            "measure_key": a.measure_key, "measure": a.measure_label, "threshold": a.threshold,
            "by": rep.by, "type_of": rep.type_of, "bootstrap_resamples": rep.bootstrap,
            "bootstrap_seed": rep.seed, "confidence_level": 0.95, "min_n_for_interval": rep.min_n_ci,
        },
        "probe_settings": last.get("measure_params"),
        "timing": {"command_seconds": None if command_seconds is None else round(command_seconds, 3)},
        "popularity": {"edges": rep.popularity_edges, "n": rep.popularity_facts,
                       "unit": rep.popularity_unit},
        "graph_snapshot": last.get("graph_snapshot"),
        "comparison": rep.comparison,
        "paired": [asdict(pg) for pg in rep.paired],
        "chance": chance_section().data(rep),
        "models": [_model_block(m, rep) for m in (rep.primary, rep.other) if m is not None],
    }
    added = added_sections(rep)
    if added:  # the plug-ins' sections, by name (the key only when there is one)
        doc["sections"] = {s.name: s.data(rep) for s, _ in added}
    return doc


# --- lm-evaluation-harness's results file -------------------------------------------------------------


def _stderr(values: Sequence[float]) -> float | None:
    """The harness's ``mean_stderr``: sample standard deviation (n − 1) over sqrt(n)."""
    n = len(values)
    if n < 2:
        return None
    mean = sum(values) / n
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1) / n)


def harness_task(m: ModelReport, key: str) -> str:
    """The task name a (model's measure, relation) gets in the harness export."""
    return f"kgprobe_{m.measure_key}_{key}"


def harness_document(rep: Report, *, command_seconds: float | None = None) -> dict[str, object]:
    """The primary model's figures as lm-evaluation-harness (0.4) writes its results file, with
    each key meaning what the harness means: one task per relation (``kgprobe_<measure
    key>_<PID>``) plus a group ``kgprobe_<measure key>`` over all facts; metrics ``mean`` (the
    measure's mean score) and ``known`` (share of facts with score ≥ threshold), each with the
    harness's ``<metric>_stderr`` (sample sd / sqrt(n)) under the filter ``none``; ``versions``
    the measure's version per task; ``config`` the model and its arguments; ``n-samples`` n per
    task. kgprobe's own intervals stay in ``results.json``."""
    a = rep.primary
    last = a.run_info[-1] if a.run_info else {}
    env: Mapping[str, Any] = last["environment"] if isinstance(last.get("environment"), dict) else {}
    params: Mapping[str, Any] = (last["measure_params"] if isinstance(last.get("measure_params"), dict)
                              else {})
    rows_by: dict[str, list[float]] = {}
    for row in a.facts:
        rows_by.setdefault(str(row["pid"]), []).append(float(row["score"]))
    everything = [float(row["score"]) for row in a.facts]
    group = f"kgprobe_{a.measure_key}"

    def metrics(alias: str, scores: Sequence[float]) -> dict[str, str | float | None]:
        known = [1.0 if v >= a.threshold else 0.0 for v in scores]
        return {"alias": alias,
                "mean,none": sum(scores) / len(scores) if scores else None,
                "mean_stderr,none": _stderr(scores) if scores else None,
                "known,none": sum(known) / len(known) if known else None,
                "known_stderr,none": _stderr(known) if known else None}

    tasks = {harness_task(a, g.key): (g, rows_by.get(g.key, [])) for g in a.relations}
    results = {group: metrics(group, everything)}
    results.update({t: metrics(f" - {g.name}", sc) for t, (g, sc) in tasks.items()})
    version = params.get("measure_version", 1)
    margs = ",".join([f"pretrained={a.model}", f"dtype={last.get('dtype')}",
                      *(f"{k}={v}" for k, v in (env.get("model_args") or {}).items())])
    total = command_seconds if command_seconds is not None else sum(
        float(r.get("seconds") or 0.0) for r in a.run_info)
    return {
        "results": results,
        "groups": {group: results[group]},
        "group_subtasks": {group: list(tasks)},
        "configs": {t: {"task": t, "tag": [group], "output_type": "loglikelihood", "num_fewshot": 0,
                        "description": f"{a.measure_label} on {g.name} (kgprobe)",
                        "metric_list": [{"metric": "mean", "aggregation": "mean", "higher_is_better": True},
                                        {"metric": "known", "aggregation": "mean", "higher_is_better": True}]}
                    for t, (g, _) in tasks.items()},
        "versions": {t: version for t in [group, *tasks]},
        "n-shot": {t: 0 for t in tasks},
        "higher_is_better": {t: {"mean": True, "known": True} for t in [group, *tasks]},
        "n-samples": {t: {"original": g.facts, "effective": len(sc)} for t, (g, sc) in tasks.items()},
        "config": {
            "model": "kgprobe", "model_args": margs, "model_dtype": last.get("dtype"),
            "batch_size": None, "batch_sizes": [], "device": last.get("device"),
            "use_cache": None, "limit": None, "bootstrap_iters": rep.bootstrap,
            "gen_kwargs": None, "random_seed": last.get("seed"), "numpy_seed": None,
            "torch_seed": None, "fewshot_seed": None,
        },
        "git_hash": rep.code.get("git"),
        "date": _epoch(rep.generated),
        "pretty_env_info": json.dumps(env, sort_keys=True) if env else None,
        "transformers_version": (last.get("library_versions") or {}).get("transformers"),
        "model_source": "kgprobe",
        "model_name": a.model,
        "model_name_sanitized": re.sub(r"[^A-Za-z0-9._-]", "__", a.model),
        "total_evaluation_time_seconds": str(round(total, 3)),
    }


def _epoch(iso: str) -> float | None:
    try:
        return dt.datetime.fromisoformat(iso).timestamp()
    except ValueError:
        return None


def sample_records(rep: Report, details: Mapping[FactKey, FactDetail] | None = None) -> list[SampleRecord]:
    """One record per (model, fact) of the report."""
    out: list[SampleRecord] = []
    for m in (rep.primary, rep.other):
        if m is None:
            continue
        labels = {g.key: g.label for g in m.relations}
        template_ids: dict[str, list[str]] = {}
        for r in m.run_info:
            if isinstance(r.get("templates"), dict):
                template_ids.update(r["templates"])
        for row in [*m.facts, *m.apart_facts]:  # BELIEF: every rank scale, each row naming its own
            d = (details or {}).get(row["key"]) if m is rep.primary else None
            score = float(row["score"])
            out.append({
                "model": m.model_key, "measure_key": m.measure_key, "key": row["key"],
                "relation": row["pid"], "relation_label": labels.get(row["pid"]),
                "subject": row["subject"], "subject_label": row["subject_label"],
                "object": row["object"], "object_label": row["object_label"],
                "subject_popularity": row.get("popularity"),
                "score": score, "known": score >= m.threshold, "stale": row.get("stale"),
                "run": row.get("run"), "scale": row.get("scale"),
                "scores": {m.measure_key: score, **(row.get("others") or {})},
                "template_ids": template_ids.get(row["pid"]),
                "templates": d.get("templates") if d else None,
                "clozes": d.get("clozes") if d else None,
                "distractors": d.get("distractors") if d else None,
            })
    return out


def results_files(
    rep: Report, details: Mapping[FactKey, FactDetail] | None = None, *,
    command_seconds: float | None = None,
) -> tuple[dict[str, str], dict[str, str | bytes]]:
    """The results files' contents, not yet written: ({key: file name}, {file name: content}).
    ``samples.parquet`` only with pyarrow."""
    from kgprobe.outputs import json_text

    names = {"results": RESULTS, "harness": HARNESS, "samples": SAMPLES}
    records = sample_records(rep, details)
    files: dict[str, str | bytes] = {
        RESULTS: json_text(results_document(rep, command_seconds=command_seconds), RESULTS,
                           indent=1, default=str),
        HARNESS: json_text(harness_document(rep, command_seconds=command_seconds), HARNESS,
                           indent=1, default=str),
        SAMPLES: "".join(json_text(r, SAMPLES, default=str) + "\n" for r in records),
    }
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        return names, files
    buf = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(_parquet_rows(records)), buf)
    names["parquet"] = SAMPLES_PARQUET
    files[SAMPLES_PARQUET] = buf.getvalue()
    return names, files


def write_results(
    rep: Report, out: str | Path, *, details: Mapping[FactKey, FactDetail] | None = None,
    overwrite: bool = False,
) -> dict[str, Path]:
    """``results.json``, ``samples.jsonl`` and (with pyarrow) ``samples.parquet`` in ``out``,
    put in place as one output (kgprobe.outputs.write_files): files kgprobe wrote there before
    that this does not write (a previous report's CSVs and page) are removed, so a directory
    never mixes two outputs. ``write_report`` writes these files together with the report."""
    from kgprobe.outputs import write_files

    names, files = results_files(rep, details)
    written = write_files(out, files, owner=report_owner(rep), overwrite=overwrite)
    return {key: written[name] for key, name in names.items()}


def _parquet_rows(records: Sequence[Mapping[str, Any]]) -> list[dict[str, object]]:
    """Parquet wants one type per column: the measure map becomes ``score.<key>`` columns and
    the nested lists are stored as JSON text (decoded again by :func:`load`)."""
    keys = sorted({k for r in records for k in r["scores"]})
    rows = []
    for r in records:
        row = {k: v for k, v in r.items() if k not in ("scores", "template_ids", "templates", "clozes", "distractors")}
        row.update({f"score.{k}": r["scores"].get(k) for k in keys})
        row.update({k: None if r[k] is None else json.dumps(r[k], ensure_ascii=False)
                    for k in ("template_ids", "templates", "clozes", "distractors")})
        rows.append(row)
    return rows


# --- reading ------------------------------------------------------------------------------------------


@dataclass
class Results:
    """A results directory as pandas: the document, per-(model, relation) aggregates, per-fact
    records (``score.<measure key>`` columns; nested lists as Python objects)."""

    document: Mapping[str, Any]
    relations: pd.DataFrame
    samples: pd.DataFrame


#: the schemas :func:`load` reads (docs/results.md, "Schema versions")
READS = (SCHEMA,)
_SCHEMA_NAME = re.compile(r"kgprobe-results/(\d+)")


def load(path: str | Path) -> Results:
    """Read ``results.json`` and ``samples.jsonl`` (or ``samples.parquet``) from ``path`` (the
    directory, or its ``results.json``). A file that is not what kgprobe writes is one line
    naming it: a schema this kgprobe does not read (older or newer) a ConfigError; a missing,
    empty, truncated, non-UTF-8, not-JSON or wrongly shaped file, or a damaged Parquet file,
    an InputError. Never a document read as if it had no relations."""
    try:
        import pandas  # noqa: F401  (said before any file is read)
    except ImportError as exc:  # pragma: no cover - the optional extra
        raise InputError("kgprobe.load_results needs pandas: pip install 'kgprobe[results]'") from exc
    d = Path(path)
    if d.name == RESULTS and not d.is_dir():
        d = d.parent
    if not d.exists():
        raise InputError(f"{d}: no such results directory")
    if not d.is_dir():
        raise InputError(f"{d} is a file, not a results directory (the directory that holds {RESULTS})")
    if not (d / RESULTS).is_file():
        raise InputError(f"{d} has no {RESULTS}")
    doc = _json_document(d / RESULTS)
    if (d / SAMPLES).is_file():
        return results_frames(doc, _json_lines(d / SAMPLES))
    found = results_frames(doc, [])
    if (d / SAMPLES_PARQUET).is_file():
        found.samples = _parquet(d / SAMPLES_PARQUET)
    return found


def results_frames(doc: Mapping[str, Any], records: Sequence[Mapping[str, Any]]) -> Results:
    """A results document and its per-fact records (:func:`sample_records`) as pandas: what
    :func:`load` reads from files, and what ``kgprobe.probe(set=...)`` returns in memory."""
    try:
        import pandas as pd
    except ImportError as exc:  # pragma: no cover - the optional extra
        raise InputError("kgprobe's results as DataFrames need pandas: pip install 'kgprobe[results]'") from exc
    rel_rows = []
    for m in doc["models"]:
        for pid, g in {**m["results"], "all": m["overall"]}.items():
            rel_rows.append({"model": m["model_key"], "measure_key": m["measure_key"], "relation": pid,
                             **{k: v for k, v in g.items() if k != "by_popularity"}})
    rows = []
    for r in records:
        row = {k: v for k, v in r.items() if k != "scores"}
        row.update({f"score.{k}": v for k, v in (r.get("scores") or {}).items()})
        rows.append(row)
    return Results(doc, pd.DataFrame(rel_rows), pd.DataFrame(rows))


def _text(f: Path) -> str:
    """A results file's text; unreadable, empty or not UTF-8 (as kgprobe writes them): one line."""
    try:
        data = f.read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read {f}: {exc.strerror or exc}") from None
    if not data.strip():
        raise InputError(f"{f} is empty; write the results again (kgprobe report --out)")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{f} is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}); "
                         "kgprobe writes its results files as UTF-8") from None


def _json_value(text: Any, f: Path, where: str = "") -> Any:
    if not isinstance(text, str):
        raise InputError(f"{f}{where} holds {type(text).__name__}, not JSON text (docs/results.md)")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{f}{where} is not valid JSON (damaged or cut short?): {exc.msg} at line {exc.lineno} "
                         f"column {exc.colno}") from None


def _json_document(f: Path) -> JSONObject:
    """``results.json``, its schema and the parts :func:`load` reads checked."""
    doc = _json_value(_text(f), f)
    if not isinstance(doc, dict):
        raise InputError(f"{f} holds a JSON {_json_kind(doc)}, not a kgprobe results document "
                         "(an object with \"schema\": docs/results.md)")
    schema = doc.get("schema")
    if schema is None:
        raise InputError(f"{f} has no \"schema\": not a kgprobe results document (docs/results.md)")
    if schema not in READS:
        known = _SCHEMA_NAME.fullmatch(str(schema))
        age = ("an older kgprobe's; write the results again with this kgprobe (kgprobe report --out)"
               if known and int(known.group(1)) < int(SCHEMA.rpartition("/")[2]) else
               "perhaps a newer kgprobe's; read it with that kgprobe")
        raise ConfigError(f"{f} has schema {str(schema)[:60]!r}, {age}; this kgprobe reads "
                          f"{', '.join(READS)}")
    models = doc.get("models")
    if not isinstance(models, list):
        raise InputError(f"{f}: \"models\" is {_json_kind(models)}, not a list (docs/results.md)")
    for i, m in enumerate(models):
        where = f"models[{i}]"
        if not isinstance(m, dict):
            raise InputError(f"{f}: {where} is {_json_kind(m)}, not an object (docs/results.md)")
        for key, kind in (("model_key", str), ("measure_key", str), ("results", dict), ("overall", dict)):
            if not isinstance(m.get(key), kind):
                raise InputError(f"{f}: {where}.{key} is {_json_kind(m.get(key))}, not "
                                 f"{'a string' if kind is str else 'an object'} (docs/results.md)")
        for pid, g in m["results"].items():
            if not isinstance(g, dict):
                raise InputError(f"{f}: {where}.results.{pid} is {_json_kind(g)}, not an object "
                                 "(docs/results.md)")
    return doc


def _json_lines(f: Path) -> list[JSONObject]:
    """``samples.jsonl``: one JSON object per line, its ``scores`` an object."""
    out = []
    for n, line in enumerate(_text(f).splitlines(), 1):
        if not line.strip():
            continue
        r = _json_value(line, f, f" line {n}")
        if not isinstance(r, dict) or not isinstance(r.get("scores", {}), dict | None):
            what = _json_kind(r) if not isinstance(r, dict) else f"an object whose \"scores\" is {_json_kind(r['scores'])}"
            raise InputError(f"{f} line {n} is {what}, not a sample record (docs/results.md)")
        out.append(r)
    return out


def _parquet(f: Path) -> pd.DataFrame:
    """``samples.parquet``, its JSON text columns decoded; a damaged file is one line."""
    import pandas as pd

    try:
        samples = pd.read_parquet(f)
    except ImportError as exc:
        raise InputError(f"reading {f} needs pyarrow: pip install 'kgprobe[results]'") from exc
    except Exception as exc:  # pyarrow's errors for a damaged file have no common base
        raise InputError(f"{f} is not a readable Parquet file (damaged or cut short?): "
                         f"{' '.join(str(exc).split())[:200]}") from None
    for col in ("template_ids", "templates", "clozes", "distractors"):
        if col in samples:
            samples[col] = [None if v is None else _json_value(v, f, f" column {col}")
                            for v in samples[col]]
    return samples


def _json_kind(v: Any) -> str:
    """What a JSON value is, for an error line."""
    if v is None:
        return "missing or null"
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}.get(
        type(v), "a number")


def report_owner(rep: Report) -> Owner:
    """Whose report a directory holds (kgprobe.outputs.check_owner): the model keys, primary
    first (one model compared with itself under another measure key is that model's report)."""
    return {"models": list(dict.fromkeys(m.model_key for m in (rep.primary, rep.other) if m is not None))}
