"""`kgprobe` as a user runs it — its own process, argv, environment, working directory, stdin,
stdout and stderr at the file-descriptor level, exit code — without paying Python's, torch's
and transformers' imports for every command.

Why: the suite runs the CLI a few hundred times per server; each fresh ``python -m kgprobe.cli``
that scores spent 3–5 s importing torch and transformers before doing any work (issue 39: the
suite's time). Here one *fork server* per test process imports those third-party libraries
once, and kgprobe's own modules but the CLI's (none reads the environment at import; each
command reads its environment and loads its plug-ins as a new process would), and forks a child
per command. The child gets the
command's environment, working directory and file descriptors 0/1/2, reseeds its random
generators, runs ``kgprobe.cli`` as ``python -m`` does, and exits through the interpreter's
own shutdown steps (threads joined, atexit handlers, streams flushed).

A command whose environment differs from the fork server's in anything the interpreter or
those libraries read at start-up (``PYTHON*``, locale, HF/transformers/torch/thread settings,
``HOME``/``XDG_*``) runs as a real ``python -m kgprobe.cli`` process instead, as does every
command when the fork server cannot start, printed anything while importing, or when
``KGPROBE_TEST_FORK_SERVER=0``.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

#: what the fork server imports once: the third-party libraries a scoring command needs
PRELOAD = ("numpy", "scipy", "torch", "transformers", "transformers.models.gpt2.modeling_gpt2",
           "transformers.models.llama.modeling_llama", "tokenizers", "safetensors", "neo4j", "rich",
           "typer", "yaml", "jinja2", "pyarrow", "pyarrow.parquet", "sklearn", "faiss", "matplotlib")
#: environment read when the interpreter or a preloaded library starts: a command must match
STARTUP_PREFIXES = ("PYTHON", "LANG", "LC_", "HF_", "HUGGINGFACE", "TRANSFORMERS", "TORCH", "PYTORCH", "TOKENIZERS",
                    "CUDA", "OMP_", "MKL_", "OPENBLAS", "NUMEXPR", "HOME", "XDG_", "MPLBACKEND",
                    "MPLCONFIGDIR", "TMPDIR", "KGPROBE_TEST_FORK")
#: ... except what a library sets in the test process for its own later use (torch.compile's cache
#: and workers, Intel OpenMP, which torch's GNU OpenMP build never reads), read when used
RUNTIME_PREFIXES = ("TORCHINDUCTOR_", "TORCHDYNAMO_", "KMP_")


#: the test process's environment when this module was imported (collection time, before any
#: fixture or test changed it): the fork server starts with it
BASE_ENV = dict(os.environ)
#: how commands ran, for the session's summary: forked, or a new process and why
COUNTS: dict[str, int] = {}


def _count(how: str) -> None:
    COUNTS[how] = COUNTS.get(how, 0) + 1


def _startup_env(env: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items()
            if k.startswith(STARTUP_PREFIXES) and not k.startswith(RUNTIME_PREFIXES) and k != "PYTHONPATH"}


def _path_entries(env: Mapping[str, str], cwd: str) -> list[str]:
    """``PYTHONPATH``'s entries as a new process puts them on ``sys.path``: absolute, from its
    working directory."""
    return [os.path.abspath(os.path.join(cwd, p)) for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]


def _top_level_names(entry: str) -> set[str]:
    """The names a ``sys.path`` entry can be imported under (packages, modules, extensions)."""
    try:
        names = os.listdir(entry)
    except OSError:
        return set()
    return {n.split(".", 1)[0] for n in names if "." not in n or n.endswith((".py", ".pyc", ".so", ".pyd"))}


# --- the server side (runs in the fork server's own process) ---------------------------------

_OPEN: list[socket.socket] = []  # the server's sockets, closed in each child
_REST: list[str] = []  # sys.path after the working directory and PYTHONPATH


#: kgprobe's modules that read the command's environment or terminal when imported: never
#: preloaded (``cli`` makes its consoles at import, for the terminal and ``COLUMNS`` it finds)
NOT_PRELOADED = ("kgprobe.cli", "kgprobe.__main__")


def _preload_kgprobe() -> None:
    """Import kgprobe's modules too (about 0.5 s of every command): none but
    :data:`NOT_PRELOADED` reads the environment, a terminal or the working directory at import
    (every setting is read when a function runs), and built-in registries are filled the same
    way in every process; plug-ins are still loaded by each command, as it runs."""
    import importlib
    import pkgutil

    try:
        import kgprobe
    except ImportError:
        return
    for info in pkgutil.walk_packages(kgprobe.__path__, "kgprobe."):
        if info.name not in NOT_PRELOADED:
            with contextlib.suppress(ImportError):
                importlib.import_module(info.name)


def _origins(roots: Sequence[str]) -> dict[str, str]:
    """Where each imported top-level package or module lives (its folder, or its file)."""
    out = {}
    for name in roots:
        file = getattr(sys.modules.get(name), "__file__", None)
        if file:
            path = Path(file)
            out[name] = str((path.parent if path.name == "__init__.py" else path).resolve())
    return out


def _same_file(entry: str, name: str, origin: str | None) -> bool:
    """Would ``name`` imported from path entry ``entry`` be the module the server imported?"""
    if origin is None:
        return False
    base = Path(entry) / name
    return any(c.exists() and str(c.resolve()) == origin for c in (base, base.with_suffix(".py")))


def _serve(sock_path: str, parent: int) -> None:
    """Import PRELOAD, say "ready" (or why not) on stdout, then fork one child per request
    until the test process that started it is gone."""
    import importlib
    import io
    import warnings

    noise = io.StringIO()
    saved_err = os.dup(2)
    with tempfile.TemporaryFile() as err_file:
        os.dup2(err_file.fileno(), 2)  # anything a library prints while importing: the server refuses
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("default")
                for name in PRELOAD:
                    with contextlib.suppress(ImportError):
                        importlib.import_module(name)
                _preload_kgprobe()
        finally:
            sys.stderr.flush()
            os.dup2(saved_err, 2)
        err_file.seek(0)
        printed = err_file.read().decode("utf-8", "replace")
    for w in caught:
        noise.write(f"{w.category.__name__}: {w.message}\n")
    if printed.strip() or noise.getvalue():
        print(json.dumps({"ready": False, "why": (printed + noise.getvalue())[:2000]}), flush=True)
        return
    # sys.path is [tests/ (to import this module), "" (-c), PYTHONPATH..., the rest]: each child
    # puts its own working directory and PYTHONPATH before the rest
    own = _path_entries(os.environ, os.getcwd())
    rest = sys.path[2:]
    while own and rest and rest[0] == own[0]:
        own.pop(0)
        rest.pop(0)
    _REST[:] = rest
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(sock_path)
    listener.listen(16)
    _OPEN.append(listener)
    parent_fd = os.pidfd_open(parent)
    roots = sorted({name.split(".", 1)[0] for name in sys.modules})
    print(json.dumps({"ready": True, "modules": roots, "origins": _origins(roots)}), flush=True)
    import select

    waiting: dict[int, tuple[int, socket.socket]] = {}  # pidfd -> (pid, connection)
    while True:
        readable, _, _ = select.select([listener, parent_fd, *waiting], [], [])
        for r in readable:
            if r == parent_fd:
                os._exit(0)
            if r is listener:
                conn, _ = listener.accept()
                pid = _fork_one(conn)
                if pid is None:
                    conn.close()
                    continue
                waiting[os.pidfd_open(pid)] = (pid, conn)
                _OPEN.append(conn)
            else:
                pid, conn = waiting.pop(r)
                _, status = os.waitpid(pid, 0)
                os.close(r)
                _OPEN.remove(conn)
                with contextlib.suppress(OSError):
                    conn.sendall(json.dumps({"status": status}).encode() + b"\n")
                conn.close()


def _fork_one(conn: socket.socket) -> int | None:
    msg, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
    if len(fds) != 3:
        for fd in fds:
            os.close(fd)
        return None
    request = json.loads(msg.decode())
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the child: becomes `python -m kgprobe.cli ARGS` and never returns
        try:
            conn.close()
            for sock in _OPEN:
                sock.close()
            for target, fd in enumerate(fds):
                os.dup2(fd, target)
                os.close(fd)
            _run_child(request)
        finally:
            os._exit(70)
    for fd in fds:
        os.close(fd)
    conn.sendall(json.dumps({"pid": pid}).encode() + b"\n")
    return pid


def _run_child(request: dict[str, object]) -> None:
    import importlib
    import random
    import runpy
    import traceback

    os.setsid()  # its own process group, like a command started from a shell
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for sig in (signal.SIGTERM, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_DFL)
    os.environ.clear()
    os.environ.update(request["env"])  # type: ignore[arg-type]
    cwd = str(request["cwd"])
    os.chdir(cwd)
    seen: set[str] = set()  # `python -m`: the working directory, PYTHONPATH, the rest, no duplicates
    sys.path[:] = [p for p in [cwd, *_path_entries(os.environ, cwd), *_REST] if not (p in seen or seen.add(p))]
    importlib.invalidate_caches()
    sys.argv = ["-m", *request["args"]]  # type: ignore[misc]  # runpy sets argv[0] to the module's file
    random.seed()  # a new process's generators start from fresh entropy, not the server's state
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()
    if "torch" in sys.modules:
        sys.modules["torch"].seed()
    code: int = 0
    try:
        runpy.run_module("kgprobe.cli", run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        if exc.code is None:
            code = 0
        elif isinstance(exc.code, int):
            code = exc.code
        else:
            print(exc.code, file=sys.stderr)
            code = 1
    except KeyboardInterrupt:
        traceback.print_exc()
        code = 130
    except BaseException:
        traceback.print_exc()
        code = 1
    try:
        threading._shutdown()  # type: ignore[attr-defined]  # the interpreter's own exit steps
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code & 0xFF)


# --- the test side ---------------------------------------------------------------------------

class _ForkServer:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.proc: subprocess.Popen[str] | None = None
        self.sock_path = ""
        self.tmp = ""  # the socket's directory, removed when the server stops
        self.env: dict[str, str] = {}
        self.why_not: str | None = None
        self.modules: set[str] = set()  # top-level names of what the server has imported
        self.origins: dict[str, str] = {}  # ... and where each lives

    def usable_for(self, env: Mapping[str, str], cwd: str) -> bool:
        if os.environ.get("KGPROBE_TEST_FORK_SERVER", "1").strip() in ("0", "no", "false"):
            _count("new process: KGPROBE_TEST_FORK_SERVER=0")
            return False
        with self.lock:
            if self.proc is None and self.why_not is None:
                self._start()
            if self.why_not is not None or self.proc is None or self.proc.poll() is not None:
                _count("new process: no fork server")
                return False
            mine, theirs = _startup_env(env), _startup_env(self.env)
            if mine != theirs:
                keys = sorted(k for k in mine.keys() | theirs.keys() if mine.get(k) != theirs.get(k))
                _count(f"new process: start-up environment differs ({', '.join(keys)})")
                return False
            extra = set(_path_entries(env, cwd)) - set(_path_entries(self.env, cwd))
            shadowed = sorted(n for e in extra for n in _top_level_names(e) & self.modules
                              if not _same_file(e, n, self.origins.get(n)))
            if shadowed:  # a module the server has imported would be another file in a new process
                _count(f"new process: PYTHONPATH shadows {', '.join(shadowed[:3])}")
                return False
            _count("forked")
            return True

    def _start(self) -> None:
        tmp = self.tmp = tempfile.mkdtemp(prefix="kgprobe-fork-")
        self.sock_path = str(Path(tmp) / "s")
        self.env = dict(BASE_ENV)
        code = f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); import _kgprobe_process as z; z._serve({self.sock_path!r}, {os.getpid()})"
        self.proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                     env=self.env, cwd=tmp, start_new_session=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        try:
            said = json.loads(line)
        except ValueError:
            said = {"ready": False, "why": f"no answer ({line!r})"}
        self.modules = set(said.get("modules") or ())
        self.origins: dict[str, str] = dict(said.get("origins") or {})
        if not said.get("ready"):
            self.why_not = str(said.get("why"))
            self.proc.kill()
            self.proc.wait()
            print(f"\n_kgprobe_process: fork server not used: {self.why_not}", file=sys.stderr)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if self.tmp:  # the socket's directory (each test process made one; none was removed)
            shutil.rmtree(self.tmp, ignore_errors=True)
            self.tmp = ""


_SERVER = _ForkServer()
atexit.register(lambda: _SERVER.stop())


def stop_fork_server() -> None:
    _SERVER.stop()


class KgprobeProcess:
    """A forked ``kgprobe`` command with the part of ``subprocess.Popen``'s interface the tests
    use (stdout and stderr captured, as ``stdout=PIPE, stderr=PIPE``): ``pid``, ``poll``,
    ``wait``, ``communicate``, ``kill``, ``returncode``."""

    def __init__(self, args: list[str], env: Mapping[str, str], cwd: str, input: str | bytes | None,
                 text: bool) -> None:
        self.args = [sys.executable, "-m", "kgprobe.cli", *args]
        self.text = text
        self.returncode: int | None = None
        self._out, self._err = tempfile.TemporaryFile(), tempfile.TemporaryFile()  # noqa: SIM115 (outlive __init__)
        inp = tempfile.TemporaryFile()  # noqa: SIM115 (closed below)
        if input is not None:
            inp.write(input.encode() if isinstance(input, str) else input)
            inp.seek(0)
        stdin_fd = inp.fileno() if input is not None else os.open(os.devnull, os.O_RDONLY)
        self._conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._conn.connect(_SERVER.sock_path)
            request = {"args": args, "env": dict(env), "cwd": cwd}
            socket.send_fds(self._conn, [json.dumps(request).encode()],
                            [stdin_fd, self._out.fileno(), self._err.fileno()])
            self._buf = b""
            first = self._line(None)
            assert first is not None
            self.pid = int(json.loads(first)["pid"])
        finally:
            if input is None:
                os.close(stdin_fd)
            inp.close()

    def _line(self, timeout: float | None) -> bytes | None:
        """The fork server's next line, or None when none came within ``timeout``."""
        import select

        deadline = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self._buf:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not select.select([self._conn], [], [], left)[0]:
                return None
            chunk = self._conn.recv(4096)
            if not chunk:
                raise RuntimeError("the fork server went away")
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return line

    def _status(self, timeout: float | None) -> bool:
        """Read the exit status the fork server reports; False if none came within ``timeout``."""
        if self.returncode is not None:
            return True
        line = self._line(timeout)
        if line is None:
            return False
        self.returncode = os.waitstatus_to_exitcode(int(json.loads(line)["status"]))
        self._conn.close()
        return True

    def poll(self) -> int | None:
        self._status(0.0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if not self._status(timeout):
            raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
        assert self.returncode is not None
        return self.returncode

    def communicate(self, timeout: float | None = None) -> tuple[Any, Any]:
        self.wait(timeout)
        out, err = self._read(self._out), self._read(self._err)
        return out, err

    def _read(self, f: Any) -> Any:
        f.seek(0)
        data = f.read()
        return _text(data) if self.text else data

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def __del__(self) -> None:
        for f in (self._out, self._err):
            f.close()


def start_kgprobe(args: Sequence[str], env: Mapping[str, str], *, cwd: str | Path | None = None,
                  text: bool = True) -> Any:
    """``subprocess.Popen([python, -m, kgprobe.cli, *args], env=env, cwd=cwd, stdout=PIPE,
    stderr=PIPE, text=text)``, through the fork server when it can."""
    argv = [str(a) for a in args]
    workdir = str(cwd) if cwd is not None else os.getcwd()
    if not _SERVER.usable_for(env, workdir):
        return subprocess.Popen([sys.executable, "-m", "kgprobe.cli", *argv], env=dict(env), cwd=workdir,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=text)
    return KgprobeProcess(argv, env, workdir, None, text)


def run_kgprobe(args: Sequence[str], env: Mapping[str, str], *, cwd: str | Path | None = None,
                input: str | None = None, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    """``subprocess.run([python, -m, kgprobe.cli, *args], env=env, cwd=cwd, input=input,
    capture_output=True, text=True, timeout=timeout)``, through the fork server when it can."""
    argv = [str(a) for a in args]
    workdir = str(cwd) if cwd is not None else os.getcwd()
    if not _SERVER.usable_for(env, workdir):
        return subprocess.run([sys.executable, "-m", "kgprobe.cli", *argv], env=dict(env), cwd=workdir,
                              input=input, capture_output=True, text=True, timeout=timeout)
    proc = KgprobeProcess(argv, env, workdir, input, True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:  # as subprocess.run: kill it, then raise
        proc.kill()
        raise
    assert proc.returncode is not None
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def _text(data: bytes) -> str:
    """What ``text=True`` decodes: the locale's encoding, universal newlines."""
    import io

    return io.TextIOWrapper(io.BytesIO(data), encoding=None, newline=None).read()
