"""The scoring engine: requests in, results out, in order.

``Engine.run`` sees all requests of a run, so it can dedupe them, answer from the cache,
group them by kind, and store new results as it goes (chunk by chunk, so a killed run
resumes). What a request means for a model is the backend's business: the engine dispatches
each kind through the backend's table (:class:`~kgprobe.probing.backends.base.ScoringBackend`,
docs/backends.md) and never branches on the kind of model.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Literal

from kgprobe.errors import ConfigError
from kgprobe.probing.backends import BACKENDS, CausalBackend, EngineStats, ScoringBackend
from kgprobe.probing.backends.base import Finish, ModelInfo
from kgprobe.probing.backends.hf import HFBackend, HFCausal, hf_backend
from kgprobe.probing.cache import ScoreCache
from kgprobe.probing.models import DEFAULT_MODEL, HF_LOADER, LOAD_DEFAULTS, LoadedModel, from_model
from kgprobe.probing.requests import (
    BeamSearchRequest,
    GenerateRequest,
    LogProbRequest,
    LogProbResult,
    NextTokenRequest,
    Request,
    Result,
    SpanScoreRequest,
    TokenScoresRequest,
)
from kgprobe.progress import Progress

#: the order kinds are computed in within a chunk (results do not depend on it)
KINDS: tuple[type, ...] = (LogProbRequest, SpanScoreRequest, NextTokenRequest,
                           BeamSearchRequest, GenerateRequest, TokenScoresRequest)


#: a chunk launched (its requests, and what reads their results)
_Launched = tuple[list[Request], Callable[[], dict[Request, Result]]]


class Submitted:
    """A run launched by :meth:`Engine.submit`: ``result()`` waits for it the first time and
    returns one result per request, in the order given (an error of the run, every time).
    ``computes``: the requests it launched; ``value(r)`` one of their results."""

    def __init__(self, read: Callable[[], list[Result]],
                 computes: frozenset[Request] = frozenset(),
                 done: Mapping[Request, Result] | None = None) -> None:
        self._read: Callable[[], list[Result]] | None = read
        self._results: list[Result] | None = None
        self._error: BaseException | None = None
        self.computes = computes
        self._done = done

    def value(self, request: Request) -> Result:
        """The result of one of the requests it computes (read first if it is not yet)."""
        self.result()
        assert self._done is not None
        return self._done[request]

    @property
    def done(self) -> bool:
        return self._read is None

    def result(self) -> list[Result]:
        if self._read is not None:
            read, self._read = self._read, None
            try:
                self._results = read()
            except BaseException as exc:
                self._error = exc
                raise
        if self._error is not None:
            raise self._error
        assert self._results is not None
        return self._results


class Engine:
    """Runs scoring requests against one model: a loaded transformers model (its ``hf-*``
    backend is built here), an in-memory transformers model (``model``, ``tokenizer``), or
    any :class:`ScoringBackend` (a served model).

    Causal models: requests are packed as (context + continuation trie) segments into rows of
    up to ``batch_tokens`` tokens ("auto": the load-time choice, else 8192 where masked-out
    attention costs nothing and 512 with a dense mask, see ``default_batch_tokens``), one
    forward per row (``attention``: "auto", "flex", "segments" or "dense", see
    ``CausalBackend.attention_path``). ``share_prefix`` off runs every pair as
    one full sequence instead (the reference path, ``batch_size`` rows padded on
    ``padding_side``). Masked and seq2seq models batch ``batch_size`` rows, more for short rows
    up to ``batch_tokens``. ``cache`` makes results persistent."""

    #: launch a chunk before reading the one before it (None: ``launches_ahead`` decides)
    ahead: bool | None = None

    def __init__(
        self,
        model: LoadedModel | ScoringBackend | Any,
        *,
        tokenizer: Any = None,
        batch_size: int = 32,
        cache: ScoreCache | None = None,
        share_prefix: bool = True,
        padding_side: Literal["left", "right"] = "right",
        batch_tokens: int | None | Literal["auto"] = "auto",
        chunk_size: int = 16384,
        progress: bool = False,
        attention: str = "auto",
    ) -> None:
        self.cache = cache
        #: runs submitted and not yet read, oldest first
        self._in_flight: list[Submitted] = []
        self.share_prefix = share_prefix
        self.chunk_size = chunk_size
        self.progress = progress
        self.backend: ScoringBackend
        self.lm: LoadedModel | None = None
        if isinstance(model, ScoringBackend):
            self.backend = model
            self.stats = model.stats
            return
        self.lm = model if isinstance(model, LoadedModel) else from_model(model, tokenizer)
        self.stats = EngineStats()
        self.backend = hf_backend(self.lm, stats=self.stats, batch_size=batch_size,
                                  padding_side=padding_side, batch_tokens=batch_tokens,
                                  share_prefix=share_prefix, attention=attention)

    @property
    def fingerprint(self) -> str:
        return self.backend.fingerprint

    def model_info(self) -> ModelInfo:
        """What a probe run records about the model (name, kind, device)."""
        return self.backend.info()

    @property
    def causal(self) -> CausalBackend | None:
        """The causal model-call layer when the backend is ``hf-causal`` (tests and benchmarks
        read its attention path), else None."""
        return self.backend.model if isinstance(self.backend, HFCausal) else None

    def instilled(self, texts: Sequence[str], *, steps: int = 5, lr: float = 1e-3,
                  seed: int = 0) -> Engine:
        """An engine over a fine-tuned copy of this model (implicit instillation of ``texts``,
        :func:`kgprobe.probing.instill.finetune_copy`), with this engine's cache: the copy has
        its own fingerprint, so its scores never mix with the original's."""
        from kgprobe.probing.instill import finetune_copy

        if self.lm is None or not isinstance(self.backend, HFBackend):
            raise ConfigError(
                f"instillation fine-tunes weights; backend {self.backend.name!r} has none here")
        return Engine(finetune_copy(self.lm, texts, steps=steps, lr=lr, seed=seed),
                      cache=self.cache, share_prefix=self.share_prefix, chunk_size=self.chunk_size)

    # -- public ---------------------------------------------------------------------------

    def run(self, requests: Sequence[Request]) -> list[Result]:
        """One result per request, in the order given. Duplicates are computed once."""
        self.settle()
        done, chunks, _ = self._lookup(requests)
        # kgprobe's one progress path: stderr, plain lines off a terminal, nothing with --quiet
        with Progress("scoring", sum(map(len, chunks)), "requests",
                      enabled=self.progress and len(chunks) > 1) as bar:
            last = self._pipeline(chunks, done, bar)
            if last is not None:
                self._finish(last, done, bar)
        return [done[r] for r in requests]

    def submit(self, requests: Sequence[Request]) -> Submitted:
        """``run`` in two phases: launch the requests now, read them with ``.result()``. On a
        GPU the host goes on meanwhile (a probe reads and writes the previous batch's values
        while the device scores this one). Each chunk is planned as ``run`` plans it, so every
        value is the same. Runs still in flight are not waited for: the device takes this run
        right after them. With a cache, a request one of them computes is not launched again
        but taken from it when this run is read (counted as the cache hit it would be had that
        run been read first), so the same requests are computed as one run after the other."""
        done, chunks, waits = self._lookup(requests)
        last = self._pipeline(chunks, done, None)

        def result() -> list[Result]:
            if last is not None:
                self._finish(last, done, None)
            for r, run in waits.items():
                done[r] = run.value(r)
            return [done[r] for r in requests]

        sub = Submitted(result, frozenset(r for c in chunks for r in c), done)
        self._in_flight = [s for s in self._in_flight if not s.done] + [sub]
        return sub

    def settle(self) -> None:
        """Read every run in flight (``submit``), oldest first: their results reach the cache."""
        while self._in_flight:
            self._in_flight[0].result()
            self._in_flight.pop(0)

    @property
    def launches_ahead(self) -> bool:
        """Whether a chunk (or a probe's batch) is launched before the one before it is read:
        ``ahead`` if set, else where the backend launches work that runs on while the host goes
        on (a CUDA device). On the CPU a launch computes, so reading ahead would only delay
        storing what is done."""
        return self.ahead if self.ahead is not None else self.backend.launches_ahead()

    def _lookup(self, requests: Sequence[Request],
                ) -> tuple[dict[Request, Result], list[list[Request]], dict[Request, Submitted]]:
        """The results the cache has, the rest in chunks of ``chunk_size``, and (with a cache)
        which of the rest a run in flight computes, left out of the chunks (``run`` has read
        every run in flight first: none)."""
        unique = list(dict.fromkeys(requests))
        done: dict[Request, Result] = {}
        waits: dict[Request, Submitted] = {}
        if self.cache is not None:
            done = self.cache.get_many(self.fingerprint, unique)
            for run in self._in_flight:
                if not run.done:
                    waits.update((r, run) for r in unique
                                 if r in run.computes and r not in done and r not in waits)
            self.stats.cache_hits += len(done) + len(waits)
        todo = [r for r in unique if r not in done and r not in waits]
        chunks = [todo[i : i + self.chunk_size] for i in range(0, len(todo), self.chunk_size)]
        return done, chunks, waits

    def _pipeline(self, chunks: list[list[Request]], done: dict[Request, Result],
                  bar: Progress | None) -> _Launched | None:
        """Launch every chunk; with ``launches_ahead`` chunk c+1 is tokenized, planned and
        launched before chunk c is read (the device computes c meanwhile), else each is read
        before the next. Each chunk read is stored (a killed run resumes from the cache). The
        last one is returned unread."""
        ahead = self.launches_ahead
        prev: _Launched | None = None
        for chunk in chunks:
            if prev is not None and not ahead:
                self._finish(prev, done, bar)
                prev = None
            try:
                launched = (chunk, self._launch(chunk))
            except BaseException:
                if prev is not None:  # what was computed before the error is stored
                    self._finish(prev, done, bar)
                raise
            if prev is not None:
                self._finish(prev, done, bar)
            prev = launched
        return prev

    def _finish(self, launched: _Launched, done: dict[Request, Result],
                bar: Progress | None) -> None:
        chunk, read = launched
        new = read()
        self.stats.computed += len(new)
        if self.cache is not None:
            self.cache.put_many(self.fingerprint, new.items())
        done.update(new)
        if bar is not None:
            bar.advance(len(chunk))

    def score(self, context: str, candidates: Sequence[str], add_eos: bool = False) -> list[LogProbResult]:
        """Shorthand: log P(candidate | context) for each candidate."""
        results = self.run([LogProbRequest(context, c, add_eos) for c in candidates])
        return [r for r in results if isinstance(r, LogProbResult)]

    # -- dispatch -------------------------------------------------------------------------

    def _launch(self, reqs: list[Request]) -> Callable[[], dict[Request, Result]]:
        """Each kind of the chunk launched through the backend's table (a kind it does not
        serve is an error naming both before anything is computed); the function returned
        reads them all."""
        by_kind: dict[type, list[Request]] = {}
        for r in reqs:
            by_kind.setdefault(type(r), []).append(r)
        launchers = {kind: self.backend.launcher(kind) for kind in by_kind}
        order = sorted(by_kind, key=lambda k: KINDS.index(k) if k in KINDS else len(KINDS))
        reads: list[tuple[type, Finish]] = []
        for kind in order:
            with self._timed(kind.__name__, len(by_kind[kind])):
                reads.append((kind, launchers[kind](by_kind[kind])))

        def read() -> dict[Request, Result]:
            out: dict[Request, Result] = {}
            for kind, finish in reads:
                with self._timed(kind.__name__, 0):
                    out.update(zip(by_kind[kind], finish(), strict=True))
            return out

        return read

    @contextlib.contextmanager
    def _timed(self, kind: str, n: int) -> Iterator[None]:
        """Charge the CPU time of computing ``n`` requests of one kind to that kind."""
        c0 = time.process_time()
        try:
            yield
        finally:
            st = self.stats
            st.kind_cpu_seconds[kind] = st.kind_cpu_seconds.get(kind, 0.0) + time.process_time() - c0
            st.kind_requests[kind] = st.kind_requests.get(kind, 0) + n


def resolve_model(model: Any, tokenizer: Any = None, *,
                  name: str | None = None) -> tuple[LoadedModel | ScoringBackend, str, str]:
    """A model given as an object, as the engine takes it, with the name and dtype its scores
    are recorded under: a :class:`LoadedModel`, a scoring backend (a served model), or a
    transformers model with its ``tokenizer`` (wrapped by :func:`from_model`). ``name``
    overrides the recorded name."""
    if isinstance(model, ScoringBackend):
        return model, name or model.label, "float32"
    lm = model if isinstance(model, LoadedModel) else from_model(model, tokenizer, name=name)
    if name is not None:
        lm = dataclasses.replace(lm, name=name)
    return lm, lm.name, lm.dtype


#: the backend a URL given as ``--model`` selects (``--model http://host:port/v1``)
URL_BACKEND = "openai-completions"


def is_url(model: Any) -> bool:
    """A model named by the address of a server (``http://…`` or ``https://…``)."""
    return isinstance(model, str) and model.startswith(("http://", "https://"))


def select_model(model: str | Any | None, *, backend: str | None = None,
                 args: Mapping[str, Any] | None = None) -> Any:
    """``model`` as a command names it, with the backend that scores it: a registered backend
    other than the transformers loader (``--backend NAME --model-arg KEY=VALUE``; a URL as
    ``--model`` means ``openai-completions`` with that ``base_url``) becomes that backend's
    object, looked up in the backend registry (plug-ins included) and built by
    :meth:`ScoringBackend.from_args`; a name for the transformers loader stays a name (None:
    the default model); an object is returned as it is. ``backend``/``args`` default to what
    the CLI set (``LOAD_DEFAULTS``)."""
    if model is not None and not isinstance(model, str):
        return model
    name = backend if backend is not None else LOAD_DEFAULTS.backend
    kwargs = dict(args if args is not None else (LOAD_DEFAULTS.backend_args or {}))
    if name in (None, HF_LOADER) and not is_url(model):
        return model or DEFAULT_MODEL
    if name == HF_LOADER:
        raise ConfigError(f"--model {model} is a server's address; the transformers loader "
                          f"(--backend {HF_LOADER}) loads weights: give --backend {URL_BACKEND}")
    cls = BACKENDS.lookup(name or URL_BACKEND, "a backend of another package: install it, or "
                          "kgprobe --plugin MODULE; kgprobe models lists them")
    if is_url(model):
        if kwargs.get("base_url", model) != model:
            raise ConfigError(f"--model {model} and --model-arg base_url={kwargs['base_url']} "
                              "disagree; give one")
        kwargs["base_url"], model = model, None
    return cls.from_args(model, kwargs)
