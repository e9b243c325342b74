"""Reports: numbers against a hand-computed case, the written files, and the HTML page rendered
in headless Chromium (where Chromium is installed)."""

from __future__ import annotations

import csv
import json
import os
import shutil
import struct
import subprocess
import zlib
from pathlib import Path
from typing import Any

import pytest
from distractor_world import BACH, BIDEN, BUSH, CLINTON, CURIE, FRANCE, GERMANY, OBAMA, TRUMP, USA
from probe_world import load

from kgprobe.graph import probe_runs as pr
from kgprobe.reporting import (
    Report,
    bootstrap_ci,
    bucket_of,
    build_report,
    popularity_edges,
    render_html,
    write_report,
)

SP = pr.ScoreProps("hand", "kmin_temp_sem_n5")
OTHER = pr.ScoreProps("other", "kmin_temp_sem_n5")


def _key(graph: Any, subject: str, pid: str, obj: str) -> str:
    rows = graph.read(
        "MATCH (s:Entity {qid: $s})-[f:FACT]->(o:Entity {qid: $o}) WHERE f.pid = $p RETURN f.key AS k",
        s=subject, p=pid, o=obj,
    )
    return str(rows[0]["k"])


# (subject, pid, object, score, stale, popularity of the subject as in probe_world)
HAND = [
    (USA, "P35", BIDEN, 0.5, 1.0, 9.0),
    (USA, "P36", "Q61", 1.0, None, 9.0),
    (FRANCE, "P36", "Q90", 0.0, None, 8.0),
    (GERMANY, "P36", "Q64", 1.0, None, 7.0),
    (OBAMA, "P27", USA, 1.0, None, 6.0),
    (TRUMP, "P27", USA, 0.25, None, 5.5),
    (BIDEN, "P27", USA, 0.0, None, 5.0),
    (BUSH, "P27", USA, 0.75, None, 4.0),
    (CLINTON, "P27", USA, 0.5, None, 3.0),
    (CURIE, "P27", FRANCE, 0.0, None, 1.5),
    (BACH, "P27", GERMANY, 1.0, None, 1.0),
]


@pytest.fixture()
def hand_graph(graph: Any) -> Any:
    load(graph)
    for sp, flip in ((SP, False), (OTHER, True)):
        run_id = f"run-{sp.model_key}"
        pr.create_run(graph, run_id, {"model": sp.model_key, "model_key": sp.model_key,
                                      "measure_keys": [sp.measure_key], "threshold": 0.5,
                                      "status": "finished", "started": "t"})
        rows = [
            {"key": _key(graph, s, p, o),
             "props": {sp.score: (1.0 - v) if flip else v, sp.stale: st, sp.run: run_id}}
            for s, p, o, v, st, _ in HAND
        ]
        pr.write_scores(graph, run_id, rows, scored=len(rows), unscorable=0, now="t")
    return graph


def test_report_numbers_by_hand(hand_graph: Any) -> None:
    rep = build_report(hand_graph, "hand", seed=0)
    a = rep.primary
    by = {r.pid: r for r in a.relations}
    assert [r.pid for r in a.relations] == ["P27", "P35", "P36"]
    # P27: scores 1, .25, 0, .75, .5, 0, 1 -> mean 3.5/7 = .5; known (>= .5): 1, .75, .5, 1 -> 4/7
    assert by["P27"].facts == 7 and by["P27"].mean == pytest.approx(0.5)
    assert by["P27"].known == 4 and by["P27"].known_share == pytest.approx(4 / 7)
    # P36: 1, 0, 1 -> mean 2/3, known 2/3
    assert by["P36"].mean == pytest.approx(2 / 3) and by["P36"].known_share == pytest.approx(2 / 3)
    # P35: one fact, score .5 (known at the threshold), stale 1.0; CI of one value is that value
    assert (by["P35"].facts, by["P35"].known, by["P35"].history_facts) == (1, 1, 1)
    assert by["P35"].staleness == 1.0 and (by["P35"].ci_low, by["P35"].ci_high) == (0.5, 0.5)
    assert by["P36"].history_facts == 0 and by["P36"].staleness is None
    assert a.overall.facts == 11 and a.overall.mean == pytest.approx(6.0 / 11)
    assert a.overall.known == 7 and a.overall.history_facts == 1
    assert a.overall.ci_low <= a.overall.mean <= a.overall.ci_high
    # the server's own per-relation aggregates agree
    agg = {r["pid"]: r for r in pr.relation_aggregates(hand_graph, SP, 0.5)}
    assert {p: (r["facts"], r["known"]) for p, r in agg.items()} == {
        p: (s.facts, s.known) for p, s in by.items()
    }
    assert all(agg[p]["mean"] == pytest.approx(by[p].mean) for p in by)

    # popularity tertiles over the 11 subjects' popularity (numpy linear quantiles)
    pops = sorted(h[5] for h in HAND)  # 1, 1.5, 3, 4, 5, 5.5, 6, 7, 8, 9, 9
    q1 = pops[3] + (pops[4] - pops[3]) * (10 / 3 - 3)  # position (n-1)/3 = 3.33
    q2 = pops[6] + (pops[7] - pops[6]) * (20 / 3 - 6)  # position 2(n-1)/3 = 6.67
    assert rep.popularity_edges == pytest.approx([q1, q2])
    low = [h[3] for h in HAND if h[5] < q1]
    high = [h[3] for h in HAND if h[5] >= q2]
    assert a.overall.by_popularity["low"].facts == len(low) == 4
    assert a.overall.by_popularity["low"].mean == pytest.approx(sum(low) / len(low))
    assert a.overall.by_popularity["high"].mean == pytest.approx(sum(high) / len(high))

    # --vs: the other model's scores are 1 - these
    rep2 = build_report(hand_graph, "hand", vs="other", seed=0)
    assert rep2.other is not None and rep2.other.overall.mean == pytest.approx(5.0 / 11)
    assert rep2.comparison == {"both_probed": 11, "a_known": 7, "b_known": 6, "both_known": 2}


def test_bootstrap_and_buckets_by_hand() -> None:
    assert bootstrap_ci([0.3] * 5, seed=1) == (pytest.approx(0.3), pytest.approx(0.3))
    # two values {0, 1}: resample means are 0, .5, 1 with probability 1/4, 1/2, 1/4, so the
    # 2.5% and 97.5% quantiles of 1000 resamples are 0 and 1
    assert bootstrap_ci([0.0, 1.0], seed=0) == (0.0, 1.0)
    assert bootstrap_ci([0.0, 1.0, 0.5], seed=7) == bootstrap_ci([0.0, 1.0, 0.5], seed=7)
    assert popularity_edges([1.0, 2.0]) is None
    edges = popularity_edges([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0])  # 3.0 and 5.0
    assert edges == pytest.approx([3.0, 5.0])
    assert [bucket_of(v, edges) for v in (2.9, 3.0, 4.9, 5.0)] == ["low", "mid", "mid", "high"]
    assert bucket_of(None, edges) is None


def test_report_files(hand_graph: Any, tmp_path: Path) -> None:
    rep = build_report(hand_graph, "hand", vs="other", seed=0)
    paths = write_report(rep, tmp_path)
    data = json.loads(paths["json"].read_text())
    assert data["primary"]["overall"]["facts"] == 11
    rows = list(csv.DictReader(paths["csv"].open()))
    p27 = next(r for r in rows if r["model"] == "hand" and r["pid"] == "P27")
    assert float(p27["mean"]) == pytest.approx(0.5) and p27["known"] == "4"
    assert {r["model"] for r in rows} == {"hand", "other"}
    pop = list(csv.DictReader(paths["popularity_csv"].open()))
    assert {r["bucket"] for r in pop} == {"low", "mid", "high"}
    page = paths["html"].read_text()
    assert page.count("<svg") == 4 and "<script" not in page
    assert "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert "https://" not in page


def _png_pixels(png: bytes) -> tuple[int, int, bytes]:
    """Width, height and the decompressed scanlines of a PNG (enough to tell blank from drawn)."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    pos, width, height, idat = 8, 0, 0, b""
    while pos < len(png):
        (length,) = struct.unpack(">I", png[pos : pos + 4])
        kind = png[pos + 4 : pos + 8]
        body = png[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            width, height = struct.unpack(">II", body[:8])
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    return width, height, zlib.decompress(idat)


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return "/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else None


def test_html_renders_in_headless_chromium(hand_graph: Any, tmp_path: Path) -> None:
    browser = _chromium()
    if browser is None:
        pytest.skip("Chromium is not installed (make chromium installs it where apt-get is available)")
    rep: Report = build_report(hand_graph, "hand", vs="other", seed=0)
    page = tmp_path / "report.html"
    page.write_text(render_html(rep), encoding="utf-8")
    shot = tmp_path / "report.png"
    profile = tmp_path / "profile"
    cmd = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
           "--no-first-run", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
           f"--user-data-dir={profile}", "--window-size=1100,1600", f"--screenshot={shot}",
           page.as_uri()]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    width, height, pixels = _png_pixels(shot.read_bytes())
    assert (width, height) == (1100, 1600)
    # a drawn page: many distinct byte values (text, two bar colours), not a blank canvas
    assert len(set(pixels)) > 50
    out = os.environ.get("KGPROBE_SCREENSHOT_DIR")
    if out:  # keep the picture for a human to look at
        shutil.copy(shot, Path(out) / "report.png")
