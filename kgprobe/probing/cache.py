"""Persistent score cache (SQLite), keyed by model fingerprint + the exact request.

The key holds the exact text and the scored span (and every option that changes a score), so
a repeated request never reaches the model and a run killed midway resumes where it stopped.
Full next-token vectors are not cached (too large; cheap to recompute relative to a run).
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3
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
)

_RESULT_OF: dict[type, type] = {
    LogProbRequest: LogProbResult,
    SpanScoreRequest: SpanScoreResult,
    NextTokenRequest: NextTokenResult,
    BeamSearchRequest: BeamSearchResult,
    GenerateRequest: GenerateResult,
}


def cacheable(req: Request) -> bool:
    """Every request but a full next-token distribution."""
    return not (isinstance(req, NextTokenRequest) and req.top_k is None)


def request_key(req: Request) -> str:
    """Canonical JSON of the request: its type and every field, exact text included."""
    return json.dumps([type(req).__name__, dataclasses.asdict(req)], ensure_ascii=False,
                      sort_keys=True)


def _dump(result: Result) -> str:
    d = dataclasses.asdict(result)
    d.pop("full_logprobs", None)
    return json.dumps(d, ensure_ascii=False)


def _load(req: Request, text: str) -> Result:
    d: dict[str, Any] = json.loads(text)
    cls = _RESULT_OF[type(req)]
    if cls is BeamSearchResult:
        return BeamSearchResult(tuple(
            Hypothesis(h["text"], tuple(h["token_ids"]), h["logprob"]) for h in d["hypotheses"]
        ))
    fields = {k: tuple(v) if isinstance(v, list) else v for k, v in d.items()}
    result: Result = cls(**fields)
    return result


class ScoreCache:
    """SQLite table (fingerprint, key) -> result JSON. Safe to share between runs."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(self.path))
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS scores (fingerprint TEXT NOT NULL, key TEXT NOT NULL, "
            "value TEXT NOT NULL, PRIMARY KEY (fingerprint, key))"
        )
        self._db.commit()

    def get_many(self, fingerprint: str, requests: Iterable[Request]) -> dict[Request, Result]:
        """Stored results for those of ``requests`` the cache holds."""
        found: dict[Request, Result] = {}
        for req in requests:
            if not cacheable(req):
                continue
            row = self._db.execute(
                "SELECT value FROM scores WHERE fingerprint = ? AND key = ?",
                (fingerprint, request_key(req)),
            ).fetchone()
            if row is not None:
                found[req] = _load(req, row[0])
        return found

    def put_many(self, fingerprint: str, items: Iterable[tuple[Request, Result]]) -> None:
        """Store results (one transaction)."""
        rows = [(fingerprint, request_key(q), _dump(r)) for q, r in items if cacheable(q)]
        with self._db:
            self._db.executemany(
                "INSERT OR REPLACE INTO scores (fingerprint, key, value) VALUES (?, ?, ?)", rows
            )

    def __len__(self) -> int:
        return int(self._db.execute("SELECT COUNT(*) FROM scores").fetchone()[0])

    def close(self) -> None:
        self._db.close()
