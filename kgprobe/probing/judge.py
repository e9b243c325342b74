"""A chat model behind an OpenAI-compatible endpoint, for LLM-as-a-judge (a model call, so it
lives in the scoring package; the measure builds the prompt and reads the verdict).

Configured by environment: ``KGPROBE_JUDGE_URL`` (base URL, e.g. ``http://127.0.0.1:8000/v1``),
``KGPROBE_JUDGE_MODEL`` and optionally ``KGPROBE_JUDGE_API_KEY``. Without a URL the judge is
unavailable and says so in one line.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from kgprobe.config import private_dir, redact
from kgprobe.errors import ConfigError
from kgprobe.probing.http_client import MAX_BYTES, JsonClient, check_http_url
from kgprobe.probing.http_client import retry_after as retry_after  # re-exported (tests, callers)

ENV_URL = "KGPROBE_JUDGE_URL"
ENV_MODEL = "KGPROBE_JUDGE_MODEL"
ENV_KEY = "KGPROBE_JUDGE_API_KEY"


class VerdictCache:
    """Judge answers keyed by (endpoint, model, prompt, settings), in SQLite like the scores,
    so a resumed run never asks the judge twice. Owner-only like the rest of the home: the
    directory 0700, the file 0600 (an existing one is tightened). A file that is not a
    database is one line naming it (ConfigError), never a traceback."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        try:
            private_dir(self.path.parent)
            os.close(os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600))
            if self.path.stat().st_mode & 0o077:
                self.path.chmod(0o600)
            self.db = sqlite3.connect(str(self.path), timeout=10)
            self.db.execute(
                "CREATE TABLE IF NOT EXISTS verdicts (key TEXT PRIMARY KEY, text TEXT NOT NULL)")
            self.db.commit()
        except (sqlite3.Error, OSError) as exc:
            raise self._unusable(exc) from None

    def _unusable(self, exc: BaseException) -> ConfigError:
        why = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
        return ConfigError(f"the judge's verdict cache {self.path} is unusable ({why}); move it "
                           "away or delete it (it only saves asking the judge again)")

    def get(self, key: str) -> str | None:
        try:
            row = self.db.execute("SELECT text FROM verdicts WHERE key = ?", (key,)).fetchone()
        except sqlite3.Error as exc:
            raise self._unusable(exc) from None
        return None if row is None else str(row[0])

    def put(self, key: str, text: str) -> None:
        try:
            with self.db:
                self.db.execute("INSERT OR REPLACE INTO verdicts (key, text) VALUES (?, ?)",
                                (key, text))
        except sqlite3.Error as exc:
            raise self._unusable(exc) from None


def default_verdict_cache() -> Path:
    from kgprobe.config import Settings

    return Path(Settings.load().home) / "cache" / "judge.sqlite"


@dataclass(frozen=True)
class ChatJudge:
    """POSTs ``/chat/completions`` with temperature 0 (and a seed) and returns the text,
    through kgprobe.probing.http_client (no redirect to another origin, a deadline, a size cap,
    the key never in a message).

    408/409/429 and 5xx answers are retried up to ``retries`` times, waiting what
    ``Retry-After`` says (capped at ``max_wait_s``) or else ``backoff_s`` × 2^attempt; an
    unreachable endpoint fails at once. ``timeout_s`` bounds each network read,
    ``deadline_s`` a whole request. ``role`` names the caller in messages (the FACTOR
    generator reuses this class). Answers are cached in ``cache`` when given."""

    base_url: str
    model: str
    api_key: str | None = None
    timeout_s: float = 60.0
    seed: int = 0
    retries: int = 4
    backoff_s: float = 1.0
    max_wait_s: float = 60.0
    connect_timeout_s: float = 10.0
    deadline_s: float = 300.0
    max_bytes: int = MAX_BYTES
    role: str = "LLM judge"
    cache: VerdictCache | None = field(default=None, compare=False)
    sleep: Callable[[float], None] = field(default=time.sleep, compare=False, repr=False)

    def __post_init__(self) -> None:
        check_http_url(self.base_url, self.role)

    @classmethod
    def from_env(cls) -> ChatJudge:
        url = os.environ.get(ENV_URL, "").strip()
        if not url:
            raise ConfigError(
                f"LLM-as-a-judge is unavailable: no OpenAI-compatible endpoint configured "
                f"(set {ENV_URL} and {ENV_MODEL}, optionally {ENV_KEY})"
            )
        check_http_url(url, f"LLM judge ({ENV_URL})")
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
        client = JsonClient(
            self.role, self.api_key,
            connect_timeout=self.connect_timeout_s, read_timeout=self.timeout_s,
            deadline=self.deadline_s, max_bytes=self.max_bytes, retries=self.retries,
            backoff=self.backoff_s, max_wait=self.max_wait_s, retry_unreachable=False,
            sleep=self.sleep)
        data = client.post(f"{self.base_url}/chat/completions", {
            "model": self.model,
            "messages": [{"role": "user", "content": prompt}],
            "temperature": 0,
            "max_tokens": max_tokens,
            "seed": self.seed,
        })
        choices = data.get("choices")
        first = choices[0] if isinstance(choices, list) and choices else None
        message = first.get("message") if isinstance(first, dict) else None
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, str):
            raise ConfigError(
                f"{self.role} at {redact(self.base_url)} answered without a text "
                "choices[0].message.content")
        return content
