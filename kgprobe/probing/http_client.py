"""The one HTTP client for the model endpoints kgprobe calls: the served backend
(``openai-completions``), the LLM judge and the FACTOR generator (issue 38).

Written on ``http.client`` so that every byte is under its control:

- **redirects**: one to another origin (scheme, host or port) is refused in one line, so the
  API key never goes there; one to the same origin is followed (307/308 keep the method and
  body, 301/302/303 only for a GET), at most ``MAX_REDIRECTS`` times;
- **time**: a connect timeout, a read timeout per network read, and an overall deadline per
  request, which a watchdog enforces by shutting the socket (a server that sends one byte every
  few seconds is cut);
- **size**: an answer is read in pieces and refused once it passes ``max_bytes`` (a
  ``Content-Length`` over it is refused before reading);
- **JSON**: decoded strictly (UTF-8, no ``NaN``/``Infinity``, no number that overflows to
  infinity, the body an object);
- **the key**: never in a message: server text goes into an error only as a short excerpt with
  every copy of the key replaced;
- **retries**: 408/409/429/5xx (and, where asked, timeouts and refused connections) with
  exponential backoff or what ``Retry-After`` says, capped.

Proxies named by the environment (``http_proxy``, ``https_proxy``, ``no_proxy``) are used as
urllib used them: an absolute URL to the proxy for http, a CONNECT tunnel for https.
"""

from __future__ import annotations

import contextlib
import email.utils
import http.client
import json
import math
import socket
import ssl
import threading
import time
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from email.message import Message
from typing import Any
from urllib.parse import urljoin, urlsplit

from kgprobe.errors import ConfigError
from kgprobe.types import JSONObject

#: HTTP statuses worth retrying: timeouts, conflicts, rate limits and server-side failures
RETRY_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504})
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
MAX_REDIRECTS = 5
#: the default cap on one answer's size (a served completion with echo of a long prompt is a
#: few hundred KiB; 64 MiB leaves room for batches)
MAX_BYTES = 64 * 2**20
#: how much of an error answer is read, and how much of it goes into a message
ERROR_BODY_BYTES = 64 * 2**10
EXCERPT_CHARS = 200
_CHUNK = 64 * 2**10


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


def check_http_url(url: str, what: str) -> None:
    """Refuse a URL that is not http(s) with a host (``file://`` once reached urllib)."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        raise ConfigError(f"{what}: the URL {_shown(url)!r} is malformed") from None
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"{what}: the URL must be http:// or https:// with a host, "
                          f"got {_shown(url)!r}")


def origin(url: str) -> tuple[str, str, int]:
    """(scheme, host, port) with the scheme's default port filled in."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    port = parts.port or (443 if scheme == "https" else 80)
    return scheme, (parts.hostname or "").lower(), port


def redact_secret(text: str, secret: str | None) -> str:
    """``text`` with every copy of ``secret`` (as sent, and as a JSON string would escape it)
    replaced by ``[redacted]``."""
    if not secret:
        return text
    for form in {secret, json.dumps(secret)[1:-1]}:
        text = text.replace(form, "[redacted]")
    return text


def excerpt(body: bytes, secret: str | None) -> str:
    """A short, one-line, redacted excerpt of a server's answer for an error message."""
    text = redact_secret(body.decode("utf-8", "replace"), secret)
    flat = " ".join("".join(c if c.isprintable() else " " for c in text).split())
    return flat[:EXCERPT_CHARS] + ("…" if len(flat) > EXCERPT_CHARS else "")


def _shown(url: str) -> str:
    from kgprobe.config import redact

    return redact(url)


def decode_object(data: bytes) -> JSONObject:
    """A JSON object from ``data``, strictly: UTF-8, no NaN/Infinity, finite numbers, an object
    at the top. Raises ValueError with a message that quotes nothing of ``data``."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"the answer is not UTF-8 (byte {exc.start})") from None

    def refuse(name: str) -> Any:
        raise ValueError(f"the answer holds the non-finite number {name}")

    def finite(s: str) -> float:
        v = float(s)
        if not math.isfinite(v):
            raise ValueError("the answer holds a number too large for a float")
        return v

    try:
        value = json.loads(text, parse_constant=refuse, parse_float=finite)
    except json.JSONDecodeError as exc:
        raise ValueError(f"the answer is not JSON ({exc.msg} at line {exc.lineno} "
                         f"column {exc.colno})") from None
    except RecursionError:
        raise ValueError("the answer is JSON nested too deeply") from None
    if not isinstance(value, dict):
        raise ValueError(f"the answer is a JSON {type(value).__name__}, not an object")
    return value


class _Transient(Exception):
    """A network failure worth a retry (timeout, refused connection, the deadline)."""


class _Fatal(Exception):
    """A failure no retry mends (a refused redirect, an answer too large, malformed JSON)."""


@dataclass(frozen=True)
class JsonClient:
    """JSON over HTTP for one caller. ``what`` starts every message ("openai-completions",
    "LLM judge"); ``error`` is the ConfigError subclass raised. Timeouts are in seconds:
    ``connect_timeout`` to open a connection, ``read_timeout`` for each network read,
    ``deadline`` for a whole request (redirects included), each attempt anew."""

    what: str
    api_key: str | None = None
    connect_timeout: float = 10.0
    read_timeout: float = 60.0
    deadline: float = 300.0
    max_bytes: int = MAX_BYTES
    retries: int = 3
    backoff: float = 0.5
    max_wait: float = 60.0
    retry_unreachable: bool = True
    error: type[ConfigError] = ConfigError
    sleep: Callable[[float], None] = field(default=time.sleep, repr=False)

    def __post_init__(self) -> None:
        if min(self.connect_timeout, self.read_timeout, self.deadline) <= 0 or not (
                math.isfinite(self.deadline)) or self.max_bytes < 1 or self.retries < 0:
            raise ConfigError(f"{self.what}: need timeouts and a deadline > 0, max_bytes >= 1, "
                              "retries >= 0")

    def get(self, url: str) -> JSONObject:
        return self.request("GET", url)

    def post(self, url: str, body: Mapping[str, Any]) -> JSONObject:
        return self.request("POST", url, body)

    def request(self, method: str, url: str, body: Mapping[str, Any] | None = None) -> JSONObject:
        """One JSON call with retries; the decoded object, or ``error`` with one line."""
        check_http_url(url, self.what)
        payload = None if body is None else json.dumps(body).encode()
        attempt, last = 0, ""
        while True:
            wait: float | None = None
            try:
                status, headers, data = self._exchange(method, url, payload)
            except _Fatal as exc:
                raise self._fail(f"{url}: {exc}") from None
            except _Transient as exc:
                last = str(exc)
                if not self.retry_unreachable:
                    raise self._fail(f"{url} is unreachable: {last}") from None
            else:
                if 200 <= status < 300:
                    try:
                        return decode_object(data)
                    except ValueError as exc:
                        raise self._fail(f"{url} answered malformed JSON: {exc}") from None
                last = f"HTTP {status}" + (f": {excerpt(data, self.api_key)}" if data else "")
                if status not in RETRY_STATUSES:
                    break
                wait = retry_after(headers.get("Retry-After"))
            if attempt >= self.retries:
                break
            attempt += 1
            self.sleep(min(self.max_wait, wait if wait is not None
                           else self.backoff * 2 ** (attempt - 1)))
        raise self._fail(f"{url} failed after {attempt + 1} attempt(s): {last}")

    def _fail(self, message: str) -> ConfigError:
        return self.error(redact_secret(_shown(f"{self.what}: {message}"), self.api_key))

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": "application/json",
                   "User-Agent": "kgprobe"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        return headers

    def _exchange(self, method: str, url: str, payload: bytes | None) -> tuple[int, Message, bytes]:
        """One request under one deadline, following same-origin redirects only."""
        ends = time.monotonic() + self.deadline
        for _ in range(MAX_REDIRECTS + 1):
            status, headers, data = self._once(method, url, payload, ends)
            if status not in REDIRECT_STATUSES or not headers.get("Location"):
                return status, headers, data
            target = urljoin(url, headers["Location"].strip())
            if origin(target) != origin(url):
                scheme, host, port = origin(target)
                raise _Fatal(f"answered HTTP {status}, a redirect to another origin "
                             f"({scheme}://{host}:{port}), which is not followed: the API key "
                             "would go there. Give the endpoint's final URL")
            if status in (301, 302, 303) and method != "GET":
                raise _Fatal(f"answered HTTP {status}, a redirect that would turn the {method} "
                             "into a GET without its body; give the endpoint's final URL")
            url = target
        raise _Fatal(f"redirected more than {MAX_REDIRECTS} times")

    def _connection(self, url: str, timeout: float) -> tuple[http.client.HTTPConnection, str]:
        """A connection for ``url`` (through the environment's proxy, if one applies) and the
        request target to send."""
        parts = urlsplit(url)
        scheme, host, port = origin(url)
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        proxy = urllib.request.getproxies().get(scheme)
        if proxy and not urllib.request.proxy_bypass(f"{host}:{port}"):
            p = urlsplit(proxy if "://" in proxy else f"http://{proxy}")
            if scheme == "https":
                conn: http.client.HTTPConnection = http.client.HTTPSConnection(
                    p.hostname or "", p.port or 80, timeout=timeout,
                    context=ssl.create_default_context())
                conn.set_tunnel(host, port)
                return conn, target
            return http.client.HTTPConnection(p.hostname or "", p.port or 80, timeout=timeout), url
        if scheme == "https":
            return http.client.HTTPSConnection(host, port, timeout=timeout,
                                               context=ssl.create_default_context()), target
        return http.client.HTTPConnection(host, port, timeout=timeout), target

    def _once(self, method: str, url: str, payload: bytes | None,
              ends: float) -> tuple[int, Message, bytes]:
        """One HTTP exchange; the body read in pieces, up to the cap, before ``ends``."""
        remaining = ends - time.monotonic()
        if remaining <= 0:
            raise _Transient(f"no complete answer within the {self.deadline:g} s deadline")
        conn, target = self._connection(url, min(self.connect_timeout, remaining))
        cut = threading.Event()
        opened: list[socket.socket] = []  # the socket, kept: the response may own it alone

        def watchdog() -> None:
            cut.set()
            for sock in [*opened, *([conn.sock] if conn.sock is not None else [])]:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

        timer = threading.Timer(remaining, watchdog)
        timer.daemon = True
        timer.start()
        try:
            conn.connect()
            if conn.sock is not None:
                opened.append(conn.sock)
                conn.sock.settimeout(self.read_timeout)
            if cut.is_set():  # the deadline passed while connecting
                raise _Transient(f"no complete answer within the {self.deadline:g} s deadline")
            conn.request(method, target, body=payload, headers=self._headers())
            resp = conn.getresponse()
            status = resp.status
            if status in REDIRECT_STATUSES:
                return status, resp.headers, b""
            ok = 200 <= status < 300
            limit = self.max_bytes if ok else ERROR_BODY_BYTES
            length = resp.headers.get("Content-Length", "").strip()
            if ok and length.isdigit() and int(length) > limit:
                raise _Fatal(f"announced an answer of {int(length):,} bytes, over the "
                             f"{limit:,}-byte limit")
            chunks: list[bytes] = []
            size = 0
            while chunk := resp.read1(_CHUNK):
                size += len(chunk)
                if size > limit:
                    if ok:
                        raise _Fatal(f"sent an answer over the {limit:,}-byte limit; "
                                     "not read further")
                    break  # an error answer: its start is enough for the message
                chunks.append(chunk)
            if cut.is_set():
                raise _Transient(f"no complete answer within the {self.deadline:g} s deadline")
            return status, resp.headers, b"".join(chunks)
        except (OSError, http.client.HTTPException) as exc:
            if cut.is_set():
                raise _Transient(
                    f"no complete answer within the {self.deadline:g} s deadline") from None
            raise _Transient(_reason(exc)) from None
        finally:
            timer.cancel()
            conn.close()


def _reason(exc: BaseException) -> str:
    """A network failure in a few words (no server text: these come from the socket layer)."""
    if isinstance(exc, TimeoutError | socket.timeout):
        return "timed out"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, ssl.SSLError):
        return f"TLS failed ({exc.reason or exc})"
    if isinstance(exc, http.client.HTTPException):
        return f"the connection broke ({type(exc).__name__})"
    return getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
