"""A chat model behind an OpenAI-compatible endpoint, for LLM-as-a-judge (a model call, so it
lives in the scoring package; the measure builds the prompt and reads the verdict).

Configured by environment: ``KGPROBE_JUDGE_URL`` (base URL, e.g. ``http://127.0.0.1:8000/v1``),
``KGPROBE_JUDGE_MODEL`` and optionally ``KGPROBE_JUDGE_API_KEY``. Without a URL the judge is
unavailable and says so in one line.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from dataclasses import dataclass

from kgprobe.errors import ConfigError

ENV_URL = "KGPROBE_JUDGE_URL"
ENV_MODEL = "KGPROBE_JUDGE_MODEL"
ENV_KEY = "KGPROBE_JUDGE_API_KEY"


@dataclass(frozen=True)
class ChatJudge:
    """POSTs ``/chat/completions`` with temperature 0 (and a seed) and returns the text."""

    base_url: str
    model: str
    api_key: str | None = None
    timeout_s: float = 60.0
    seed: int = 0

    @classmethod
    def from_env(cls) -> ChatJudge:
        url = os.environ.get(ENV_URL, "").strip()
        if not url:
            raise ConfigError(
                f"LLM-as-a-judge is unavailable: no OpenAI-compatible endpoint configured "
                f"(set {ENV_URL} and {ENV_MODEL}, optionally {ENV_KEY})"
            )
        return cls(url.rstrip("/"), os.environ.get(ENV_MODEL, "").strip() or "default",
                   os.environ.get(ENV_KEY) or None)

    def complete(self, prompt: str, max_tokens: int = 8) -> str:
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
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                data = json.loads(resp.read().decode())
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
