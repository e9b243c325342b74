"""Reports: numbers against a hand-computed case, the written files, and the HTML page rendered
in headless Chromium (where Chromium is installed)."""

from __future__ import annotations

import csv
import json
import math
import os
import re
import shutil
import struct
import subprocess
import zlib
from pathlib import Path
from typing import Any

import pytest
from report_worlds import HAND, SP, _key, hand_graph_fixture  # noqa: F401  (the fixture hand_graph)

from kgprobe.graph import probe_runs as pr
from kgprobe.reports.build import (
    bucket_of,
    build_report,
    interval,
    measure_label,
    popularity_edges,
    relation_stats,
    reliability_bins,
)
from kgprobe.reports.data import Report
from kgprobe.reports.figures import reliability_svg
from kgprobe.reports.html import render_html
from kgprobe.reports.text import ci as _ci
from kgprobe.reports.write import write_report
from kgprobe.stats import MIN_N_CI, bootstrap_ci


def test_report_numbers_by_hand(hand_graph: Any) -> None:
    rep = build_report(hand_graph, "hand", seed=0)
    a = rep.primary
    by = {r.pid: r for r in a.relations}
    # sorted by mean, best first; ties (P27 and P35 at .5) by PID
    assert [r.pid for r in a.relations] == ["P36", "P27", "P35"]
    assert a.groups == a.relations and rep.by == "relation"
    # P27: scores 1, .25, 0, .75, .5, 0, 1 -> mean 3.5/7 = .5; known (>= .5): 1, .75, .5, 1 -> 4/7
    assert by["P27"].facts == 7 and by["P27"].mean == pytest.approx(0.5)
    assert by["P27"].known == 4 and by["P27"].known_share == pytest.approx(4 / 7)
    # P36: 1, 0, 1 -> mean 2/3, known 2/3
    assert by["P36"].mean == pytest.approx(2 / 3) and by["P36"].known_share == pytest.approx(2 / 3)
    # P35: one fact, score .5 (known at the threshold), stale 1.0 on its one fact with a history
    assert (by["P35"].facts, by["P35"].known, by["P35"].history_facts) == (1, 1, 1)
    assert by["P35"].staleness == 1.0 and by["P35"].stale_ci_low is None
    assert by["P36"].history_facts == 0 and by["P36"].staleness is None
    # n < 10: no interval, and the text says so
    assert MIN_N_CI == 10
    for pid in ("P27", "P35", "P36"):
        assert (by[pid].ci_low, by[pid].ci_high) == (None, None)
    assert _ci(by["P27"]) == "0.500 (n too small)"
    # n = 11 overall: an interval. Independent check: a percentile bootstrap of a mean is close
    # to the normal interval mean ± 1.96·s/√n (s with ddof 0, as the bootstrap resamples).
    scores = [h[3] for h in HAND]
    m = sum(scores) / 11
    sd = math.sqrt(sum((x - m) ** 2 for x in scores) / 11)
    assert a.overall.facts == 11 and a.overall.mean == pytest.approx(6.0 / 11)
    assert a.overall.ci_low == pytest.approx(m - 1.96 * sd / math.sqrt(11), abs=0.06)
    assert a.overall.ci_high == pytest.approx(m + 1.96 * sd / math.sqrt(11), abs=0.06)
    assert a.overall.known == 7 and a.overall.history_facts == 1
    # the server's own per-relation aggregates agree
    agg = {r["pid"]: r for r in pr.relation_aggregates(hand_graph, SP, 0.5)}
    assert {p: (r["facts"], r["known"]) for p, r in agg.items()} == {
        p: (s.facts, s.known) for p, s in by.items()
    }
    assert all(agg[p]["mean"] == pytest.approx(by[p].mean) for p in by)

    # popularity tertiles over ALL 11 probed facts with a popularity (numpy linear quantiles)
    pops = sorted(h[5] for h in HAND)  # 1, 1.5, 3, 4, 5, 5.5, 6, 7, 8, 9, 9
    q1 = pops[3] + (pops[4] - pops[3]) * (10 / 3 - 3)  # position (n-1)/3 = 3.33
    q2 = pops[6] + (pops[7] - pops[6]) * (20 / 3 - 6)  # position 2(n-1)/3 = 6.67
    assert rep.popularity_edges == pytest.approx([q1, q2]) and rep.popularity_facts == 11
    low = [h[3] for h in HAND if h[5] < q1]
    high = [h[3] for h in HAND if h[5] >= q2]
    assert a.overall.by_popularity["low"].facts == len(low) == 4
    assert a.overall.by_popularity["low"].mean == pytest.approx(sum(low) / len(low))
    assert a.overall.by_popularity["high"].mean == pytest.approx(sum(high) / len(high))

    # --vs: the other model's scores are 1 - these
    rep2 = build_report(hand_graph, "hand", vs="other", seed=0)
    assert rep2.other is not None and rep2.other.overall.mean == pytest.approx(5.0 / 11)
    assert rep2.comparison == {"both_probed": 11, "a_known": 7, "b_known": 6, "both_known": 2}

    # --by popularity: the same buckets as groups, labelled with their edges
    rp = build_report(hand_graph, "hand", by="popularity", seed=0)
    gp = {g.key: g for g in rp.primary.groups}
    assert set(gp) == {"low", "mid", "high"} and gp["low"].facts == 4
    assert gp["low"].label == f"low (< {q1:.2f})"


def test_by_type_closes_p31_over_p279(hand_graph: Any) -> None:
    """Countries are political territorial entities are administrative territorial entities
    (a P279 chain of two), humans are persons; every class on the chain gets the facts."""
    from kgprobe.graph.ingest import ingest
    from kgprobe.records import EntityRecord

    ingest(hand_graph, [
        EntityRecord("Q6256", "country", superclasses=["Q1048835"]),
        EntityRecord("Q1048835", "political territorial entity", superclasses=["Q56061"]),
        EntityRecord("Q56061", "administrative territorial entity"),
        EntityRecord("Q5", "human", superclasses=["Q215627"]),
        EntityRecord("Q215627", "person"),
    ])
    rep = build_report(hand_graph, "hand", by="type", seed=0)
    g = {x.key: x for x in rep.primary.groups}
    # subjects: USA (P35 .5, P36 1), France 0, Germany 1 -> countries: 4 facts, mean 2.5/4
    for c in ("Q6256", "Q1048835", "Q56061"):
        assert g[c].facts == 4 and g[c].mean == pytest.approx(0.625)
    # the seven P27 subjects are humans: mean 3.5/7
    for c in ("Q5", "Q215627"):
        assert g[c].facts == 7 and g[c].mean == pytest.approx(0.5)
    assert g["Q56061"].label == "administrative territorial entity"
    assert [x.key for x in rep.primary.groups][:3] == ["Q1048835", "Q56061", "Q6256"]  # best first
    # objects: P27 objects are countries (7 facts), P36 objects cities (3), P35's Biden a human
    ro = build_report(hand_graph, "hand", by="type", type_of="object", seed=0)
    go = {x.key: (x.facts, x.mean) for x in ro.primary.groups}
    assert go["Q56061"] == (7, pytest.approx(0.5))
    assert go["Q515"] == (3, pytest.approx(2 / 3))
    assert go["Q215627"] == (1, pytest.approx(0.5))


def test_bootstrap_and_buckets_by_hand() -> None:
    assert bootstrap_ci([0.3] * 5, seed=1) == (pytest.approx(0.3), pytest.approx(0.3))
    # two values {0, 1}: resample means are 0, .5, 1 with probability 1/4, 1/2, 1/4, so the
    # 2.5% and 97.5% quantiles of 1000 resamples are 0 and 1
    assert bootstrap_ci([0.0, 1.0], seed=0) == (0.0, 1.0)
    assert bootstrap_ci([0.0, 1.0, 0.5], seed=7) == bootstrap_ci([0.0, 1.0, 0.5], seed=7)
    # 60 of 200 known: the normal interval .3 ± 1.96·sqrt(.3·.7/200) = [.2365, .3635]
    lo, hi = bootstrap_ci([1.0] * 60 + [0.0] * 140, seed=3, n_boot=4000)
    assert lo == pytest.approx(0.3 - 0.0635, abs=0.01) and hi == pytest.approx(0.3 + 0.0635, abs=0.01)
    assert interval([1.0, 0.0] * 4, seed=0) == (None, None)  # n = 8 < 10
    assert interval([1.0, 0.0] * 5, seed=0)[0] is not None  # n = 10
    assert popularity_edges([1.0, 2.0]) is None
    edges = popularity_edges([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0])  # 3.0 and 5.0
    assert edges == pytest.approx([3.0, 5.0])
    assert [bucket_of(v, edges) for v in (2.9, 3.0, 4.9, 5.0)] == ["low", "mid", "mid", "high"]
    assert bucket_of(None, edges) is None


def test_measure_names_and_reliability_bins() -> None:
    assert measure_label("kmin_temp_sem_n5") == "Min@5, temp+sem distractors"
    assert measure_label("kavg_random_n10") == "Avg@10, random distractors"
    assert measure_label("something_else") == "something_else"
    # (confidence, correct): bin [0, .1): two facts, one right; bin [.9, 1]: 1.0 lands in the last
    pairs = [(0.05, True), (0.08, False), (0.95, True), (1.0, True), (0.5, False)]
    bins = reliability_bins(pairs, bins=10)
    assert [(b["low"], b["n"]) for b in bins] == [(0.0, 2), (0.5, 1), (0.9, 2)]
    assert bins[0]["accuracy"] == 0.5 and bins[0]["confidence"] == pytest.approx(0.065)
    assert bins[2]["accuracy"] == 1.0 and bins[2]["confidence"] == pytest.approx(0.975)
    assert reliability_svg(pairs).count("<svg") == 1


def test_report_files(hand_graph: Any, tmp_path: Path) -> None:
    rep = build_report(hand_graph, "hand", vs="other", seed=0)
    paths = write_report(rep, tmp_path)
    data = json.loads(paths["json"].read_text())
    assert data["primary"]["overall"]["facts"] == 11 and "facts" not in data["primary"]
    rows = list(csv.DictReader(paths["csv"].open()))
    p27 = next(r for r in rows if r["model"] == "hand" and r["key"] == "P27")
    assert float(p27["mean"]) == pytest.approx(0.5) and p27["known"] == "4" and p27["ci_low"] == ""
    assert {r["model"] for r in rows} == {"hand", "other"}
    pop = list(csv.DictReader(paths["popularity_csv"].open()))
    assert {r["bucket"] for r in pop} == {"low", "mid", "high"}
    page = paths["html"].read_text()
    # forest, histogram, popularity, staleness, vs per fact, vs per relation
    assert page.count("<svg") == 6 and "<script" not in page
    assert "No BELIEF scores" in page
    # self-contained: nothing fetched (XML namespace names are not fetched)
    no_ns = re.sub(r'xmlns(:\w+)?="[^"]*"', "", page)
    assert "http://" not in no_ns and "https://" not in no_ns and "<link" not in page
    assert "Min@5, temp+sem distractors" in page and "kmin_temp_sem_n5" in page  # name + property


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


def _run_chromium(browser: str, profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
           "--no-first-run", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
           f"--user-data-dir={profile}", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=180)


def test_html_renders_in_headless_chromium(hand_graph: Any, tmp_path: Path) -> None:
    """What Chromium renders: the DOM after layout holds the provenance block and the groups
    table sorted best first, with n and the refused interval; the screenshot is a drawn page."""
    browser = _chromium()
    if browser is None:
        pytest.skip("Chromium is not installed (make chromium installs it where apt-get is available)")
    rep: Report = build_report(hand_graph, "hand", vs="other", seed=0)
    page = tmp_path / "report.html"
    page.write_text(render_html(rep), encoding="utf-8")
    dom = _run_chromium(browser, tmp_path / "profile-dom", "--dump-dom", page.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    text = dom.stdout
    # provenance: the runs' ids and the report's kgprobe version, as rendered
    prov = text[text.index('id="provenance"'):]
    assert "run run-hand" in prov and "run run-other" in prov and "report by kgprobe" in prov
    # the groups table: first row is the best relation (P36 capital, 2 of 3 known), n shown,
    # no interval at n = 3
    body = text[text.index('<table id="groups"'):]
    first_row = re.search(r"<tbody><tr[^>]*>(.*?)</tr>", body, re.S)
    assert first_row is not None
    cells = re.findall(r"<td[^>]*>(.*?)</td>", first_row.group(1))
    # two models: a row per model under the relation's label, the primary first
    assert cells[:5] == ["P36 capital", "hand", "3", "0.667 (n too small)", "2/3 (67%)"]
    assert "Min@5, temp+sem distractors" in text
    # the plots are there as SVG text that the browser parsed (matplotlib keeps text as text)
    assert text.count("<svg") == 6 and "n=11" in text

    shot = tmp_path / "report.png"
    proc = _run_chromium(browser, tmp_path / "profile", "--window-size=1100,2400",
                         f"--screenshot={shot}", page.as_uri())
    assert proc.returncode == 0, proc.stderr[-2000:]
    width, height, pixels = _png_pixels(shot.read_bytes())
    assert (width, height) == (1100, 2400)
    # a drawn page: many distinct byte values (text, two series' colours), not a blank canvas
    assert len(set(pixels)) > 50
    out = os.environ.get("KGPROBE_SCREENSHOT_DIR")
    if out:  # keep the picture for a human to look at
        shutil.copy(shot, Path(out) / "report.png")


def test_cli_report_json_is_one_document(hand_graph: Any, kgprobe_env: dict[str, str], tmp_path: Path) -> None:
    import sys

    exe = str(Path(sys.executable).parent / "kgprobe")
    out = tmp_path / "rep"
    r = subprocess.run([exe, "report", "-m", "hand", "--by", "popularity", "--out", str(out), "--json"],
                       capture_output=True, text=True, env=kgprobe_env, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads(r.stdout)  # ONE document, nothing else on stdout
    assert doc["by"] == "popularity" and doc["primary"]["overall"]["facts"] == 11
    assert {g["key"] for g in doc["primary"]["groups"]} == {"low", "mid", "high"}
    assert Path(doc["files"]["results"]).is_file() and (out / "by_popularity.csv").is_file()
    bad = subprocess.run([exe, "report", "-m", "hand", "--by", "colour"], capture_output=True,
                         text=True, env=kgprobe_env, timeout=300)
    assert bad.returncode != 0 and "unknown --by 'colour'; choose from: relation, type, popularity" in bad.stderr


@pytest.mark.parametrize("markup", [True, False])
def test_terminal_report_prints_data_text_as_written(hand_graph: Any, markup: bool) -> None:
    """A relation label from the data is printed literally whatever the console's markup
    setting (the CLI's consoles render no markup; an API user's may): no tag swallowed, no
    backslash added."""
    from rich.console import Console

    from kgprobe.reports.console import print_report

    hand_graph.write("MATCH (r:Relation {pid: 'P36'}) SET r.label = $l", l="capital [bold]x[/bold] [a]")
    con = Console(record=True, width=400, markup=markup)
    print_report(build_report(hand_graph, "hand", seed=0), con)
    text = con.export_text()
    assert "capital [bold]x[/bold] [a]" in text and "\\[" not in text


def test_groups_too_small_for_an_interval_come_last() -> None:
    """An n = 1 relation with a perfect score must not head the list: the 12-fact relation
    (mean 0.25) comes first, then the small ones by mean (0.9 before 0.5)."""
    rows = ([{"pid": "P1", "score": 0.25, "stale": None, "popularity": None}
             for i in range(12)]
            + [{"pid": "P2", "score": 1.0, "stale": None, "popularity": None}]
            + [{"pid": "P3", "score": s, "stale": None, "popularity": None} for s in (0.5, 0.5)]
            + [{"pid": "P4", "score": 0.9, "stale": None, "popularity": None}])
    per, overall = relation_stats(rows, {}, 0.5, None, n_boot=200)
    assert [g.key for g in per] == ["P1", "P2", "P4", "P3"]
    assert per[0].ci_low is not None and all(g.ci_low is None for g in per[1:])
    assert overall.facts == 16


# --- results that travel (issue 20 #4) -----------------------------------------------------------

CITIZENS = [f"Q91{i:02d}" for i in range(12)]
CITIZEN_SCORES = [1.0, 1.0, 0.8, 1.0, 0.6, 1.0, 0.4, 1.0, 1.0, 0.8, 1.0, 0.2]


def test_one_interval_per_number(graph: Any) -> None:
    """The same 12 scores of one relation, bootstrapped by the report's table and by the
    measure's own per-relation aggregate (report.json "measures", the "other measures" table),
    give ONE interval: both use the group's seed. (They used to differ: the table seeded each
    group from its key, the aggregate used the bare report seed.)"""
    import json as _json

    from kgprobe.graph.ingest import ingest
    from kgprobe.records import EntityRecord, FactRecord, RelationRecord

    ingest(graph, [RelationRecord("P27", "country of citizenship"), EntityRecord("Q30", "USA"),
                   *(EntityRecord(q, f"citizen {q}") for q in CITIZENS),
                   *(FactRecord(q, "P27", "Q30") for q in CITIZENS)])
    specs = [{"name": "kmin", "key": SP.measure_key, "params": {}, "extras": []}]
    pr.create_run(graph, "run-cit", {"model": "hand", "model_key": "hand", "measure_keys": [SP.measure_key],
                                     "measure_specs": _json.dumps(specs), "threshold": 0.5,
                                     "status": "finished", "started": "t"})
    pr.write_scores(graph, "run-cit", [
        {"key": _key(graph, q, "P27", "Q30"), "s": q, "props": {SP.score: v, SP.stale: None, SP.run: "run-cit"}}
        for q, v in zip(CITIZENS, CITIZEN_SCORES, strict=True)], scored=12, unscorable=0, now="t")
    for seed in (0, 3):
        rep = build_report(graph, "hand", seed=seed)
        [group] = rep.primary.relations
        [agg] = [m for m in rep.measures if m["measure_key"] == SP.measure_key and m["pid"] == "P27"]
        assert group.facts == agg["score"]["n"] == 12
        assert group.ci_low is not None and group.ci_low < group.mean < group.ci_high  # type: ignore[operator]
        assert (agg["score"]["ci_low"], agg["score"]["ci_high"]) == (group.ci_low, group.ci_high)


def test_markdown_latex_and_figure_files(hand_graph: Any, tmp_path: Path) -> None:
    """Beside the page: the tables as Markdown and LaTeX (labels from the data escaped), and
    every plot as its own SVG (well-formed XML) and PNG (a drawn picture) file."""
    import xml.etree.ElementTree as ET

    hand_graph.write("MATCH (r:Relation {pid: $p}) SET r.label = $l", p="P36", l="capital & 100% of $x_{1}")
    rep = build_report(hand_graph, "hand", vs="other", seed=0)
    paths = write_report(rep, tmp_path / "r")
    md = paths["markdown"].read_text(encoding="utf-8")
    lines = md.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("| relation |"))
    table = [line for line in lines[head:] if line.startswith("|")][:2 + 4]
    assert table[1].startswith("| --- | ---: |")
    cells = [c.strip() for c in table[2].strip("|").split(" | ")]
    # best first: P36 (2 of 3 known, hand) and the same relation for "other" (scores flipped)
    assert cells[:5] == ["P36 capital & 100% of $x_{1}", "3", "0.667 (n too small)", "2/3 (67%)", "–"]
    assert cells[5:7] == ["3", "0.333 (n too small)"]
    assert table[-1].startswith("| all facts | 11 |")
    assert "### Paired comparison" in md

    tex = paths["latex"].read_text(encoding="utf-8")
    assert r"P36 capital \& 100\% of \$x\_\{1\}" in tex
    assert tex.count(r"\begin{table}") == 2 == tex.count(r"\end{table}")
    for row in (ln for ln in tex.splitlines() if ln.endswith(r"\\")):
        assert row.count(" & ") + 1 in (9, 8)  # every row has the table's columns
    assert tex.count("{") - tex.count(r"\{") == tex.count("}") - tex.count(r"\}")

    svgs = sorted(p for k, p in paths.items() if k.startswith("figure_") and k.endswith("_svg"))
    pngs = sorted(p for k, p in paths.items() if k.startswith("figure_") and k.endswith("_png"))
    assert {p.stem for p in svgs} == {p.stem for p in pngs} >= {"figure-forest", "figure-histogram",
                                                                "figure-vs-facts", "figure-vs-groups"}
    for svg in svgs:
        root = ET.fromstring(svg.read_text(encoding="utf-8"))
        assert root.tag == "{http://www.w3.org/2000/svg}svg"
    for png in pngs:
        width, height, pixels = _png_pixels(png.read_bytes())
        assert width > 100 and height > 100 and len(set(pixels)) > 20


def test_titles_name_the_models(hand_graph: Any) -> None:
    """Titles, headers and legends show the model as probed, never its property key."""
    pr.update_run(hand_graph, "run-hand", {"model": "Org/Hand-1B"})
    pr.update_run(hand_graph, "run-other", {"model": "/models/other-2b.gguf"})
    rep = build_report(hand_graph, "hand", vs="other", seed=0)
    assert rep.names() == ("Org/Hand-1B", "other-2b.gguf")
    page = render_html(rep)
    assert "<h1>What Org/Hand-1B knows vs other-2b.gguf</h1>" in page
    assert "other-2b.gguf − Org/Hand-1B [95% paired CI]" in page
    assert "What hand knows" not in page and ">hand mean<" not in page


def test_config_file_and_formats(hand_graph: Any, kgprobe_env: dict[str, str], tmp_path: Path) -> None:
    """`report --config FILE`: the file's options, the command line winning; --format md prints
    Markdown only; an unknown key is one line naming it and the closest option (exit 2)."""
    import sys

    exe = str(Path(sys.executable).parent / "kgprobe")
    cfg = tmp_path / "run.yaml"
    out = tmp_path / "rep"
    cfg.write_text(f"model: hand\nvs: other\nby: popularity\nformat: md\nout: {out}\n", encoding="utf-8")
    r = subprocess.run([exe, "report", "--config", str(cfg), "--by", "relation"], capture_output=True,
                       text=True, env=kgprobe_env, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.startswith("## hand vs other: Min@5, temp+sem distractors") and "by relation" in r.stdout
    assert (out / "relations.csv").is_file() and not (out / "by_popularity.csv").exists()
    doc = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert [m["model_key"] for m in doc["models"]] == ["hand", "other"]

    toml = tmp_path / "run.toml"
    toml.write_text('model = "hand"\nsead = 3\ncolour = "red"\n', encoding="utf-8")
    bad = subprocess.run([exe, "report", "--config", str(toml)], capture_output=True, text=True,
                         env=kgprobe_env, timeout=300)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    [line] = bad.stderr.strip().splitlines()
    assert "unknown keys 'sead' (did you mean 'seed'?), 'colour'" in line
