"""Issue 39 item 1 for graph servers: the managed ArcadeDB is the built-in entry of one registry
(`kgprobe.graph.servers.GRAPH_SERVERS`, entry-point group `kgprobe.graph_servers`), selected by
`KGPROBE_SERVER` / key `server`; an unknown name is one line, exit 2; and a server from outside
the package (examples/kgprobe-ownarcade, pip-installed into a temporary folder) is listed by
`kgprobe plugins` and is the one `kgprobe db start` starts, answering Cypher over Bolt."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from cli_support import clean_env
from neo4j import GraphDatabase
from plugin_support import install_example, with_path

from kgprobe.config import Settings
from kgprobe.graph.server import ManagedServer
from kgprobe.graph.servers import GRAPH_SERVERS, GraphServer, graph_server

KGPROBE = str(Path(sys.executable).parent / "kgprobe")
#: what an installed entry point's origin reads as (kgprobe.plugins.load_plugins)
OWN_ORIGIN = ("entry point own-arcadedb = kgprobe_ownarcade:OwnArcade of kgprobe-ownarcade 0.1.0 "
              "(kgprobe.graph_servers)")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return install_example(tmp_path_factory, "kgprobe-ownarcade")


def _env(home: Path, **extra: str) -> dict[str, str]:
    """An environment with no server configured but ``home`` (and ``extra``)."""
    env = clean_env()
    return {**env, "KGPROBE_HOME": str(home), "KGPROBE_CONFIG": str(home.parent / "no-config.json"),
            "COLUMNS": "200", **extra}


def _run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([KGPROBE, *args], capture_output=True, text=True, env=env, timeout=300)


def test_the_builtin_server_is_the_managed_arcadedb(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`arcadedb` is found by name, is ManagedServer, came with kgprobe, and is what the
    default settings select (for their home)."""
    for key in ("KGPROBE_SERVER", "NEO4J_URI"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("KGPROBE_CONFIG", str(tmp_path / "no-config.json"))
    monkeypatch.setenv("KGPROBE_HOME", str(tmp_path / "home"))
    assert GRAPH_SERVERS.lookup("arcadedb") is ManagedServer
    assert issubclass(ManagedServer, GraphServer) and GRAPH_SERVERS.origin("arcadedb") is None
    assert [(e.kind, e.name, e.origin) for e in GRAPH_SERVERS.entries()][:1] == [
        ("graph server", "arcadedb", "built-in")]
    settings = Settings.load()
    assert settings.server == "arcadedb" and settings.server_from is None
    server = graph_server(settings)
    assert type(server) is ManagedServer and server.home == tmp_path / "home"
    assert server.credentials_kept() == (
        f'key "user" of {tmp_path / "home" / "server.json"} (mode 0600)',
        f'key "user_password" of {tmp_path / "home" / "server.json"} (mode 0600)')


def test_an_unknown_server_is_one_line_exit_2(tmp_path: Path) -> None:
    """From the environment and from the config file: one line that names the choices and
    where the name came from, exit 2, and no server started (its home is not even made)."""
    home = tmp_path / "home"
    for cmd in (("db", "status"), ("db", "start"), ("stats",)):
        r = _run(_env(home, KGPROBE_SERVER="nosuch"), *cmd)
        assert (r.returncode, r.stdout) == (2, ""), (cmd, r)
        assert r.stderr == ("error: unknown graph server 'nosuch'; choose from: arcadedb "
                            "(set by environment variable KGPROBE_SERVER)\n"), (cmd, r.stderr)
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"server": "neo5"}), encoding="utf-8")
    config.chmod(0o600)
    r = _run({**_env(home), "KGPROBE_CONFIG": str(config)}, "db", "status")
    assert (r.returncode, r.stderr) == (2, "error: unknown graph server 'neo5'; choose from: "
                                           f"arcadedb (set by key 'server' of {config})\n"), r
    assert not home.exists()


def test_an_installed_server_is_listed_and_is_the_one_started(site: Path, tmp_path: Path) -> None:
    """examples/kgprobe-ownarcade installed (an entry point of `kgprobe.graph_servers`):
    `kgprobe plugins` lists it with its origin; with KGPROBE_SERVER=own-arcadedb, `db start`
    starts it (in its own home, KGPROBE_HOME/own-arcadedb), `kgprobe cypher` reaches it, it
    answers a query over Bolt with the credentials it keeps, and `db stop` stops it."""
    home = tmp_path / "home"
    listed = json.loads(_run(with_path(_env(home), site), "plugins", "--json").stdout)["plugins"]
    assert [(p["name"], p["origin"]) for p in listed if p["kind"] == "graph server"] == [
        ("arcadedb", "built-in"), ("own-arcadedb", OWN_ORIGIN)]

    env = with_path(_env(home, KGPROBE_SERVER="own-arcadedb"), site)
    own = home / "own-arcadedb"
    try:
        started = _run(env, "db", "start", "--json")
        assert started.returncode == 0, started.stderr
        info = json.loads(started.stdout)
        assert info["running"] is True and info["home"] == str(own)
        status = json.loads(_run(env, "db", "status", "--json").stdout)
        assert status["home"] == str(own) and "ArcadeDB" in status["server"], status
        assert status["user"] == f'key "user" of {own / "server.json"} (mode 0600)'
        rows = _run(env, "cypher", "RETURN 40 + 2 AS n", "--json")
        assert rows.returncode == 0 and json.loads(rows.stdout) == [{"n": 42}], rows

        state = json.loads((own / "server.json").read_text(encoding="utf-8"))
        assert info["uri"] == f"bolt://127.0.0.1:{state['bolt_port']}"
        with GraphDatabase.driver(info["uri"], auth=(state["user"], state["user_password"])) as driver, \
                driver.session(database="kgprobe") as session:
            assert session.run("RETURN 6 * 7 AS n").single()["n"] == 42
        assert not (home / "server.json").exists()  # the built-in's home was never used
    finally:
        stopped = _run(env, "db", "stop", "--json")
    assert stopped.returncode == 0 and json.loads(stopped.stdout) == {"stopped": True}, stopped


def test_the_readme_example_is_the_package() -> None:
    """The README's worked example shows the example package's module and pyproject.toml as
    they are."""
    repo = Path(__file__).resolve().parents[2]
    part = (repo / "README.md").read_text(encoding="utf-8").split(
        "### A managed graph server of your own", 1)[1].split("\n### ", 1)[0]
    example = repo / "examples" / "kgprobe-ownarcade"
    for path in (example / "kgprobe_ownarcade" / "__init__.py", example / "pyproject.toml"):
        assert path.read_text(encoding="utf-8") in part, path


#: a graph server that is not ArcadeDB, from a module named by --plugin (it never starts)
ELSEWHERE = '''
from kgprobe.graph.servers import GRAPH_SERVERS, GraphServer


@GRAPH_SERVERS.register
class Elsewhere(GraphServer):
    """A server that is not ArcadeDB."""

    name = "elsewhere"
    summary = "a graph server that is not ArcadeDB"

    def start(self, timeout=90.0):
        raise AssertionError("started")

    stop = info = wipe = credentials = credentials_kept = start
'''


def test_bulk_into_a_server_that_is_not_arcadedb_is_one_line(tmp_path: Path) -> None:
    """`ingest --bulk` loads the managed ArcadeDB by its own GraphImporter: with KGPROBE_SERVER
    naming another server (here from a `--plugin` module) it is refused in one line, exit 2,
    before any file is read or written and before any server is started."""
    (tmp_path / "plug").mkdir()
    (tmp_path / "plug" / "kgprobe_elsewhere.py").write_text(ELSEWHERE, encoding="utf-8")
    repo = Path(__file__).resolve().parents[2]
    env = with_path(_env(tmp_path / "home", KGPROBE_SERVER="elsewhere"), tmp_path / "plug")
    source = repo / "tests" / "fixtures" / "wikidata" / "entity-json" / "Q8413.json"
    r = _run(env, "--plugin", "kgprobe_elsewhere", "ingest", str(source), "--bulk", str(tmp_path / "bulk"))
    assert (r.returncode, r.stdout) == (2, ""), r
    assert r.stderr == ("error: --bulk loads the managed ArcadeDB only; the managed graph server is "
                        "'elsewhere' (set by environment variable KGPROBE_SERVER): unset it, or "
                        "ingest without --bulk\n"), r.stderr
    assert not (tmp_path / "bulk").exists() and not (tmp_path / "home").exists()
