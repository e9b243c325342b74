"""What every backend shares: the contract the engine dispatches through (``ScoringBackend``
and its registry), batch settings, padding ids and the call counter."""

from __future__ import annotations

import inspect
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, NotRequired, TypedDict, TypeVar

from kgprobe.errors import ConfigError
from kgprobe.plugins import BACKENDS as BACKEND_GROUP
from kgprobe.plugins import Registry
from kgprobe.probing.requests import Result


@dataclass
class EngineStats:
    """Counters a caller (or a test) can read: how often the model really ran."""

    forward_calls: int = 0
    cache_hits: int = 0
    computed: int = 0
    #: tokens fed through packed rows (unique tokens: contexts once, trie nodes once)
    tokens_fed: int = 0
    #: process CPU seconds spent inside forward calls (the rest of a run is overhead)
    forward_cpu_seconds: float = 0.0
    #: process CPU seconds in the LM head + log_softmax on the read positions, with the greedy
    #: check's argmax over the vocabulary and the release of those buffers (packed path)
    head_cpu_seconds: float = 0.0
    #: process CPU seconds a packed run waited for the device's results: its one
    #: synchronisation, after the last row was launched (0 on the CPU, which never waits)
    wait_cpu_seconds: float = 0.0
    #: on CUDA, device seconds between CUDA events recorded around each packed row's forward
    #: and around its LM head + log_softmax, read once at the end of a run: the stream's span
    #: for that work (any gap while the stream waited for the host's launches included)
    forward_gpu_seconds: float = 0.0
    head_gpu_seconds: float = 0.0
    #: process CPU seconds and request counts per request kind (class name), so a run's
    #: cost can be split by what measures asked for (benchmarks/bench_probe.py --per-measure)
    kind_cpu_seconds: dict[str, float] = field(default_factory=dict)
    kind_requests: dict[str, int] = field(default_factory=dict)


@dataclass
class ScoredTokens:
    """Per-token log-probabilities of a scored sequence and whether it is the greedy one."""

    logprobs: list[float]
    is_greedy: bool


@dataclass
class TrieNode:
    """A token trie: constrained beam search expands only ``children``."""

    children: dict[int, TrieNode] = field(default_factory=dict)
    terminal: bool = False

    @classmethod
    def build(cls, sequences: Sequence[Sequence[int]]) -> TrieNode:
        root = cls()
        for seq in sequences:
            node = root
            for tok in seq:
                node = node.children.setdefault(tok, cls())
            node.terminal = True
        return root

    def contains(self, seq: Sequence[int]) -> bool:
        """True when ``seq`` is a complete entry of the trie."""
        node: TrieNode | None = self
        for tok in seq:
            node = node.children.get(tok) if node is not None else None
        return node is not None and node.terminal


class Backend:
    """Holds a transformers model and the batching settings; subclasses make the calls (the
    model-call layer under the ``hf-*`` scoring backends)."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        batch_size: int,
        padding_side: Literal["left", "right"] = "right",
        batch_tokens: int | None = None,
        stats: EngineStats,
    ) -> None:
        self.model = model
        self.device = next(model.parameters()).device
        self.batch_size = max(1, batch_size)
        self.padding_side = padding_side
        self.batch_tokens = batch_tokens
        self.stats = stats
        self.eos_id: int | None = tokenizer.eos_token_id
        pad = tokenizer.pad_token_id
        self.pad_id: int = pad if pad is not None else (self.eos_id or 0)

    def rows_per_batch(self, width: int) -> int:
        """``batch_size`` rows, or more when rows are short and a token budget is set (many
        small rows per forward: a distractor's continuation is only a few tokens)."""
        if self.batch_tokens is None:
            return self.batch_size
        return max(self.batch_size, self.batch_tokens // max(1, width))


#: answers a batch of requests of one kind, one result per request, in order
Handler = Callable[[list[Any]], Sequence[Result]]
#: a launched batch's results: calling it waits for them (on a GPU, for the device)
Finish = Callable[[], Sequence[Result]]
#: launches a batch of one kind and returns its :data:`Finish` (two-phase handling)
Launcher = Callable[[list[Any]], Finish]


class UnsupportedRequest(ConfigError):
    """A request kind the chosen backend does not serve."""


class ModelInfo(TypedDict):
    """What a run records about its model (``ScoringBackend.info``; results.json's
    ``models``): its name, kind (the backend or model family) and device; a served model
    adds its address."""

    name: str
    kind: str
    device: str | None
    base_url: NotRequired[str]


class ScoringBackend(ABC):
    """The contract between the engine and a model: a backend declares which request kinds it
    serves (``handlers``: request class -> function over a batch of that class) and the
    fingerprint its results are cached under. The engine dedupes, caches, chunks and times;
    it dispatches each kind through the table and never looks at what the model is, so a new
    backend is one module with one class (registered with :func:`register_backend`)."""

    #: registry name, shown in errors
    name: ClassVar[str] = "backend"
    #: one request per call, or many requests packed/batched per model call (docs/backends.md)
    batching: ClassVar[str] = "batched"
    fingerprint: str
    stats: EngineStats

    @property
    def label(self) -> str:
        """The model's name as a run records it (score keys are made from it)."""
        return self.name

    def info(self) -> ModelInfo:
        """What a run records about the model: name, kind (the backend) and device."""
        return {"name": self.label, "kind": self.name, "device": None}

    #: what builds the backend from the command line (``kgprobe models`` shows it)
    built_from: ClassVar[str] = "--backend NAME --model-arg KEY=VALUE (its constructor's arguments)"

    @classmethod
    def arguments(cls) -> list[str]:
        """The ``--model-arg`` keys the backend takes: its constructor's keyword arguments,
        ``key=default`` where there is one (``stats`` is the engine's, not a user's)."""
        out = []
        for p in cls._parameters():
            out.append(p.name if p.default is p.empty else f"{p.name}={p.default}")
        return out

    @classmethod
    def _parameters(cls) -> list[inspect.Parameter]:
        params = list(inspect.signature(cls.__init__).parameters.values())[1:]
        return [p for p in params if p.name != "stats" and p.kind in (
            inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)]

    @classmethod
    def from_args(cls, model: str | None, args: Mapping[str, Any]) -> ScoringBackend:
        """The backend the CLI names (``--backend NAME --model-arg KEY=VALUE``, as the
        harness's ``--model NAME --model_args k=v``): ``args`` are the constructor's keyword
        arguments; ``model`` (``--model`` when given) fills its ``model`` argument. An unknown
        or missing argument is one line that lists the backend's arguments."""
        kwargs = dict(args)
        if model is not None:
            if kwargs.get("model", model) != model:
                raise ConfigError(f"backend {cls.name!r}: --model {model} and --model-arg "
                                  f"model={kwargs['model']} disagree; give one")
            kwargs["model"] = model
        params = cls._parameters()
        names = {p.name for p in params}
        takes = ", ".join(cls.arguments()) or "(none)"
        unknown = sorted(set(kwargs) - names)
        if unknown:
            raise ConfigError(f"backend {cls.name!r}: unknown --model-arg {', '.join(unknown)}; "
                              f"it takes: {takes}")
        missing = [p.name for p in params if p.default is p.empty and p.name not in kwargs]
        if missing:
            raise ConfigError(f"backend {cls.name!r} needs --model-arg "
                              f"{', '.join(m + '=...' for m in missing)}; it takes: {takes}")
        return cls(**kwargs)

    @abstractmethod
    def handlers(self) -> Mapping[type, Handler]:
        """The request kinds this backend serves, each with the function that answers them."""

    def serves(self) -> tuple[type, ...]:
        """The request classes this backend answers."""
        return tuple(self.handlers())

    def handler(self, kind: type) -> Handler:
        """The function for ``kind``, or an error naming the backend and the kind."""
        found = self.handlers().get(kind)
        if found is None:
            served = ", ".join(k.__name__ for k in self.serves()) or "nothing"
            raise UnsupportedRequest(
                f"backend {self.name!r} does not serve {kind.__name__} (it serves: {served}); "
                "use a model/backend that does, or leave out the measures that need it"
            )
        return found

    def launchers(self) -> Mapping[type, Launcher]:
        """The request kinds whose batches can be launched now and read later: the host goes
        on (tokenizes and plans the next batch, runs a probe's Python) while the device
        computes. None by default; every kind here must also be in ``handlers``."""
        return {}

    def launches_ahead(self) -> bool:
        """Whether launched work runs on its device while the host goes on (a GPU): then the
        engine launches a chunk, and a probe its next batch, before reading the one before.
        False by default: a launch that computes gains nothing from it."""
        return False

    def launcher(self, kind: type) -> Launcher:
        """How a batch of ``kind`` is launched: its two-phase function (``launchers``), else
        its handler run now, its results handed back when asked for (same values)."""
        handle = self.handler(kind)  # the error for a kind this backend does not serve
        found = self.launchers().get(kind)
        if found is not None:
            return found

        def now(batch: list[Any]) -> Finish:
            results = handle(batch)
            return lambda: results

        return now


def _name_backend(name: str, cls: type[ScoringBackend]) -> None:
    """A backend knows the name it is registered under (errors and run records show it)."""
    cls.name = name


#: every scoring backend by name (``@register_backend``, and the plug-ins of the
#: ``kgprobe.backends`` group): the engine builds the transformers ones from a loaded model's
#: kind (``hf-causal``, ``hf-masked``, ``hf-seq2seq``); ``--backend NAME --model-arg k=v``
#: builds any other (:meth:`ScoringBackend.from_args`)
BACKENDS: Registry[type[ScoringBackend]] = Registry(
    "backend", BACKEND_GROUP, ScoringBackend, name_attr=None, on_add=_name_backend)

_B = TypeVar("_B", bound=type[ScoringBackend])


def register_backend(name: str) -> Callable[[_B], _B]:
    """Class decorator: make a backend known under ``name`` (as the harness's
    ``@register_model``)."""
    return BACKENDS.register(name)


class BackendEntry(TypedDict):
    """One backend as ``kgprobe models`` lists it (:func:`backend_catalog`)."""

    name: str
    origin: str
    description: str
    built_from: str
    arguments: list[str]


def backend_catalog() -> list[BackendEntry]:
    """Every registered backend (plug-ins loaded): name, where it came from, one line on what
    it scores, what builds it from the command line and its ``--model-arg`` keys (what
    ``kgprobe models`` lists)."""
    return [{"name": e.name, "origin": e.origin, "description": e.description,
             "built_from": BACKENDS[e.name].built_from, "arguments": BACKENDS[e.name].arguments()}
            for e in BACKENDS.entries()]


def get_backend(name: str) -> type[ScoringBackend]:
    """The backend class registered under ``name`` (plug-ins loaded)."""
    return BACKENDS.lookup(name, "a backend of another package: install it, or kgprobe --plugin MODULE")
