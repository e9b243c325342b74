"""The bundled demo graph and kgprobe's own templates: counts and invariants, read from the
packaged files themselves (what a user's `kgprobe demo` loads)."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from collections import Counter
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from kgprobe.graph.templates import demo_paths
from kgprobe.loaders.templates import read_templates
from kgprobe.probing.verbalize import cloze, fill
from kgprobe.records import (
    STYLE_OBJECT_LAST,
    STYLE_QUESTION,
    TemplateRecord,
    is_pid,
    is_qid,
    time_sort_key,
)

TIME_QUALIFIERS = ("P580", "P582", "P585")


@cache
def entities() -> dict[str, dict[str, Any]]:
    """Parse the dump layout strictly: '[' line, one entity per line with a comma, ']' line."""
    lines = gzip.decompress(demo_paths()[0].read_bytes()).decode("utf-8").splitlines()
    assert lines[0] == "[" and lines[-1] == "]"
    body = lines[1:-1]
    assert all(line.endswith(",") for line in body[:-1]) and not body[-1].endswith(",")
    out = {}
    for line in body:
        e = json.loads(line.rstrip(","))
        assert e["id"] not in out
        out[e["id"]] = e
    return out


def items() -> list[dict[str, Any]]:
    return [e for e in entities().values() if e["type"] == "item"]


def facts() -> list[tuple[str, str, str, dict[str, Any]]]:
    """(subject, pid, object, statement) for every item-valued statement except P31."""
    out = []
    for e in items():
        for pid, statements in e["claims"].items():
            if pid == "P31":
                continue
            for st in statements:
                out.append((e["id"], pid, st["mainsnak"]["datavalue"]["value"]["id"], st))
    return out


@cache
def own_templates() -> dict[str, list[TemplateRecord]]:
    out: dict[str, list[TemplateRecord]] = {}
    for t in read_templates(demo_paths()[1], "kgprobe"):
        out.setdefault(t.pid, []).append(t)
    return out


def label(qid: str) -> str:
    return str(entities()[qid]["labels"]["en"]["value"])


def test_size_and_coverage() -> None:
    assert demo_paths()[0].stat().st_size < 5_000_000
    fs = facts()
    per_relation = Counter(pid for _, pid, _, _ in fs)
    assert len(fs) >= 3000
    assert len(per_relation) >= 30
    props = {e["id"]: e for e in entities().values() if e["type"] == "property"}
    assert set(per_relation) <= set(props)
    assert all(props[p]["labels"]["en"]["value"] for p in per_relation)
    assert len({(s, p, o, json.dumps(st.get("qualifiers"), sort_keys=True)) for s, p, o, st in fs}) == len(fs)


def test_ids_labels_and_aliases() -> None:
    ents = entities()
    for s, p, o, st in facts():
        assert is_qid(s) and is_pid(p) and is_qid(o)
        assert o in ents, f"object {o} of {s} {p} has no entity"
        assert st["id"].startswith(f"{s}$") and st["rank"] in ("preferred", "normal", "deprecated")
    assert all(e["labels"]["en"]["value"].strip() for e in items())
    with_aliases = [e for e in items() if e["aliases"].get("en")]
    assert len(with_aliases) >= 1000
    assert all(a["language"] == "en" and a["value"] for e in with_aliases for a in e["aliases"]["en"])


def test_every_object_has_a_type_and_inferred_types_are_not_p31() -> None:
    ents = entities()
    objects = {o for _, _, o, _ in facts()}
    declared = 0
    for qid in objects:
        e = ents[qid]
        p31 = e["claims"].get("P31", [])
        inferred = e.get("kgprobe_inferred_types", [])
        assert p31 or inferred, f"{qid} has no type"
        if p31:
            declared += 1
            assert not inferred, f"{qid}: a fallback type next to a declared P31"
        for t in inferred:
            assert is_qid(t["type"]) and t["type"] in ents and t["basis"].startswith("range of P")
    # the fallback never leaks into P31: no P31 statement comes from kgprobe's inference
    for e in items():
        for st in e["claims"].get("P31", []):
            assert st.get("kgprobe_source") in ("distfactassesslm", "lpaqa-trex")
    assert declared >= 1


def test_intervals_are_ordered_and_histories_exist() -> None:
    dated: Counter[tuple[str, str]] = Counter()
    ended = 0
    rows = []
    for s, p, _o, st in facts():
        q = st.get("qualifiers", {})
        assert set(q) <= set(TIME_QUALIFIERS)
        times = {k: q[k][0]["datavalue"]["value"] for k in q}
        for v in times.values():
            assert v["precision"] in (9, 10, 11) and v["calendarmodel"].endswith("Q1985727")
        if "P580" in times and "P582" in times:
            assert time_sort_key(times["P580"]["time"]) <= time_sort_key(times["P582"]["time"])
        if times:
            dated[(s, p)] += 1
        ended += "P582" in times
        rows.append((s, p, "P582" in times, bool(times)))
    history = sum(1 for s, p, has_end, is_dated in rows if has_end or (is_dated and dated[(s, p)] >= 2))
    assert history >= 200
    assert ended >= 100


def test_every_relation_has_own_templates_with_a_question() -> None:
    relations = {p for _, p, _, _ in facts()}
    own = own_templates()
    assert set(own) == relations
    for pid, ts in own.items():
        assert len(ts) >= 3, pid
        assert any(t.style == STYLE_QUESTION for t in ts), pid
        assert any(t.style == STYLE_OBJECT_LAST for t in ts), pid
        assert {t.source for t in ts} == {"kgprobe"}


def test_every_fact_verbalizes_with_every_own_template() -> None:
    own = own_templates()
    n = 0
    for s, p, o, _ in facts():
        subj, obj = label(s), label(o)
        for t in own[p]:
            sentence = fill(t.text, subj, obj)
            assert subj in sentence and "[X]" not in sentence and "[Y]" not in sentence
            if t.style == STYLE_QUESTION:
                assert sentence.endswith("?")
            if t.style == STYLE_OBJECT_LAST:
                c = cloze(t.text, subj)
                assert c.context == c.context.rstrip() and subj in c.context
                assert c.context + c.continuation(obj) + c.tail == sentence
                assert sentence[len(c.context + c.continuation(obj)) :].strip() in ("", ".", "?", "!")
            n += 1
    assert n >= 3 * len(facts())


def test_build_script_reproduces_the_packaged_graph(tmp_path: Path) -> None:
    """The committed file is exactly what the seeded script makes (where the source data exist)."""
    # CI has ../shared beside the checkout; a user's clone does not (then this test skips)
    default = Path(__file__).resolve().parents[3] / "shared" / "data"
    data = Path(os.environ.get("KGPROBE_SHARED_DATA", str(default)))
    if not (data / "bear" / "BEAR").is_dir():
        pytest.skip(f"source data not available at {data} (set KGPROBE_SHARED_DATA)")
    script = Path(__file__).parents[2] / "scripts" / "build_demo_graph.py"
    done = subprocess.run([sys.executable, str(script), "--data", str(data), "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "demo_graph.json.gz").read_bytes() == demo_paths()[0].read_bytes()
