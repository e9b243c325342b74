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
(``KGPROBE_API_KEY``, else ``OPENAI_API_KEY``) and is never logged or put in an error.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kgprobe.errors import ConfigError
from kgprobe.probing.backends.base import EngineStats, Handler, ScoringBackend, register_backend
from kgprobe.probing.requests import LogProbRequest, LogProbResult
from kgprobe.probing.tokenization import split_trailing_whitespace

ENV_API_KEYS = ("KGPROBE_API_KEY", "OPENAI_API_KEY")
#: the bump of this backend's part of the fingerprint (how prompts are cut and read back)
SERVED_VERSION = "1"
_RETRY_STATUS = (408, 409, 429, 500, 502, 503, 504)


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

    def __init__(
        self,
        base_url: str,
        model: str | None = None,
        *,
        identity: str | None = None,
        batch_size: int = 1,
        concurrency: int = 1,
        timeout: float = 60.0,
        retries: int = 3,
        backoff: float = 0.5,
        stats: EngineStats | None = None,
        check_alignment: bool = True,
    ) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ConfigError(f"base_url must start with http:// or https://, got {base_url!r}")
        if batch_size < 1 or concurrency < 1 or retries < 0 or timeout <= 0:
            raise ConfigError("need batch_size >= 1, concurrency >= 1, retries >= 0, timeout > 0")
        self.base_url = base_url.rstrip("/")
        self.batch_size = batch_size
        self.concurrency = concurrency
        self.timeout = timeout
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

    def info(self) -> dict[str, Any]:
        return {"name": self.model, "kind": self.name, "device": "served"}

    # -- HTTP -----------------------------------------------------------------------------

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        key = next((os.environ[k] for k in ENV_API_KEYS if os.environ.get(k)), None)
        if key:
            headers["Authorization"] = f"Bearer {key}"
        return headers

    def _call(self, path: str, body: dict[str, Any] | None = None) -> Any:
        """One JSON call with retries on timeouts, refused connections and 408/429/5xx
        (exponential backoff); any other HTTP error fails at once with the server's message."""
        url = f"{self.base_url}{path}"
        data = None if body is None else json.dumps(body).encode()
        last = ""
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(self.backoff * 2 ** (attempt - 1))
            req = urllib.request.Request(url, data=data, headers=self._headers(),
                                         method="GET" if body is None else "POST")
            try:
                with urllib.request.urlopen(req, timeout=self.timeout) as resp:  # noqa: S310 (http(s) checked)
                    self.stats.forward_calls += 1
                    return json.loads(resp.read().decode("utf-8"))
            except urllib.error.HTTPError as exc:
                detail = exc.read().decode("utf-8", "replace")[:300]
                last = f"HTTP {exc.code}: {detail}"
                if exc.code not in _RETRY_STATUS:
                    break
            except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
                last = str(getattr(exc, "reason", exc))
        raise ServerError(f"{self.name}: {url} failed after {attempt + 1} attempt(s): {last}")

    def _first_model(self) -> str:
        found = self._call("/models")
        ids = [m.get("id") for m in found.get("data", []) if isinstance(m, dict)]
        if not ids or not isinstance(ids[0], str):
            raise ServerError(f"{self.name}: {self.base_url}/models lists no model")
        return ids[0]

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
        choices = self._call("/completions", body).get("choices") or []
        if not choices:
            raise ServerError(f"{self.name}: the server answered a completion with no choice")
        lp = choices[0].get("logprobs") or {}
        text = str(choices[0].get("text") or "")
        offsets = lp.get("text_offset") or []
        tops = lp.get("top_logprobs") or []
        inside = [i for i, o in enumerate(offsets) if o < len(prompt)]
        if not inside or len(tops) <= inside[-1] or not tops[inside[-1]]:
            raise ServerError(f"{self.name}: the server returned no prompt log-probabilities "
                              "(does it support echo with logprobs?)")
        top = tops[inside[-1]]
        top1 = max(top, key=top.get)
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
        choices = sorted(answer.get("choices") or [], key=lambda ch: ch.get("index", 0))
        if len(choices) != len(prompts):
            raise ServerError(
                f"{self.name}: asked for {len(prompts)} prompt(s), got {len(choices)} choice(s)")
        return [_read_choice(ch.get("logprobs"), len(ctx), len(ctx) + len(cont), self.name)
                for ch, (ctx, cont) in zip(choices, pairs, strict=True)]


def _read_choice(lp: Any, ctx_end: int, prompt_end: int, name: str) -> LogProbResult:
    """The continuation's tokens of one echoed prompt: those that end after the context and
    start inside the prompt (the generated token starts at its end)."""
    if not isinstance(lp, dict) or not lp.get("tokens"):
        raise ServerError(f"{name}: the server returned no prompt log-probabilities "
                          "(does it support echo with logprobs?)")
    tokens: list[str] = lp["tokens"]
    offsets: list[int] = lp["text_offset"]
    values: list[float | None] = lp["token_logprobs"]
    tops: list[dict[str, float] | None] = lp.get("top_logprobs") or [None] * len(tokens)
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
        greedy = greedy and bool(top) and float(v) >= max(top.values())  # type: ignore[union-attr]
    return LogProbResult(
        logprob=float(sum(chosen)),
        token_logprobs=tuple(chosen),
        tokens=tuple(tokens[i] for i in picked),
        is_greedy=greedy,
        boundary_merged=offsets[picked[0]] < ctx_end,
    )
