"""A probe set scored as data (issue 42 #4): the scores, the report's figures and the usual
report files of ``kgprobe probe --set``, with no graph.

``kgprobe.probe(model, tokenizer=..., set=...)``, ``kgprobe probe --set`` and the training
callback (:mod:`kgprobe.callbacks`) all go through :func:`score_probe_set`: the set is scored
by the probe loop's scoring code (:func:`kgprobe.probing.probe_set.score_set`), its report is
built from the set and its scores (:func:`kgprobe.reports.build.set_report`: the figures a
direct probe's report shows for the same facts), and ``results.json``'s document and per-fact
records become DataFrames on demand (pandas only when they are asked for).
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kgprobe.app.options import (
    check_date,
    check_number,
    check_pids,
    check_seed,
    check_threshold,
    relations,
)
from kgprobe.checks import DEFAULT_THRESHOLD
from kgprobe.config import Settings

if TYPE_CHECKING:  # pragma: no cover
    # a probe set's header (content hash, facts, relations, snapshot, ...): probing owns its keys
    import pandas as pd

    from kgprobe.probing.config import ProbeSummary
    from kgprobe.probing.probe_set import ProbeSet, SetHeader, SetScores
    from kgprobe.reports.data import Report
    from kgprobe.reports.results import ResultsDocument, SampleRecord


@dataclass
class SetResults:
    """What scoring a probe set gives, in memory.

    ``summary``: the run's ProbeSummary; ``report``: the report's data (figures per relation
    and overall, intervals, chance level, every measure's aggregates); ``document``: the
    content of ``results.json``; ``records``: one per fact (``samples.jsonl``'s records, with
    the distractors' scores); ``scores``: the scores file's rows (per fact and measure, its
    FACT properties); ``output_files``: what was written (empty in memory)."""

    summary: ProbeSummary
    report: Report
    document: ResultsDocument
    records: list[SampleRecord]
    scored: SetScores
    output_files: dict[str, str] = field(default_factory=dict)

    @property
    def relations(self) -> pd.DataFrame:
        """Per relation and ``all``: n, mean, ci_low, ci_high, known, known_share, staleness...
        (as ``kgprobe.load_results(dir).relations``)."""
        from kgprobe.reports.results import results_frames

        return results_frames(self.document, []).relations

    @property
    def facts(self) -> pd.DataFrame:
        """Per fact: subject, relation, object, labels, score, known, stale, ``score.<measure
        key>`` for every measure, templates and distractor scores (as ``.samples`` of
        ``kgprobe.load_results``)."""
        from kgprobe.reports.results import results_frames

        return results_frames(self.document, self.records).samples

    def figures(self) -> dict[str, dict[str, float | None]]:
        """Per relation key (and ``all``): mean, known_share and staleness of the report's
        measure: the figures a training loop logs."""
        p = self.report.primary
        return {g.key: {"mean": g.mean, "known_share": g.known_share, "staleness": g.staleness}
                for g in [*p.relations, p.overall]}


def score_probe_set(
    pset: str | os.PathLike[str] | ProbeSet, model: str | Any, output_path: str | os.PathLike[str] | None = None,
    *, tokenizer: Any = None, model_name: str | None = None, dtype: str = "float32",
    threads: int = 1, shard: tuple[int, int] | None = None, cache: bool = True,
    progress: bool = True, overwrite: bool = False, measure: str | None = None,
) -> SetResults:
    """Score the probe set ``pset`` (a path, a shipped set's name or a read set) with ``model``
    (a name or path, or a transformers model object with ``tokenizer``) and return the scores
    as data. With ``output_path``: ``scores.parquet`` and the usual report files (report.html,
    results.json, samples.jsonl, ...) are written there; a directory holding another model's
    report is refused before the model is loaded, unless ``overwrite``."""
    from kgprobe.outputs import Owner, check_output_dir, check_owner
    from kgprobe.probing.config import model_key
    from kgprobe.probing.probe_set import probe_with_set, read_set, write_scores
    from kgprobe.reports.build import set_report
    from kgprobe.reports.results import FactDetails, results_document, sample_records
    from kgprobe.reports.write import write_report

    started = time.monotonic()
    read = pset if not isinstance(pset, str | os.PathLike) else read_set(pset)
    if output_path is not None:
        check_output_dir(output_path, "--output-path")
        if isinstance(model, str) or model_name is not None:
            from kgprobe.errors import ConfigError

            try:
                owner: Owner | None = {"models": [model_key(model_name or model, dtype)]}
            except ConfigError:
                owner = None  # not a model name: refused by the loader itself
            check_owner(output_path, owner, overwrite, "--output-path")
    details = FactDetails()
    scored = probe_with_set(read, model, None, tokenizer=tokenizer, model_name=model_name,
                            dtype=dtype, threads=threads, shard=shard, cache=cache,
                            progress=progress, on_fact=details)
    rep = set_report(read.header, read.rows, scored.header, scored.rows, measure=measure)
    seconds = time.monotonic() - started
    out = SetResults(scored.summary, rep, results_document(rep, command_seconds=seconds),
                     sample_records(rep, details.records), scored)
    if output_path is not None:
        paths = write_report(rep, os.fspath(output_path), details=details.records, overwrite=overwrite,
                             command_seconds=seconds)
        out.output_files = {"scores": str(write_scores(output_path, scored)),
                            **{k: str(v) for k, v in paths.items()}}
    return out


@dataclass(frozen=True)
class Exported:
    """``kgprobe export``: the probe set written, as its summary prints it, and its whole
    ``header`` (what ``kgprobe.export_set`` returns)."""

    file: str
    facts: int
    relations: int
    content_hash: str
    schema: Any
    header: SetHeader = field(repr=False, compare=False)

    def to_dict(self) -> dict[str, object]:
        return {"file": self.file, "facts": self.facts, "relations": self.relations,
                "content_hash": self.content_hash, "schema": self.schema}


def export(output: str | os.PathLike[str], *, relation: str | Sequence[str] | None = None,
           sample: int | None = 60, per_relation: int | None = None,
           measure: str | Sequence[str] | None = None, strategy: str | None = None,
           n: int | None = None, seed: int = 0, threshold: float = DEFAULT_THRESHOLD, at: str | None = None,
           max_labels: int = 3, max_subject_labels: int = 1, end: str = "auto",
           label_rule: str = "names", verbalizer: str = "careful", max_templates: int | None = None,
           batch_facts: int = 16, history_first: bool = False, progress: bool = True,
           settings: Settings | None = None) -> Exported:
    """Write a probe set of the graph's facts to ``output``: the sampled facts with everything
    the measures need, to score them where no graph server runs (docs/probe-sets.md). The
    options are ``probe``'s, named as the CLI's; ``sample`` 0 is every fact."""
    from kgprobe.graph.client import connect
    from kgprobe.probing.probe_set import export_set, set_config

    wanted = relations(relation)
    check_pids(wanted)
    check_number("--sample", sample, 0)
    check_number("--per-relation", per_relation, 1)
    check_number("-n", n, 1)
    check_seed(seed)
    check_threshold(threshold)
    check_date(at)
    check_number("--max-labels", max_labels, 1)
    check_number("--max-subject-labels", max_subject_labels, 1)
    check_number("--max-templates", max_templates, 1)
    check_number("--batch-facts", batch_facts, 1)
    measures = [measure] if isinstance(measure, str) else list(measure or ())
    cfg = set_config(
        relations=wanted, sample=sample or None, per_relation=per_relation,
        measures=measures or ("kmin",), strategy=strategy, n=n, seed=seed, threshold=threshold,
        at=at, max_object_labels=max_labels, max_subject_labels=max_subject_labels, end=end,
        label_rule=label_rule, verbalizer=verbalizer, max_templates=max_templates,
        batch_facts=batch_facts, history_first=history_first)
    with connect(settings) as graph:
        header = export_set(graph, cfg, output, progress=progress)
    return Exported(str(output), header["facts"], len(header["relations"]), header["content_hash"],
                    header["schema"], header)
