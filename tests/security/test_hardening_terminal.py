"""Issue 38, third round of hardening: text from data never drives the terminal (item 2), a
config file cannot take the machine (items 3, 17), and an id with a trailing newline is no id
(item 10). Every test runs the real `kgprobe` command against the real test server; each fails
on the code before the change (docs/guarantees.md, "Terminals, config files and ids (third
round)")."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest
from cli_support import kgprobe
from probe_world import load

from kgprobe.graph import probe_runs as pr

#: What a hostile label carries: clear the screen and home the cursor, turn text red, hide
#: text, ring the bell, return the carriage, and a right-to-left override (Trojan Source).
CLEAR, RED, HIDE, BELL, CR, RLO = "\x1b[2J\x1b[H", "\x1b[31m", "\x1b[8m", "\x07", "\r", "\u202e"
RELATION_LABEL = f"capital{CLEAR}{RED}red"
PARIS_LABEL = f"Paris{RLO}sirap{BELL}"
FRANCE_LABEL = f"Fr{HIDE}ance{CR}X"
#: The same, as a person reads them on the screen (written out by hand).
SHOWN = ["capital\\x1b[2J\\x1b[H\\x1b[31mred", "Paris\\u202esirap\\x07", "Fr\\x1b[8mance\\x0dX"]

#: A colour escape Rich itself writes (select graphic rendition); every other ESC is data's.
_SGR = re.compile(r"\x1b\[[0-9;]*m")
#: What a terminal acts on: C0 but tab and newline, DEL, C1, bidi embeddings/overrides/isolates.
_ACTS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def assert_terminal_safe(text: str, *shown: str) -> None:
    acting = _ACTS.findall(_SGR.sub("", text))
    assert not acting, (acting, text[:2000])
    for s in shown:
        assert s in _SGR.sub("", text), (s, text[:3000])


@pytest.fixture()
def hostile_graph(graph: Any) -> Any:
    """probe_world's graph with escape codes in a relation's and two entities' labels, and
    P36 facts scored for model "hand"."""
    load(graph)
    graph.write("MATCH (r:Relation {pid: 'P36'}) SET r.label = $l", l=RELATION_LABEL)
    graph.write("MATCH (e:Entity {qid: 'Q90'}) SET e.label = $l", l=PARIS_LABEL)
    graph.write("MATCH (e:Entity {qid: 'Q142'}) SET e.label = $l", l=FRANCE_LABEL)
    sp = pr.ScoreProps("hand", "kmin_temp_sem_n5")
    pr.create_run(graph, "run-hand", {"model": "hand", "model_key": "hand", "measure_keys": [sp.measure_key],
                                      "threshold": 0.5, "status": "finished", "started": "t"})
    rows = [{"key": r["k"], "s": r["s"], "props": {sp.score: 0.0, sp.stale: None, sp.run: "run-hand"}}
            for r in graph.read("MATCH (s:Entity)-[f:FACT]->() WHERE f.pid = 'P36' "
                                "RETURN f.key AS k, s.qid AS s")]
    pr.write_scores(graph, "run-hand", rows, scored=len(rows), unscorable=0, now="t")
    return graph


@pytest.mark.parametrize("terminal", [False, True], ids=["pipe", "terminal"])
def test_labels_never_reach_the_terminal_as_escape_codes(hostile_graph: Any, kgprobe_env: dict[str, str],
                                                         terminal: bool) -> None:
    env = {**kgprobe_env, "COLUMNS": "200"}
    if terminal:  # Rich then writes as to a terminal: colours, its own escape codes
        env.update(FORCE_COLOR="1", TERM="xterm-256color")
    stats = kgprobe("stats", env=env)
    assert stats.returncode == 0, stats.stderr
    assert_terminal_safe(stats.stdout + stats.stderr, SHOWN[0])
    rep = kgprobe("report", "-m", "hand", env=env)
    assert rep.returncode == 0, rep.stderr
    assert_terminal_safe(rep.stdout + rep.stderr, SHOWN[0])
    unknown = kgprobe("unknown", "-m", "hand", "--threshold", "1", env=env)
    assert unknown.returncode == 0, unknown.stderr
    assert_terminal_safe(unknown.stdout + unknown.stderr, SHOWN[1], SHOWN[2])
    dis = kgprobe("distractors", "Q142", "P36", "-s", "random", "-n", "5", env=env)
    assert dis.returncode == 0, dis.stderr
    assert_terminal_safe(dis.stdout + dis.stderr, SHOWN[1])
    md = kgprobe("report", "-m", "hand", "--format", "md", env=env)  # not a terminal: a document
    assert md.returncode == 0 and RELATION_LABEL in md.stdout
    # JSON keeps the data exactly
    doc = json.loads(kgprobe("unknown", "-m", "hand", "--threshold", "1", "--json", env=env).stdout)
    assert {PARIS_LABEL, FRANCE_LABEL} <= {v for row in doc for v in _strings(row)}


def _strings(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return [value] if isinstance(value, str) else []


def test_an_error_line_from_data_is_shown_not_obeyed(graph: Any, kgprobe_env: dict[str, str],
                                                     tmp_path: Path) -> None:
    """A path (an argument) that echoes into the one-line error keeps its escapes visible."""
    missing = tmp_path / f"no{CLEAR}such{RLO}.jsonl"
    r = kgprobe("ingest", str(missing), env=kgprobe_env)
    assert r.returncode == 4 and "Traceback" not in r.stderr
    assert_terminal_safe(r.stderr, "no\\x1b[2J\\x1b[Hsuch\\u202e.jsonl: no such file")


@pytest.mark.parametrize("terminal", [False, True], ids=["plain", "live"])
def test_progress_shows_escapes_in_its_text(terminal: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Progress text can hold data (a file name, a relation): plain lines and the live bar show
    its escapes."""
    import io

    from kgprobe import progress as P

    if terminal:
        monkeypatch.setenv("FORCE_COLOR", "1")
    out = io.StringIO()
    with P.Progress(f"reading e{RED}{RLO}.jsonl", 3, "facts", stream=out) as bar:
        assert bar.mode == ("live" if terminal else "plain")
        bar.advance(3)
    text = out.getvalue()
    if terminal:  # the live bar's own returns and cursor codes (hide, erase, move), not data's
        text = re.sub(r"\r|\x1b\[\??[0-9;]*[A-Za-z]", "", text)
    assert_terminal_safe(text, "reading e\\x1b[31m\\u202e.jsonl")


# --- config files (items 3 and 17) ---------------------------------------------------------------
#: 346 bytes of YAML whose last key expands to 9**9 = 387,420,489 strings ("billion laughs").
LAUGHS = "a: &a [" + ",".join(['"lol"'] * 9) + "]\n" + "".join(
    f"{k}: &{k} [" + ",".join([f"*{p}"] * 9) + "]\n" for p, k in zip("abcdefg", "bcdefgh", strict=True)
) + "relation: [" + ",".join(["*h"] * 9) + "]\n"


def one_line_error(r: Any, code: int, *texts: str) -> None:
    assert r.returncode == code, (r.returncode, r.stdout[-2000:], r.stderr[-2000:])
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and len(lines[0]) < 400, r.stderr[:2000]
    for text in texts:
        assert text in lines[0], (text, lines[0])


def test_a_yaml_bomb_is_refused_at_once(tmp_path: Path, kgprobe_env: dict[str, str]) -> None:
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(LAUGHS)
    assert len(LAUGHS) < 420
    start = time.monotonic()
    r = kgprobe("probe", "-m", "x", "--config", str(bomb), env=kgprobe_env, timeout=60)
    assert time.monotonic() - start < 30
    one_line_error(r, 2, str(bomb), "10,000 values")
    # many aliases, each cheap: refused by their count before anything is expanded
    aliases = tmp_path / "aliases.yaml"
    aliases.write_text("x: &x P36\nrelation: [" + ", ".join(["*x"] * 101) + "]\n")
    one_line_error(kgprobe("probe", "-m", "x", "--config", str(aliases), env=kgprobe_env), 2,
                   "more than 100 YAML aliases")
    big = tmp_path / "big.yaml"
    big.write_text("seed: 1\n" + "#" * (1 << 20) + "\n")
    one_line_error(kgprobe("probe", "-m", "x", "--config", str(big), env=kgprobe_env), 2, "larger than 1 MiB")
    long_value = tmp_path / "long.yaml"
    long_value.write_text("model: " + "m" * 100_001 + "\n")
    one_line_error(kgprobe("probe", "--config", str(long_value), env=kgprobe_env), 2, "100,001 characters")
    # a few aliases stay usable
    ok = tmp_path / "ok.yaml"
    ok.write_text("x: &x P36\nrelation: [*x]\n")
    r = kgprobe("probe", "-m", "x", "--config", str(ok), env=kgprobe_env)
    assert "unknown key" in r.stderr and "'x'" in r.stderr  # parsed; then x is an unknown option


@pytest.mark.parametrize("suffix", [".yaml", ".toml"])
def test_a_config_file_that_is_not_utf8_is_one_line(tmp_path: Path, kgprobe_env: dict[str, str],
                                                     suffix: str) -> None:
    bad = tmp_path / f"latin1{suffix}"
    bad.write_bytes('model = "caf\xe9"\n'.encode("latin-1") if suffix == ".toml"
                    else "model: caf\xe9\n".encode("latin-1"))
    one_line_error(kgprobe("probe", "--config", str(bad), env=kgprobe_env), 2, str(bad), "not UTF-8")


# --- ids (item 10) -------------------------------------------------------------------------------
def _claim(pid: str, obj: str, sid: str) -> dict[str, Any]:
    return {"mainsnak": {"snaktype": "value", "property": pid, "datatype": "wikibase-item",
                         "datavalue": {"type": "wikibase-entityid", "value": {"entity-type": "item", "id": obj}}},
            "type": "statement", "rank": "normal", "id": sid}


def _item(qid: str, claims: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"type": "item", "id": qid, "labels": {"en": {"language": "en", "value": f"label {qid.strip()}"}},
            "claims": claims or {}}


def test_ids_with_a_trailing_newline_are_refused(graph: Any, kgprobe_env: dict[str, str], tmp_path: Path) -> None:
    from kgprobe.records import is_pid, is_qid

    assert not is_qid("Q42\n") and not is_pid("P9911\n") and is_qid("Q42") and is_pid("P9911")
    items = [
        _item("Q2"),
        _item("Q42\n"),
        _item("Q3", {"P9911\n": [_claim("P9911\n", "Q2", "Q3$B")]}),
        _item("Q4", {"P17": [_claim("P17", "Q2", "Q4$C\n")]}),
        _item("Q5", {"P17": [_claim("P17", "Q2\n", "Q5$D")]}),
        _item("Q6", {"P17": [_claim("P17", "Q2", "Q6$E")]}),
    ]
    src = tmp_path / "ids.jsonl"
    src.write_text("".join(json.dumps(i) + "\n" for i in items))
    r = kgprobe("ingest", str(src), "--json", env=kgprobe_env)
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    assert summary["errors"] == 4, summary
    qids = sorted(row["q"] for row in graph.read("MATCH (e:Entity) RETURN e.qid AS q"))
    assert qids == ["Q2", "Q4", "Q5", "Q6"]  # Q3 as a whole: its claims name a bad property
    facts = graph.read("MATCH ()-[f:FACT]->() RETURN f.key AS k, f.pid AS p")
    assert [(f["k"], f["p"]) for f in facts] == [("Q6$E", "P17")]
    # on the command line too: a relation with a newline is one line and exit 2
    r = kgprobe("unknown", "-m", "hand", "--relation", "P17\nP36", env=kgprobe_env)
    assert r.returncode == 2 and "Traceback" not in r.stderr
