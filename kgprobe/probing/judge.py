"""A chat model behind an OpenAI-compatible endpoint, for LLM-as-a-judge (a model call, so it
lives in the scoring package; the measure builds the prompt and reads the verdict).

Configured by environment: ``KGPROBE_JUDGE_URL`` (base URL, e.g. ``http://127.0.0.1:8000/v1``),
``KGPROBE_JUDGE_MODEL`` and optionally ``KGPROBE_JUDGE_API_KEY``. Without a URL the judge is
unavailable and says so in one line.
"""

from __future__ import annotations

import email.utils
import hashlib
import json
import os
import sqlite3
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from kgprobe.errors import ConfigError

ENV_URL = "KGPROBE_JUDGE_URL"
ENV_MODEL = "KGPROBE_JUDGE_MODEL"
ENV_KEY = "KGPROBE_JUDGE_API_KEY"


#: HTTP statuses worth retrying: rate limits and server-side failures.
RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})


def retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delta-seconds or an HTTP date)."""
    if not value:
        return None
    v = value.strip()
    if v.isdigit():
        return float(v)
    try:
        when = email.utils.parsedate_to_datetime(v).timestamp()
    except (TypeError, ValueError):
        return None
    return max(0.0, when - (time.time() if now is None else now))


class VerdictCache:
    """Judge answers keyed by (endpoint, model, prompt, settings), in SQLite like the scores,
    so a resumed run never asks the judge twice."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(str(self.path))
        self.db.execute("CREATE TABLE IF NOT EXISTS verdicts (key TEXT PRIMARY KEY, text TEXT NOT NULL)")
        self.db.commit()

    def get(self, key: str) -> str | None:
        row = self.db.execute("SELECT text FROM verdicts WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def put(self, key: str, text: str) -> None:
        self.db.execute("INSERT OR REPLACE INTO verdicts (key, text) VALUES (?, ?)", (key, text))
        self.db.commit()


def default_verdict_cache() -> Path:
    from kgprobe.config import Settings

    return Path(Settings.load().home) / "cache" / "judge.sqlite"


@dataclass(frozen=True)
class ChatJudge:
    """POSTs ``/chat/completions`` with temperature 0 (and a seed) and returns the text.

    429 and 5xx answers are retried up to ``retries`` times, waiting what ``Retry-After``
    says (capped at ``max_wait_s``) or else ``backoff_s`` × 2^attempt. Answers are cached in
    ``cache`` when given."""

    base_url: str
    model: str
    api_key: str | None = None
    timeout_s: float = 60.0
    seed: int = 0
    retries: int = 4
    backoff_s: float = 1.0
    max_wait_s: float = 60.0
    cache: VerdictCache | None = field(default=None, compare=False)
    sleep: Callable[[float], None] = field(default=time.sleep, compare=False, repr=False)

    @classmethod
    def from_env(cls) -> ChatJudge:
        url = os.environ.get(ENV_URL, "").strip()
        if not url:
            raise ConfigError(
                f"LLM-as-a-judge is unavailable: no OpenAI-compatible endpoint configured "
                f"(set {ENV_URL} and {ENV_MODEL}, optionally {ENV_KEY})"
            )
        return cls(url.rstrip("/"), os.environ.get(ENV_MODEL, "").strip() or "default",
                   os.environ.get(ENV_KEY) or None, cache=VerdictCache(default_verdict_cache()))

    def complete(self, prompt: str, max_tokens: int = 8) -> str:
        key = hashlib.sha256(json.dumps(
            [self.base_url, self.model, prompt, max_tokens, self.seed]).encode()).hexdigest()
        if self.cache is not None:
            hit = self.cache.get(key)
            if hit is not None:
                return hit
        text = self._ask(prompt, max_tokens)
        if self.cache is not None:
            self.cache.put(key, text)
        return text

    def _ask(self, prompt: str, max_tokens: int) -> str:
        body = json.dumps({
            "model": self.model,
            "messages": [{"role": "user", "content": prompt}],
            "temperature": 0,
            "max_tokens": max_tokens,
            "seed": self.seed,
        }).encode()
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        req = urllib.request.Request(f"{self.base_url}/chat/completions", body, headers)
        attempt = 0
        while True:
            try:
                with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                    data = json.loads(resp.read().decode())
                break
            except urllib.error.HTTPError as exc:
                if exc.code not in RETRY_STATUSES or attempt >= self.retries:
                    raise ConfigError(
                        f"LLM judge at {self.base_url} answered HTTP {exc.code}"
                        + (f" after {attempt + 1} tries" if attempt else "")
                    ) from None
                wait = retry_after(exc.headers.get("Retry-After") if exc.headers else None)
                self.sleep(min(self.max_wait_s, wait if wait is not None
                               else self.backoff_s * 2 ** attempt))
                attempt += 1
            except (urllib.error.URLError, TimeoutError, OSError) as exc:
                raise ConfigError(f"LLM judge at {self.base_url} is unreachable: {exc}") from None
            except json.JSONDecodeError:
                raise ConfigError(f"LLM judge at {self.base_url} did not answer JSON") from None
        try:
            return str(data["choices"][0]["message"]["content"])
        except (KeyError, IndexError, TypeError):
            raise ConfigError(
                f"LLM judge at {self.base_url} answered without choices[0].message.content"
            ) from None
