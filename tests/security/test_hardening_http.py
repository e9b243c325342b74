"""Issue 38, the HTTP items: the served backend, the LLM judge and the FACTOR generator talk to
real HTTP servers this file starts on 127.0.0.1 (one of them hostile in one way each): a
redirect to another origin, a server that drips bytes, an answer too large, malformed or
non-finite answers, a 401 that quotes the key. Each failure must be one line (a ConfigError)
that never holds the key, and the key must never reach another origin."""

from __future__ import annotations

import contextlib
import json
import os
import stat
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from kgprobe.errors import ConfigError
from kgprobe.probing.backends.served import OpenAICompletions, ServerError
from kgprobe.probing.judge import ChatJudge, VerdictCache
from kgprobe.probing.requests import LogProbRequest, LogProbResult

KEY = "sk-test-KEY-0123456789abcdef"
Respond = Callable[[BaseHTTPRequestHandler, bytes], None]


class Recorded:
    """A real HTTP server on 127.0.0.1 whose answers ``respond`` writes; every request's
    method, path and headers are recorded."""

    def __init__(self, respond: Respond) -> None:
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"

            def _any(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                outer.requests.append((self.command, self.path, dict(self.headers)))
                with contextlib.suppress(OSError):  # the client may hang up (that is the point)
                    respond(self, body)

            do_GET = do_POST = _any  # noqa: N815 - http.server's names

            def log_message(self, *args: object) -> None:
                return

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@contextlib.contextmanager
def serving(respond: Respond) -> Iterator[Recorded]:
    server = Recorded(respond)
    try:
        yield server
    finally:
        server.close()


def send(h: BaseHTTPRequestHandler, status: int, body: bytes | str,
         headers: dict[str, str] | None = None) -> None:
    data = body.encode() if isinstance(body, str) else body
    h.send_response(status)
    for k, v in (headers or {}).items():
        h.send_header(k, v)
    h.send_header("Content-Type", "application/json")
    h.send_header("Content-Length", str(len(data)))
    h.end_headers()
    h.wfile.write(data)


#: prompt "The capital Paris": context "The capital" (11 characters), continuation " Paris"
TOKENS = ["The", " capital", " Paris", "X"]
OFFSETS = [0, 3, 11, 17]
GOOD_LOGPROBS: list[Any] = [None, -1.0, -2.0, -0.5]
TOPS: list[Any] = [None, {" capital": -1.0}, {" Paris": -2.0}, {"X": -0.5}]


def completion(token_logprobs: list[Any] = GOOD_LOGPROBS) -> str:
    return json.dumps({"choices": [{"index": 0, "text": "The capital ParisX", "logprobs": {
        "tokens": TOKENS, "text_offset": OFFSETS, "token_logprobs": token_logprobs,
        "top_logprobs": TOPS}}]})


def served(url: str, **kw: Any) -> OpenAICompletions:
    return OpenAICompletions(f"{url}/v1", "m", check_alignment=False, retries=0, **kw)


def score(backend: OpenAICompletions) -> LogProbResult:
    [r] = backend.handlers()[LogProbRequest]([LogProbRequest("The capital", " Paris")])
    assert isinstance(r, LogProbResult)
    return r


def one_line(exc: pytest.ExceptionInfo[BaseException]) -> str:
    msg = str(exc.value)
    assert "\n" not in msg and KEY not in msg, msg
    return msg


@pytest.fixture()
def keyed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KGPROBE_API_KEY", KEY)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)


def test_a_well_formed_served_answer_is_read(keyed: None) -> None:
    """The control: the fake server's answer scores as written (-2.0 for " Paris")."""
    with serving(lambda h, _: send(h, 200, completion())) as s:
        r = score(served(s.url))
    assert r.logprob == -2.0 and r.tokens == (" Paris",) and r.is_greedy
    assert s.requests[0][2]["Authorization"] == f"Bearer {KEY}"


# -- 1. the key never goes to another origin ------------------------------------------------

def _model_list(h: BaseHTTPRequestHandler, _: bytes) -> None:
    """What the other origin answers, to anything: a model list and a judge answer in one."""
    send(h, 200, json.dumps({"data": [{"id": "other-host-model"}],
                             "choices": [{"message": {"content": "correct"}}]}))


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_served_backend_refuses_a_redirect_to_another_origin(keyed: None, status: int) -> None:
    with serving(_model_list) as other, serving(
            lambda h, _: send(h, status, "", {"Location": f"{other.url}/v1/models"})
    ) as endpoint, pytest.raises(ServerError) as exc:
        OpenAICompletions(f"{endpoint.url}/v1", retries=0)  # GET /v1/models
    assert "another origin" in one_line(exc) and f"HTTP {status}" in str(exc.value)
    assert other.requests == []  # the other host saw nothing, so not the key either
    assert endpoint.requests[0][2]["Authorization"] == f"Bearer {KEY}"


@pytest.mark.parametrize("role_key", [("LLM judge", "judge-" + KEY), ("FACTOR generator", KEY)])
def test_judge_and_generator_refuse_a_redirect_to_another_origin(
        tmp_path: Path, role_key: tuple[str, str]) -> None:
    """The judge's POST redirected with 302 (urllib turned it into a GET carrying the key to
    the other host, and accepted that host's verdict)."""
    role, key = role_key
    with serving(_model_list) as other, serving(
            lambda h, _: send(h, 302, "", {"Location": f"{other.url}/v1/chat/completions"})
    ) as endpoint:
        judge = ChatJudge(f"{endpoint.url}/v1", "m", key, retries=0, role=role)
        with pytest.raises(ConfigError) as exc:
            judge.complete("q")
    msg = one_line(exc)
    assert key not in msg and role in msg and "another origin" in msg
    assert other.requests == []


def test_a_same_origin_redirect_is_followed_with_the_key(keyed: None) -> None:
    def respond(h: BaseHTTPRequestHandler, _: bytes) -> None:
        if h.path == "/v1/models":
            send(h, 308, "", {"Location": "/v2/models"})
        else:
            send(h, 200, json.dumps({"data": [{"id": "moved-model"}]}))

    with serving(respond) as s:
        assert OpenAICompletions(f"{s.url}/v1", check_alignment=False).model == "moved-model"
    assert [(m, p) for m, p, _ in s.requests] == [("GET", "/v1/models"), ("GET", "/v2/models")]
    assert s.requests[1][2]["Authorization"] == f"Bearer {KEY}"


# -- 4. the key is not printed ---------------------------------------------------------------

def test_a_401_quoting_the_key_is_redacted(keyed: None) -> None:
    quoted = json.dumps({"error": f"invalid api key {KEY}; header was 'Bearer {KEY}'"})
    with serving(lambda h, _: send(h, 401, quoted)) as s:
        with pytest.raises(ServerError) as exc:
            score(served(s.url))
        judge = ChatJudge(f"{s.url}/v1", "m", KEY, retries=0)
        with pytest.raises(ConfigError) as jexc:
            judge.complete("q")
    for e in (exc, jexc):
        msg = one_line(e)
        assert "HTTP 401" in msg and "invalid api key [redacted]" in msg


# -- 7, 14. malformed and non-finite answers --------------------------------------------------

MALFORMED = {
    "not JSON": "{not json",
    "a list body": "[1, 2, 3]",
    "log-probs as strings": completion([None, "-1.0", "-2.0", "-0.5"]),
    "NaN": completion([None, -1.0, "NAN", -0.5]).replace('"NAN"', "NaN"),
    "-Infinity": completion([None, -1.0, "INF", -0.5]).replace('"INF"', "-Infinity"),
    "a number that overflows": completion([None, -1.0, "BIG", -0.5]).replace('"BIG"', "-1e999"),
    "choices not a list": json.dumps({"choices": {"0": {}}}),
    "offsets as strings": completion().replace("[0, 3, 11, 17]", '["0", "3", "11", "17"]'),
    "lists of different lengths": completion().replace("[0, 3, 11, 17]", "[0, 3, 11]"),
    "top log-probs not numbers": completion().replace('{" Paris": -2.0}', '{" Paris": "x"}'),
}


@pytest.mark.parametrize("body", MALFORMED.values(), ids=MALFORMED.keys())
def test_a_malformed_served_answer_is_one_line(keyed: None, body: str) -> None:
    with serving(lambda h, _: send(h, 200, body)) as s, pytest.raises(ServerError) as exc:
        score(served(s.url))
    assert f"{s.url}/v1/completions" in one_line(exc)


@pytest.mark.parametrize("body", ["[]", '{"data": "m"}', "{bad"])
def test_a_malformed_model_list_is_one_line(keyed: None, body: str) -> None:
    with serving(lambda h, _: send(h, 200, body)) as s, pytest.raises(ServerError) as exc:
        OpenAICompletions(f"{s.url}/v1", retries=0)
    assert f"{s.url}/v1/models" in one_line(exc)


@pytest.mark.parametrize("body", ['{"choices": [{"message": {"content": null}}]}',
                                  '{"choices": [{"message": {"content": ["correct"]}}]}',
                                  '["correct"]', "NaN"])
def test_a_judge_answer_without_text_content_is_one_line(body: str) -> None:
    """Before: null content became the verdict text "None", a list its repr."""
    with serving(lambda h, _: send(h, 200, body)) as s, pytest.raises(ConfigError) as exc:
        ChatJudge(f"{s.url}/v1", "m", retries=0).complete("q")
    assert "LLM judge" in one_line(exc)


# -- 12. an overall deadline -------------------------------------------------------------------

def _drip(headers_too: bool) -> Respond:
    """One byte every 0.5 s (40 bytes at most, so the old client ends too): the body of a 200
    answer, or the status line and headers themselves."""
    def respond(h: BaseHTTPRequestHandler, _: bytes) -> None:
        if headers_too:
            raw = b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\nX-Pad: " + b"a" * 40
        else:
            h.send_response(200)
            h.send_header("Content-Length", "1000")
            h.end_headers()
            h.wfile.flush()
            raw = b" " * 40
        for i in range(len(raw)):
            h.wfile.write(raw[i:i + 1])
            time.sleep(0.5)
    return respond


@pytest.mark.parametrize("headers_too", [False, True], ids=["body", "headers"])
def test_a_drip_feeding_server_is_cut_at_the_deadline(keyed: None, headers_too: bool) -> None:
    with serving(_drip(headers_too)) as s:
        t0 = time.monotonic()
        with pytest.raises(ServerError) as exc:
            score(served(s.url, timeout=5, deadline=1.5))
        served_s = time.monotonic() - t0
        t0 = time.monotonic()
        with pytest.raises(ConfigError) as jexc:
            ChatJudge(f"{s.url}/v1", "m", timeout_s=5, deadline_s=1.5, retries=0).complete("q")
        judge_s = time.monotonic() - t0
    assert "1.5 s deadline" in one_line(exc) and "1.5 s deadline" in one_line(jexc)
    # each read came within the 5 s read timeout; only the deadline can end it this soon
    assert 1.4 < served_s < 3.5 and 1.4 < judge_s < 3.5, (served_s, judge_s)


# -- 13. a size cap, read in pieces -----------------------------------------------------------

def _big(announce: bool) -> Respond:
    """5 MiB: 2 MiB at once, then (after 5 s) the rest; the length announced or not."""
    def respond(h: BaseHTTPRequestHandler, _: bytes) -> None:
        h.send_response(200)
        if announce:
            h.send_header("Content-Length", str(5 * 2**20))
        h.end_headers()
        h.wfile.write(b"[" + b"0," * (2**20 - 1))
        time.sleep(5)
        h.wfile.write(b" " * (3 * 2**20) + b"0]")
    return respond


@pytest.mark.parametrize("announce", [False, True], ids=["streamed", "announced"])
def test_an_oversized_answer_is_refused_without_reading_it_all(keyed: None,
                                                               announce: bool) -> None:
    with serving(_big(announce)) as s:
        t0 = time.monotonic()
        with pytest.raises(ServerError) as exc:
            score(served(s.url, max_bytes=2**20))
        served_s = time.monotonic() - t0
        t0 = time.monotonic()
        with pytest.raises(ConfigError) as jexc:
            ChatJudge(f"{s.url}/v1", "m", retries=0, max_bytes=2**20).complete("q")
        judge_s = time.monotonic() - t0
    assert "1,048,576-byte limit" in one_line(exc) and "1,048,576-byte limit" in one_line(jexc)
    assert served_s < 3 and judge_s < 3  # the 3 MiB sent after 5 s were never waited for


# -- 15 and minor: the verdict cache, the judge URL --------------------------------------------

def test_a_garbage_verdict_cache_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "judge.sqlite"
    path.write_bytes(b"this is not a database\n" * 200)
    with pytest.raises(ConfigError) as exc:
        VerdictCache(path)
    assert str(path) in one_line(exc)


def test_the_verdict_cache_is_owner_only(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        fresh = tmp_path / "home" / "cache" / "judge.sqlite"
        VerdictCache(fresh).put("k", "correct")
        assert stat.S_IMODE(fresh.parent.stat().st_mode) == 0o700
        assert stat.S_IMODE(fresh.stat().st_mode) == 0o600
        # a cache left by an older kgprobe (0755/0644) is tightened
        loose = tmp_path / "old" / "cache" / "judge.sqlite"
        VerdictCache(loose).put("k", "correct")
        loose.parent.chmod(0o755)
        loose.chmod(0o644)
        assert VerdictCache(loose).get("k") == "correct"
        assert stat.S_IMODE(loose.parent.stat().st_mode) == 0o700
        assert stat.S_IMODE(loose.stat().st_mode) == 0o600
    finally:
        os.umask(old)


@pytest.mark.parametrize("url", ["file:///etc/passwd", "ftp://127.0.0.1/v1", "127.0.0.1:8000/v1"])
def test_a_judge_url_that_is_not_http_is_refused(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match="http:// or https://") as exc:
        ChatJudge(url, "m")
    one_line(exc)
    monkeypatch.setenv("KGPROBE_JUDGE_URL", url)
    with pytest.raises(ConfigError, match="KGPROBE_JUDGE_URL"):
        ChatJudge.from_env()


def test_an_environment_proxy_is_still_used(keyed: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """urllib honoured http_proxy; the new client does too (an absolute URL to the proxy), so
    moving off urllib loses no set-up. The endpoint's host is never resolved here."""
    with serving(lambda h, _: send(h, 200, json.dumps({"data": [{"id": "via-proxy"}]}))) as proxy:
        for name in ("no_proxy", "NO_PROXY", "HTTP_PROXY"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("http_proxy", proxy.url)
        backend = OpenAICompletions("http://endpoint.invalid:8000/v1", check_alignment=False)
    assert backend.model == "via-proxy"
    assert [(m, p) for m, p, _ in proxy.requests] == [
        ("GET", "http://endpoint.invalid:8000/v1/models")]
