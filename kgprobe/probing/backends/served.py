"""``openai-completions``: a model behind an OpenAI-compatible completions endpoint (vLLM's,
llama-cpp-python's, llama.cpp's server), scored through the log-probabilities of the prompt's
own tokens (``echo``).

One request is one prompt ``context + continuation``; the server returns every prompt token
with its log-probability and character offset, and the tokens that end after the context are
the continuation's (a token across the boundary is counted, ``boundary_merged``, as the local
backends do). ``max_tokens`` is 1, as the harness's ``local-completions`` sends: some servers
(llama-cpp-python) read 0 as "no limit"; the one generated token is dropped. Prompts go
``batch_size`` per HTTP call (vLLM takes a list; llama-cpp-python takes one) and
``concurrency`` calls at once. The API key comes from the environment only
(``KGPROBE_API_KEY``, else ``OPENAI_API_KEY``) and is never logged or put in an error. HTTP goes
through kgprobe.probing.http_client (no redirect to another origin, a deadline, a size cap,
strict JSON), and every answer is type-checked, log-probs finite, before it becomes a score.
"""

from __future__ import annotations

import hashlib
import math
import os
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from kgprobe.errors import ConfigError
from kgprobe.probing.backends.base import (
    EngineStats,
    Handler,
    ModelInfo,
    ScoringBackend,
    register_backend,
)
from kgprobe.probing.http_client import MAX_BYTES, JsonClient
from kgprobe.probing.requests import LogProbRequest, LogProbResult
from kgprobe.probing.tokenization import split_trailing_whitespace
from kgprobe.types import JSONObject

ENV_API_KEYS = ("KGPROBE_API_KEY", "OPENAI_API_KEY")
#: the bump of this backend's part of the fingerprint (how prompts are cut and read back)
SERVED_VERSION = "1"


def public_url(url: str) -> str:
    """``url`` as it may be recorded and shown: scheme, host, port and path only (a password in
    the user info, or a key in the query, stays out of run records and reports)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:  # an IPv6 literal
        host = f"[{host}]"
    netloc = host if parts.port is None else f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


class ServerError(ConfigError):
    """The server refused a request, or could not be reached after the retries."""


@register_backend("openai-completions")
class OpenAICompletions(ScoringBackend):
    """Continuation log-probs from an OpenAI-compatible ``/v1/completions`` endpoint.

    ``base_url`` ends in ``/v1``; ``model`` is the server's model id (None: the first one
    ``/v1/models`` lists). The fingerprint holds the model id and ``identity`` (default: the
    base URL); give ``identity`` (e.g. the weights' sha256) when the same weights are served
    at other addresses, so cached scores carry over; a server whose weights change under the
    same id and URL must be given a new ``identity``."""

    batching = "one prompt per HTTP call (batch_size > 1: a list of prompts per call)"
    built_from = ("--backend openai-completions --model-arg base_url=http://HOST:PORT/v1 "
                  "[--model-arg model=ID], or --model http://HOST:PORT/v1")

    def __init__(
        self,
        base_url: str,
        model: str | None = None,
        *,
        identity: str | None = None,
        batch_size: int = 1,
        concurrency: int = 1,
        timeout: float = 60.0,
        connect_timeout: float = 10.0,
        deadline: float = 300.0,
        max_bytes: int = MAX_BYTES,
        retries: int = 3,
        backoff: float = 0.5,
        stats: EngineStats | None = None,
        check_alignment: bool = True,
    ) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ConfigError(f"base_url must start with http:// or https://, got {base_url!r}")
        if batch_size < 1 or concurrency < 1 or retries < 0 or min(timeout, connect_timeout,
                                                                   deadline) <= 0 or max_bytes < 1:
            raise ConfigError("need batch_size >= 1, concurrency >= 1, retries >= 0, timeouts "
                              "and deadline > 0, max_bytes >= 1")
        self.base_url = base_url.rstrip("/")
        self.batch_size = batch_size
        self.concurrency = concurrency
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.deadline = deadline
        self.max_bytes = max_bytes
        self.retries = retries
        self.backoff = backoff
        self.stats = stats if stats is not None else EngineStats()
        self.model = model or self._first_model()
        if check_alignment:
            self._check_alignment()
        who = identity or self.base_url
        self.fingerprint = hashlib.sha256(
            f"served:{self.model}|{who}|s{SERVED_VERSION}".encode()).hexdigest()

    def handlers(self) -> Mapping[type, Handler]:
        return {LogProbRequest: self._logprobs}

    @property
    def label(self) -> str:
        return self.model

    def info(self) -> ModelInfo:
        """What a run records: the server's model id and its address (``base_url`` without
        user info, query or fragment), so runs against two servers are told apart."""
        return {"name": self.model, "kind": self.name, "device": "served",
                "base_url": public_url(self.base_url)}

    # -- HTTP -----------------------------------------------------------------------------

    def _client(self) -> JsonClient:
        """The HTTP client with the key the environment holds now (never kept elsewhere)."""
        key = next((os.environ[k] for k in ENV_API_KEYS if os.environ.get(k)), None)
        return JsonClient(self.name, key, connect_timeout=self.connect_timeout,
                          read_timeout=self.timeout, deadline=self.deadline,
                          max_bytes=self.max_bytes, retries=self.retries, backoff=self.backoff,
                          error=ServerError)

    def _call(self, path: str, body: Mapping[str, object] | None = None) -> JSONObject:
        """One JSON call (kgprobe.probing.http_client: retries on timeouts, refused connections
        and 408/409/429/5xx; any other HTTP error fails at once with a redacted excerpt)."""
        client = self._client()
        url = f"{self.base_url}{path}"
        answer = client.get(url) if body is None else client.post(url, body)
        self.stats.forward_calls += 1
        return answer

    def _malformed(self, path: str, what: str) -> ServerError:
        return ServerError(f"{self.name}: {self.base_url}{path} answered a malformed "
                           f"response: {what}")

    def _first_model(self) -> str:
        found = self._call("/models")
        data = found.get("data")
        if not isinstance(data, list):
            raise self._malformed("/models", "'data' is not a list")
        ids = [m.get("id") for m in data if isinstance(m, dict)]
        if not ids or not isinstance(ids[0], str) or not ids[0]:
            raise ServerError(f"{self.name}: {self.base_url}/models lists no model")
        return ids[0]

    def _choices(self, answer: JSONObject, n: int) -> list[JSONObject]:
        """The answer's ``choices``: ``n`` objects in prompt order (by ``index`` when given)."""
        choices = answer.get("choices")
        if not isinstance(choices, list) or not all(isinstance(c, dict) for c in choices):
            raise self._malformed("/completions", "'choices' is not a list of objects")
        index = [c.get("index", i) for i, c in enumerate(choices)]
        if not all(isinstance(i, int) and not isinstance(i, bool) for i in index):
            raise self._malformed("/completions", "a choice's 'index' is not an integer")
        if len(choices) != n:
            raise ServerError(
                f"{self.name}: asked for {n} prompt(s), got {len(choices)} choice(s)")
        return [c for _, c in sorted(zip(index, choices, strict=True), key=lambda ic: ic[0])]

    def _check_alignment(self) -> None:
        """Refuse a server whose echoed log-probs are one position off. llama-cpp-python
        (0.3.36) gives prompt token i the log-prob of token i under the distribution *after* it
        when the prompt does not start with a BOS token (models whose GGUF says
        ``add_bos_token`` false, SmolLM2 among them), so every score would be wrong. The sign:
        the last prompt token's top-1 is the token the server then generates greedily, which
        a correct server shows only by coincidence (the probe makes that implausible: after
        "…, 6, 7" the next token is ",", while "7" is what follows "…, 6, ")."""
        prompt = "1, 2, 3, 4, 5, 6, 7"
        body = {"model": self.model, "prompt": prompt, "max_tokens": 1, "temperature": 0.0,
                "logprobs": 1, "echo": True}
        answer = self._call("/completions", body)
        if not answer.get("choices"):
            raise ServerError(f"{self.name}: the server answered a completion with no choice")
        [choice] = self._choices(answer, 1)
        lp = _echoed(choice.get("logprobs"), self.name, f"{self.base_url}/completions")
        text = choice.get("text")
        if not isinstance(text, str):
            raise self._malformed("/completions", "the choice's 'text' is not a string")
        inside = [i for i, o in enumerate(lp.offsets) if o < len(prompt)]
        if not inside or not lp.tops[inside[-1]]:
            raise _no_prompt_logprobs(self.name, f"{self.base_url}/completions")
        top = lp.tops[inside[-1]] or {}
        top1 = max(top, key=lambda t: top[t])
        generated = text[len(prompt):] if text.startswith(prompt) else text
        if generated and top1 == generated and not top1.strip().startswith("7"):
            raise ConfigError(
                f"backend {self.name!r}: the server's echoed log-probs are one token off (the "
                "last prompt token carries the next token's distribution). llama-cpp-python "
                "does this when no BOS token starts the prompt: start it with a BOS, e.g. "
                "--kv_overrides tokenizer.ggml.add_bos_token=bool:true (docs/backends.md), or "
                "pass check_alignment=False if you know better")

    # -- continuation log-probs -----------------------------------------------------------

    def _logprobs(self, reqs: list[LogProbRequest]) -> list[LogProbResult]:
        cut = []
        for r in reqs:
            if r.add_eos:
                raise ConfigError(
                    f"backend {self.name!r} cannot score the end-of-sequence token (add_eos): "
                    "the completions API scores text only; use end=tail or end=none")
            ctx, cont = split_trailing_whitespace(r.context, r.continuation)
            if not ctx:
                raise ConfigError(
                    f"backend {self.name!r} needs a non-empty context: the API gives the "
                    "prompt's first token no log-probability")
            cut.append((ctx, cont))
        batches = [cut[i : i + self.batch_size] for i in range(0, len(cut), self.batch_size)]
        if self.concurrency > 1 and len(batches) > 1:
            with ThreadPoolExecutor(self.concurrency) as pool:
                answered = list(pool.map(self._score_batch, batches))
        else:
            answered = [self._score_batch(b) for b in batches]
        return [r for batch in answered for r in batch]

    def _score_batch(self, pairs: Sequence[tuple[str, str]]) -> list[LogProbResult]:
        prompts = [c + x for c, x in pairs]
        body = {"model": self.model, "prompt": prompts if len(prompts) > 1 else prompts[0],
                "max_tokens": 1, "temperature": 0.0, "logprobs": 1, "echo": True}
        answer = self._call("/completions", body)
        choices = self._choices(answer, len(prompts))
        url = f"{self.base_url}/completions"
        return [_read_choice(_echoed(ch.get("logprobs"), self.name, url), len(ctx),
                             len(ctx) + len(cont), self.name)
                for ch, (ctx, cont) in zip(choices, pairs, strict=True)]


@dataclass(frozen=True)
class _Echo:
    """One choice's ``logprobs``, checked: the four lists of equal length."""

    tokens: list[str]
    offsets: list[int]
    values: list[float | None]
    tops: list[dict[str, float] | None]


def _no_prompt_logprobs(name: str, url: str) -> ServerError:
    """The refusal of a server that completes text but gives no log-probability of the prompt's
    own tokens (``echo`` with ``logprobs``): kgprobe's scores are exactly those numbers."""
    return ServerError(f"{name}: {url} returned no log-probabilities of the prompt's tokens, which "
                       "kgprobe scores with (it must support echo=true with logprobs, as vLLM's and "
                       "llama-cpp-python's servers do); this server cannot be probed")


def _number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def _echoed(lp: Any, name: str, url: str) -> _Echo:
    """A choice's ``logprobs`` checked before any of it becomes a score: token strings,
    integer offsets, finite log-probs (None only where the API gives none), top-k maps of
    finite numbers; anything else is a ServerError naming the URL."""
    if not isinstance(lp, dict) or not lp.get("tokens"):
        raise _no_prompt_logprobs(name, url)

    def bad(what: str) -> ServerError:
        return ServerError(f"{name}: {url} answered a malformed response: {what}")

    tokens, offsets, values = lp["tokens"], lp.get("text_offset"), lp.get("token_logprobs")
    tops = lp.get("top_logprobs") or [None] * (len(tokens) if isinstance(tokens, list) else 0)
    if not (isinstance(tokens, list) and isinstance(offsets, list) and isinstance(values, list)
            and isinstance(tops, list)):
        raise bad("'tokens', 'text_offset', 'token_logprobs' and 'top_logprobs' must be lists")
    if not len(tokens) == len(offsets) == len(values) == len(tops):
        raise bad("'tokens', 'text_offset', 'token_logprobs' and 'top_logprobs' differ in length")
    if not all(isinstance(t, str) for t in tokens):
        raise bad("a token is not a string")
    if not all(isinstance(o, int) and not isinstance(o, bool) and o >= 0 for o in offsets):
        raise bad("a text offset is not a non-negative integer")
    if not all(v is None or _number(v) for v in values):
        raise bad("a token log-probability is not a finite number")
    for top in tops:
        if top is not None and not (isinstance(top, dict) and all(
                isinstance(k, str) and _number(v) for k, v in top.items())):
            raise bad("a top_logprobs entry is not a map of tokens to finite numbers")
    return _Echo(tokens, offsets, values, tops)


def _read_choice(lp: _Echo, ctx_end: int, prompt_end: int, name: str) -> LogProbResult:
    """The continuation's tokens of one echoed prompt: those that end after the context and
    start inside the prompt (the generated token starts at its end)."""
    tokens, offsets, values, tops = lp.tokens, lp.offsets, lp.values, lp.tops
    picked = [i for i, (t, o) in enumerate(zip(tokens, offsets, strict=True))
              if o < prompt_end and o + len(t) > ctx_end]
    if not picked:
        raise ServerError(f"{name}: no prompt token covers the continuation")
    chosen: list[float] = []
    greedy = True
    for i in picked:
        v = values[i]
        if v is None:
            raise ConfigError(f"backend {name!r}: the continuation's first token is the "
                              "prompt's first token, which gets no log-probability")
        chosen.append(float(v))
        top = tops[i]
        greedy = greedy and bool(top) and float(v) >= max((top or {}).values(), default=0.0)
    total = float(sum(chosen))
    if not math.isfinite(total):
        raise ServerError(f"{name}: the continuation's log-probabilities sum to {total}")
    return LogProbResult(
        logprob=total,
        token_logprobs=tuple(chosen),
        tokens=tuple(tokens[i] for i in picked),
        is_greedy=greedy,
        boundary_merged=offsets[picked[0]] < ctx_end,
    )
