"""A probe run's configuration, its summary, and the names its scores are stored under.

Shared by the run's setup (:mod:`.run`), its loop (:mod:`.loop`) and the read side
(:mod:`.scores`), none of which imports another's internals.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypedDict

from kgprobe.checks import DEFAULT_THRESHOLD as DEFAULT_THRESHOLD
from kgprobe.checks import check_threshold
from kgprobe.errors import ConfigError
from kgprobe.graph import probe_runs as pr
from kgprobe.graph.distractors import date_sort_key
from kgprobe.probing.measures.catalog import create
from kgprobe.probing.measures.common import EndMarker, LabelRule, end_marker_for
from kgprobe.probing.measures.registry import SHARED, RunContext, parse_measure
from kgprobe.probing.models import REGISTRY, check_installed
from kgprobe.probing.strategies import strategy_class
from kgprobe.records import STYLE_OBJECT_LAST, STYLE_QUESTION
from kgprobe.types import PID

if TYPE_CHECKING:  # pragma: no cover
    from kgprobe.probing.requests import Request, Result

DEFAULT_MEASURES = ("kmin",)
DEFAULT_STRATEGY = "temp+sem"
USABLE_STYLES = (STYLE_OBJECT_LAST, STYLE_QUESTION)


class Runner(Protocol):
    """Requests in, results out, in order (``Engine`` is one)."""

    def run(self, requests: Sequence[Request]) -> list[Result]: ...


@dataclass(frozen=True)
class ProbeConfig:
    """Everything that decides which facts are probed and what their scores mean."""

    model: str = "smollm2-135m"
    relations: tuple[str, ...] = ()
    sample: int | None = 60  # facts in all, split evenly over the relations; None = all
    per_relation: int | None = None  # when set: this many facts of each relation (replaces sample)
    measures: tuple[str, ...] = DEFAULT_MEASURES
    strategy: str = DEFAULT_STRATEGY
    n: int = 5
    seed: int = 0
    threshold: float = DEFAULT_THRESHOLD
    at: str | None = None  # reference date YYYY-MM-DD; None = today (not part of the config hash)
    max_subject_labels: int = 1
    max_object_labels: int = 3
    max_templates: int | None = None  # per relation; object-last statements first
    max_past_values: int = 5
    batch_facts: int = 16  # facts per gather and per engine run
    write_facts: int = 256  # facts per write transaction (scores and counters together)
    pipeline: int = 2  # batches gathered ahead / writes behind the scoring; 0 = one thread
    dtype: str = "float32"
    force: bool = False  # rescore facts already scored with this configuration
    history_first: bool = False  # sample facts with a past value (staleness) first
    end: str = "auto"  # Eq. 1 end marker: auto (the model's documented one), eos, tail, none
    label_rule: str = "names"  # which aliases are labels (LabelRule): names or all
    verbalizer: str = "careful"  # how labels are written into templates: careful or raw
    on_model_mismatch: str = "suffix"  # another model's weights under this key: suffix or refuse
    shard: tuple[int, int] | None = None  # (K, N): only shard K of N of the sampled facts

    def measure_objects(self) -> list[Any]:
        """The registered measures of ``measures`` (``name`` or ``name:param=value,...``)."""
        out = []
        for spec in self.measures:
            name, params = parse_measure(spec)
            out.append(create(name, params))
        return out

    def validate(self) -> None:
        if not self.measures:
            raise ConfigError("no measure given; see `kgprobe measures`")
        ms = self.measure_objects()
        if len({m.name for m in ms}) != len(ms):
            raise ConfigError("a measure is given twice")
        SHARED["end"].parse(self.end)
        SHARED["label_rule"].parse(self.label_rule)
        SHARED["verbalizer"].parse(self.verbalizer)
        if self.on_model_mismatch not in ("suffix", "refuse"):
            raise ConfigError("on a model mismatch choose suffix or refuse")
        strategy_class(self.strategy)  # an unknown one: one line listing the registry's
        if self.n < 1:
            raise ConfigError("-n (distractors per fact) must be at least 1")
        check_threshold(self.threshold)
        if self.at is not None:
            date_sort_key(self.at)  # a bad --at is refused before the graph is contacted
        if self.sample is not None and self.sample < 1:
            raise ConfigError("--sample must be at least 1 (or leave it out for every fact)")
        if self.per_relation is not None and self.per_relation < 1:
            raise ConfigError("--per-relation must be at least 1")
        if self.batch_facts < 1:
            raise ConfigError("the batch size must be at least 1")
        if self.write_facts < 1:
            raise ConfigError("the write batch must be at least 1")
        if self.pipeline < 0:
            raise ConfigError("the pipeline depth must not be negative")
        if min(self.max_subject_labels, self.max_object_labels, self.max_templates or 1) < 1:
            raise ConfigError("label and template limits must be at least 1")
        if self.max_past_values < 0:
            raise ConfigError("the past-value limit must not be negative")


class RelationSummary(TypedDict):
    """What ``probe`` ends with per relation: facts its first measure scored in the run (``n``),
    their mean score, and facts it could not score."""

    relation: PID
    n: int
    mean: float | None
    unscorable: int


@dataclass
class ProbeSummary:
    """What a probe run did (also stored on its ProbeRun node)."""

    run_id: str
    model: str
    model_key: str
    score_properties: list[str]
    relations: list[str]
    planned: int = 0
    skipped: int = 0  # already scored with the same configuration
    scored: int = 0
    unscorable: int = 0
    seconds: float = 0.0
    status: str = "running"
    unscorable_reasons: dict[str, int] = field(default_factory=dict)
    interrupted_runs: list[str] = field(default_factory=list)
    #: generation/search prompts cut from the left to fit the model (docs/probing.md)
    contexts_cut: int = 0
    #: the measure key of the run's first measure, and per relation what it scored in THIS
    #: run (relation, n, mean, unscorable): the summary ``probe`` ends with
    summary_measure: str = ""
    by_relation: list[RelationSummary] = field(default_factory=list)
    #: a dry run (``probe --dry-run``): facts sampled per relation, and a few rendered prompts
    #: per measure key
    planned_by_relation: dict[str, int] = field(default_factory=dict)
    prompts: dict[str, list[str]] = field(default_factory=dict)
    #: the keys of the facts this run sampled (scored, unscorable or skipped as already scored):
    #: what ``--output-path`` reports on; not in ``to_dict``
    fact_keys: list[str] = field(default_factory=list, repr=False)
    #: ``probe(output_path=...)``: the report and results files written there (kind -> path);
    #: not in ``to_dict`` (the CLI's ``--json`` adds them when it wrote them)
    output_files: dict[str, str] = field(default_factory=dict, repr=False)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.pop("fact_keys")
        out.pop("output_files")
        if self.status != "dry run":
            out.pop("planned_by_relation")
            out.pop("prompts")
        return out


def model_key(model: str, dtype: str = "float32") -> str:
    """The model part of score property names: the registry name, or the file/directory name
    of a local model; ``_bf16`` is appended for bfloat16 so both precisions can coexist."""
    p = Path(model)
    base = model if model in REGISTRY else (p.stem if p.suffix == ".gguf" else p.name or model)
    key = pr.key_part(base)
    return key + ("_bf16" if dtype in ("bfloat16", "bf16") else "")


def measure_key(measure: str, strategy: str, n: int, **shared: Any) -> str:
    """The measure part of score property names, e.g. ``kmin_temp_sem_n5`` (see
    :meth:`kgprobe.probing.measures.registry.Measure.key`; ``shared`` overrides the run-wide
    label settings, e.g. ``max_object_labels=1`` gives ``kmin_temp_sem_n5_o1``)."""
    name, params = parse_measure(measure)
    return create(name, params).key(run_context(ProbeConfig(strategy=strategy, n=n, **shared), None))


def run_context(cfg: ProbeConfig, model_name: str | None) -> Any:
    """The measures' view of a run's settings (end marker, label rule, n, strategy, seed)."""
    end = end_marker_for(model_name) if cfg.end == "auto" else EndMarker(cfg.end)  # type: ignore[arg-type]
    return RunContext(end=end, max_subject_labels=cfg.max_subject_labels,
                      max_object_labels=cfg.max_object_labels,
                      label_rule=LabelRule(cfg.label_rule),  # type: ignore[arg-type]
                      verbalizer=cfg.verbalizer,
                      n=cfg.n, strategy=cfg.strategy, seed=cfg.seed, end_choice=cfg.end)


def check_model_name(model: str) -> None:
    """One clear line for a model that is neither a registry name nor a local file/directory."""
    p = Path(model).expanduser()
    if model in REGISTRY:
        check_installed(model)
        return
    if p.is_dir() or (p.suffix == ".gguf" and p.is_file()):
        return
    raise ConfigError(
        f"unknown model {model!r}; choose from: {', '.join(REGISTRY)}, "
        "or give a .gguf file or a local Hugging Face model directory"
    )
