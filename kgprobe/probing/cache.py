"""Persistent score cache (SQLite), keyed by model fingerprint + the exact request.

The key holds the exact text and the scored span (and every option that changes a score), so
a repeated request never reaches the model and a run killed midway resumes where it stopped.
Full next-token vectors are not cached (too large; cheap to recompute relative to a run).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import sqlite3
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from kgprobe.probing.requests import (
    BeamSearchRequest,
    BeamSearchResult,
    GenerateRequest,
    GenerateResult,
    Hypothesis,
    LogProbRequest,
    LogProbResult,
    NextTokenRequest,
    NextTokenResult,
    Request,
    Result,
    SpanScoreRequest,
    SpanScoreResult,
    TokenScoresRequest,
    TokenScoresResult,
)
from kgprobe.types import JSONObject

_RESULT_OF: dict[type, type] = {
    LogProbRequest: LogProbResult,
    SpanScoreRequest: SpanScoreResult,
    NextTokenRequest: NextTokenResult,
    BeamSearchRequest: BeamSearchResult,
    GenerateRequest: GenerateResult,
    TokenScoresRequest: TokenScoresResult,
}


def cacheable(req: Request) -> bool:
    """Every request but a full next-token distribution."""
    return not (isinstance(req, NextTokenRequest) and req.top_k is None)


#: field names per dataclass type (``dataclasses.fields`` costs more than the key itself)
_FIELDS: dict[type, tuple[str, ...]] = {}


def _shallow(obj: Any) -> dict[str, object]:
    """Field name -> value (any dataclass: only dumped as JSON), without ``dataclasses.asdict``'s deep copy: for fields that
    are strings, numbers, None or tuples of those, ``json.dumps`` writes the same text."""
    names = _FIELDS.get(type(obj))
    if names is None:
        names = _FIELDS[type(obj)] = tuple(f.name for f in dataclasses.fields(obj))
    return {n: getattr(obj, n) for n in names}


def request_key(req: Request) -> str:
    """Canonical JSON of the request: its type and every field, exact text included."""
    return json.dumps([type(req).__name__, _shallow(req)], ensure_ascii=False, sort_keys=True)


#: results whose fields hold no dataclass (their shallow dict dumps as ``asdict`` does)
_FLAT_RESULTS = (LogProbResult, SpanScoreResult, TokenScoresResult, GenerateResult)


def _dump(result: Result) -> str:
    d = _shallow(result) if type(result) in _FLAT_RESULTS else dataclasses.asdict(result)
    d.pop("full_logprobs", None)
    return json.dumps(d, ensure_ascii=False)


def _load(req: Request, text: str) -> Result:
    d: JSONObject = json.loads(text)  # the result's fields, checked by its class
    cls = _RESULT_OF[type(req)]
    if cls is BeamSearchResult:
        return BeamSearchResult(tuple(
            Hypothesis(h["text"], tuple(h["token_ids"]), h["logprob"]) for h in d["hypotheses"]
        ))
    fields = {k: tuple(v) if isinstance(v, list) else v for k, v in d.items()}
    result: Result = cls(**fields)
    return result


#: Environment variable naming the cache file (``kgprobe.probing.score.default_score_cache``).
ENV_SCORE_CACHE = "KGPROBE_SCORE_CACHE"
#: keys per lookup query (SQLite allows 32,766 parameters since 3.32, 999 before)
_LOOKUP_CHUNK = 900
#: Seconds to wait for another process's write lock before running without the cache.
LOCK_TIMEOUT = 2.0


def _warn(message: str) -> None:
    """One line on stderr (stdout may be a --json document)."""
    from kgprobe.config import redact
    from kgprobe.progress import visible

    print(f"warning: {visible(redact(message))}", file=sys.stderr, flush=True)


class ScoreCache:
    """SQLite table (fingerprint, key) -> result JSON. Safe to share between runs.

    The cache only saves time, so it never stops a run: a file that is not a database, a
    truncated one, or one another process holds write-locked for more than ``LOCK_TIMEOUT``
    seconds gives ONE warning line on stderr (with how to relocate or skip the cache) and the
    run goes on without it (``usable`` is then False)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._db: sqlite3.Connection | None = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(str(self.path), timeout=LOCK_TIMEOUT)
            self._db = db
            db.execute("PRAGMA journal_mode=WAL")
            db.execute(
                "CREATE TABLE IF NOT EXISTS scores (fingerprint TEXT NOT NULL, key TEXT NOT NULL, "
                "value TEXT NOT NULL, PRIMARY KEY (fingerprint, key))"
            )
            db.commit()
            db.execute("SELECT COUNT(*) FROM scores LIMIT 1").fetchone()
        except (sqlite3.Error, OSError) as exc:
            self._give_up(exc)

    @property
    def usable(self) -> bool:
        return self._db is not None

    def _give_up(self, exc: BaseException) -> None:
        """Close the cache and say once why, and how to avoid it."""
        if self._db is not None:
            with contextlib.suppress(sqlite3.Error):
                self._db.close()
        self._db = None
        _warn(f"score cache {self.path} is unusable ({_reason(exc)}); going on without it. "
              f"Use --no-cache, or set {ENV_SCORE_CACHE}=PATH to use another file")

    def get_many(self, fingerprint: str, requests: Iterable[Request]) -> dict[Request, Result]:
        """Stored results for those of ``requests`` the cache holds."""
        found: dict[Request, Result] = {}
        if self._db is None:
            return found
        keyed: dict[str, list[Request]] = {}
        for req in requests:
            if cacheable(req):
                keyed.setdefault(request_key(req), []).append(req)
        keys = list(keyed)
        try:
            for i in range(0, len(keys), _LOOKUP_CHUNK):  # one query per chunk of keys
                part = keys[i : i + _LOOKUP_CHUNK]
                rows = self._db.execute(
                    "SELECT key, value FROM scores WHERE fingerprint = ? AND key IN "
                    f"({', '.join('?' * len(part))})",
                    (fingerprint, *part),
                ).fetchall()
                for key, value in rows:
                    for req in keyed[key]:
                        found[req] = _load(req, value)
        except sqlite3.Error as exc:
            self._give_up(exc)
            return {}
        return found

    def put_many(self, fingerprint: str, items: Iterable[tuple[Request, Result]]) -> None:
        """Store results (one transaction)."""
        if self._db is None:
            return
        rows = [(fingerprint, request_key(q), _dump(r)) for q, r in items if cacheable(q)]
        try:
            with self._db:
                self._db.executemany(
                    "INSERT OR REPLACE INTO scores (fingerprint, key, value) VALUES (?, ?, ?)", rows
                )
        except sqlite3.Error as exc:
            self._give_up(exc)

    def __len__(self) -> int:
        if self._db is None:
            return 0
        return int(self._db.execute("SELECT COUNT(*) FROM scores").fetchone()[0])

    def close(self) -> None:
        if self._db is not None:
            with contextlib.suppress(sqlite3.Error):
                self._db.close()
            self._db = None


def _reason(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    if isinstance(exc, sqlite3.OperationalError) and "locked" in text:
        return f"{text}: another process holds it for more than {LOCK_TIMEOUT:g} s"
    return text
