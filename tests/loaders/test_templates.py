"""Template importers on real files, the verbalizer, and the template store in a real graph."""

from __future__ import annotations

import json
import re
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from _kgprobe_process import run_kgprobe

from kgprobe.errors import InputError
from kgprobe.loaders.templates import FORMATS, read_templates
from kgprobe.probing.verbalize import cloze, fill
from kgprobe.records import (
    STYLE_OBJECT_INSIDE,
    STYLE_OBJECT_LAST,
    STYLE_QUESTION,
    TemplateRecord,
    derive_style,
    template_id,
)

T = Path(__file__).parents[1] / "fixtures" / "templates"


def by_pid(records: list[TemplateRecord]) -> dict[str, list[TemplateRecord]]:
    out: dict[str, list[TemplateRecord]] = {}
    for r in records:
        out.setdefault(r.pid, []).append(r)
    return out


def test_lama_relations_jsonl() -> None:
    recs = list(read_templates(T / "LAMA_relations.jsonl", "lama"))
    lines = [json.loads(x) for x in (T / "LAMA_relations.jsonl").read_text().splitlines()]
    assert [r.pid for r in recs] == [x["relation"] for x in lines]
    p19 = by_pid(recs)["P19"][0]
    # LAMA's " ." is kept: full-sentence scores depend on it
    assert (p19.text, p19.style, p19.source) == ("[X] was born in [Y] .", STYLE_OBJECT_LAST, "lama")
    # "[X] is the capital of [Y] ." is object-last, P279's "[X] is a subclass of [Y] ." too
    assert all(r.style == STYLE_OBJECT_LAST for r in recs if r.text.rstrip(" .").endswith("[Y]"))


def test_pararel_folder_and_single_file() -> None:
    recs = list(read_templates(T / "pararel", "pararel"))
    assert Counter(r.pid for r in recs) == {"P19": 13, "P36": 14}
    first = json.loads((T / "pararel" / "P19.jsonl").read_text().splitlines()[0])["pattern"]
    assert recs[0].text == first and recs[0].source == "pararel"
    styles = {r.text: r.style for r in recs}
    # ParaRel has object-first paraphrases: they must not be scored as continuations
    inside = [t for t in styles if t.startswith("[Y]")]
    assert inside and all(styles[t] == STYLE_OBJECT_INSIDE for t in inside)
    single = list(read_templates(T / "pararel" / "P36.jsonl", "pararel"))
    assert {r.pid for r in single} == {"P36"}


def test_lpaqa_txt_and_jsonl_with_folder_sources() -> None:
    manual = list(read_templates(T / "lpaqa" / "manual_paraphrase" / "P19.txt", "lpaqa"))
    assert len(manual) == 30 and {r.source for r in manual} == {"lpaqa-manual_paraphrase"}
    mine = list(read_templates(T / "lpaqa" / "mine", "lpaqa"))
    assert len(mine) == 8 and {r.source for r in mine} == {"lpaqa-mine"}
    assert any(r.style == STYLE_OBJECT_INSIDE for r in mine)  # "[Y] native [X] ."
    para = list(read_templates(T / "lpaqa" / "paraphrase" / "P19.jsonl", "lpaqa", relation="P19"))
    assert len(para) == 8 and para[0].text == "[X] was born in [Y] ."


def test_lpaqa_file_without_relation_in_name_needs_relation(tmp_path: Path) -> None:
    f = tmp_path / "prompts.txt"
    f.write_text("[X] was born in [Y].\n")
    with pytest.raises(InputError, match="--relation"):
        list(read_templates(f, "lpaqa"))
    assert [r.pid for r in read_templates(f, "lpaqa", relation="P19")] == ["P19"]


def test_wikifactdiff_slots_are_normalized() -> None:
    recs = list(read_templates(T / "wikifactdiff_best_templates.json", "wikifactdiff"))
    raw = json.loads((T / "wikifactdiff_best_templates.json").read_text())
    assert len(recs) == sum(len(v) for v in raw.values())
    assert all("XXXX" not in r.text and "____" not in r.text for r in recs)
    assert by_pid(recs)["P19"][0].text == "[X] was born in [Y]"
    assert {r.style for r in recs} == {STYLE_OBJECT_LAST}


def test_bear_metadata() -> None:
    recs = list(read_templates(T / "bear_metadata_relations.json", "bear"))
    assert Counter(r.pid for r in recs) == {"P6": 3, "P19": 3, "P1376": 3}
    p6 = {r.text: r.style for r in by_pid(recs)["P6"]}
    assert p6["[Y] served as the head of government for [X]."] == STYLE_OBJECT_INSIDE
    assert p6["The head of government of [X] is [Y]."] == STYLE_OBJECT_LAST


def test_kamel_questions() -> None:
    recs = list(read_templates(T / "kamel_question-templates.csv", "kamel"))
    assert len(recs) == 12
    assert recs[0].pid == "P364" and recs[0].text == "What is the original language of [X]?"
    assert {r.style for r in recs} == {STYLE_QUESTION} and all("[S]" not in r.text for r in recs)
    assert [r.pid for r in read_templates(T / "kamel_question-templates.csv", "kamel", "P364")] == ["P364"]


def test_templama_csv() -> None:
    recs = list(read_templates(T / "templama_templates.csv", "templama"))
    assert len(recs) == 9
    styles = {r.pid: r.style for r in recs}
    assert styles["P54"] == STYLE_OBJECT_LAST and styles["P286"] == STYLE_OBJECT_INSIDE


def test_kgprobe_format_checks_style(tmp_path: Path) -> None:
    good = tmp_path / "good.jsonl"
    good.write_text(json.dumps({"pid": "P19", "text": "Where was [X] born?", "style": "question"}) + "\n")
    assert [r.style for r in read_templates(good, "kgprobe")] == [STYLE_QUESTION]
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"pid": "P19", "text": "[Y] is where [X] was born.", "style": STYLE_OBJECT_LAST}) + "\n")
    with pytest.raises(InputError, match=r"bad.jsonl:1: style"):
        list(read_templates(bad, "kgprobe"))


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"relation": "19", "template": "[X] was born in [Y]."}', "property id"),
        ('{"relation": "P19", "template": "was born in [Y]."}', "subject slot"),
        ('{"relation": "P19", "template": "[X] was born."}', "without object slot"),
        ('{"relation": "P19", "template": "[X] [Y] [Y]."}', "more than one object"),
        ("not json", "not JSON"),
    ],
)
def test_bad_lama_rows_name_the_line(tmp_path: Path, content: str, message: str) -> None:
    f = tmp_path / "relations.jsonl"
    f.write_text(content + "\n")
    with pytest.raises(InputError, match=message):
        list(read_templates(f, "lama"))


def test_unknown_format_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="unknown template format"):
        list(read_templates(T / "LAMA_relations.jsonl", "csv"))
    with pytest.raises(InputError, match="no such file"):
        list(read_templates(tmp_path / "nope.jsonl", "lama"))
    assert "kgprobe" in FORMATS


def test_template_id_is_stable_and_distinguishes_sources() -> None:
    a = TemplateRecord(pid="P19", text="[X] was born in [Y].", style=STYLE_OBJECT_LAST, source="bear")
    b = TemplateRecord(pid="P19", text="[X] was born in [Y].", style=STYLE_OBJECT_LAST, source="bear")
    c = TemplateRecord(pid="P19", text="[X] was born in [Y].", style=STYLE_OBJECT_LAST, source="lama")
    assert a.id == b.id == template_id("P19", "[X] was born in [Y].", "bear") != c.id


@pytest.mark.parametrize(
    ("text", "style"),
    [
        ("[X] was born in [Y] .", STYLE_OBJECT_LAST),
        ("[X] plays for [Y]", STYLE_OBJECT_LAST),
        ("[X]'s home venue is the [Y].", STYLE_OBJECT_LAST),
        ("[Y] produced [X].", STYLE_OBJECT_INSIDE),
        ("[X] represents [Y] in sport.", STYLE_OBJECT_INSIDE),
        ("Where was [X] born?", STYLE_QUESTION),
    ],
)
def test_derive_style(text: str, style: str) -> None:
    assert derive_style(text) == style


def test_fill_and_cloze_whitespace_convention() -> None:
    assert fill("[X] was born in [Y] .", "Alan Turing", "London") == "Alan Turing was born in London ."
    assert fill("Where was [X] born?", "Alan Turing") == "Where was Alan Turing born?"
    c = cloze("[X] was born in [Y] .", "Alan Turing")
    assert c.context == "Alan Turing was born in"  # no trailing space
    assert c.continuation("London") == " London"  # the space moves to the continuation
    assert c.sentence("London") == "Alan Turing was born in London ."
    glued = cloze("[X] ([Y])", "Q")
    assert glued.context == "Q (" and glued.continuation("x") == "x"
    with pytest.raises(InputError, match="object label"):
        fill("[X] was born in [Y].", "Alan Turing")
    with pytest.raises(InputError, match="not an object-last"):
        cloze("[Y] produced [X].", "Toy Story")
    with pytest.raises(InputError, match="not an object-last"):
        cloze("Where was [X] born?", "Alan Turing")


# --- the template store in a real graph ----------------------------------------------------


def test_import_twice_adds_nothing_and_lists_by_relation(graph) -> None:  # type: ignore[no-untyped-def]
    from kgprobe.graph.templates import import_templates, list_templates

    recs = list(read_templates(T / "bear_metadata_relations.json", "bear"))
    recs += list(read_templates(T / "kamel_question-templates.csv", "kamel"))
    distinct = len({r.id for r in recs})
    assert import_templates(graph, recs) == distinct
    assert import_templates(graph, recs) == distinct
    counts = graph.read(
        "MATCH (r:Relation)-[h:HAS_TEMPLATE]->(t:Template) "
        "RETURN count(DISTINCT t) AS templates, count(h) AS edges, count(DISTINCT r) AS relations"
    )[0]
    assert counts == {"templates": distinct, "edges": distinct, "relations": len({r.pid for r in recs})}
    p6 = list_templates(graph, "P6")
    assert sorted(t.text for t in p6) == sorted(r.text for r in recs if r.pid == "P6")
    assert {t.style for t in p6} == {STYLE_OBJECT_LAST, STYLE_OBJECT_INSIDE}
    assert len(list_templates(graph)) == distinct
    with pytest.raises(InputError):
        list_templates(graph, "P6) DETACH DELETE r //")


def test_templates_cli_import_and_list(graph, kgprobe_env) -> None:  # type: ignore[no-untyped-def]
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return run_kgprobe(["templates", *args], kgprobe_env, timeout=180)

    done = run("import", str(T / "pararel"), "--format", "pararel", "--relation", "P36")
    assert done.returncode == 0, done.stderr
    assert "14 templates imported" in done.stdout
    listed = run("list", "--relation", "P36", "--jsonl")  # a stream: one object per line
    assert listed.returncode == 0, listed.stderr
    rows = [json.loads(line) for line in listed.stdout.splitlines()]
    assert len(rows) == 14 and {r["pid"] for r in rows} == {"P36"} and {r["source"] for r in rows} == {"pararel"}
    bad = run("import", str(T / "pararel"), "--format", "nonsense")
    assert bad.returncode != 0 and "unknown template format" in bad.stderr and "Traceback" not in bad.stderr


def test_own_templates_import_into_the_graph(graph) -> None:  # type: ignore[no-untyped-def]
    from kgprobe.graph.templates import demo_paths, import_own_templates, list_templates

    expected = list(read_templates(demo_paths()[1], "kgprobe"))
    assert import_own_templates(graph) == len(expected) == import_own_templates(graph)
    stored = list_templates(graph)
    assert sorted(t.id or "" for t in stored) == sorted(t.id or "" for t in expected)
    p19 = list_templates(graph, "P19")
    assert len(p19) >= 3 and any(t.style == STYLE_QUESTION for t in p19)


# --- kgprobe's own templates read well with careful labels (issue 41, item 4) ------------------------

_FUNCTION_WORDS = frozenset(re.findall(
    r"\w+", "the a an of in on at by for to with from is was are were be been has have had its "
             "his her their and or as that which who what where into does did do"))


def _stem(word: str) -> str:
    w = word.lower().strip(".,'’\"?")
    return w[:-1] if w.endswith("s") and not w.endswith("ss") and len(w) > 3 else w


def _head(label: str) -> str:
    """The head noun of a name: its last word, or the word before "of" ("Party", "City",
    "Mountains", "team"; "President" of "President of the United States")."""
    words = re.findall(r"[\w'-]+", label.partition(" of ")[0])
    return _stem(words[-1]) if words else ""


def _demo_facts(per_relation: int) -> dict[str, list[tuple[str, str]]]:
    """The first ``per_relation`` facts of each relation in the demo graph (file order), each
    as (subject, object) written as the careful verbalizer writes them."""
    import gzip

    from kgprobe.graph.templates import demo_paths
    from kgprobe.probing.verbalize import entity_facts, name

    items: dict[str, tuple[str, tuple[str, ...], tuple[str, ...], dict[str, Any]]] = {}
    for e in json.loads(gzip.decompress(demo_paths()[0].read_bytes())):
        label = (e.get("labels", {}).get("en") or {}).get("value")
        if e.get("type") != "item" or not label:
            continue
        aliases = tuple(a["value"] for a in (e.get("aliases") or {}).get("en") or [])
        types = [c["mainsnak"].get("datavalue", {}).get("value", {}).get("id")
                 for c in (e.get("claims") or {}).get("P31", [])]
        types += [t["type"] for t in e.get("kgprobe_inferred_types") or []]
        items[e["id"]] = (label, aliases, tuple(t for t in types if t), e.get("claims") or {})
    out: dict[str, list[tuple[str, str]]] = {}
    for label, aliases, types, claims in items.values():
        for pid, statements in claims.items():
            for st in statements:
                v = st["mainsnak"].get("datavalue", {}).get("value")
                o = items.get(v.get("id")) if isinstance(v, dict) else None
                if o is None or len(out.setdefault(pid, [])) >= per_relation:
                    continue
                out[pid].append((name(label, entity_facts(label, aliases, types, pid)),
                                 name(o[0], entity_facts(o[0], o[1], o[2]))))
    return out


def _appositive(before: str) -> set[str]:
    """The nouns right before a slot, back to the first function word: "political party" in
    "is a member of the political party [Y]" (an appositive that names the label's kind)."""
    out: set[str] = set()
    for w in reversed(re.findall(r"[\w'-]+|[^\w\s]", before)):
        if w.lower() in _FUNCTION_WORDS or not w[0].isalnum():
            break
        out.add(_stem(w))
    return out


def template_problems(template: str, subject: str, obj: str) -> list[str]:
    """What reads badly in a careful sentence: a word doubled across a slot ("the the"; not
    "Jar Jar Binks", whose label has it) or a label whose head noun the appositive right
    before its slot already says ("the political party Republican Party", "the mountain range
    Appalachian Mountains", "the sports team Brazil national football team")."""
    text = fill(template, subject, obj if "[Y]" in template else None)
    problems = [f"doubled word {m.group(0)!r}" for m in re.finditer(r"\b(\w+)\s+\1\b", text, re.I)
                if m.group(0) not in subject and m.group(0) not in obj]
    for slot, label in (("[X]", subject), ("[Y]", obj)):
        if slot in template and _head(label) in _appositive(template.partition(slot)[0]):
            problems.append(f"{label!r} repeats the template's {_head(label)!r}")
    return problems


def test_template_problems_are_found() -> None:
    assert template_problems("[X] is a member of the political party [Y].", "Clarence Thomas",
                             "Republican Party") == ["'Republican Party' repeats the template's 'party'"]
    assert template_problems("[X] is in the [Y].", "Eritrea", "the Horn") == ["doubled word 'the the'"]
    assert template_problems("[X] lies in the mountain range [Y].", "Mount Mitchell",
                             "Appalachian Mountains") == ["'Appalachian Mountains' repeats the template's 'mountain'"]
    assert template_problems("The political party of [X] is [Y].", "Clarence Thomas", "Republican Party") == []
    assert template_problems("[X] was created by [Y].", "Jar Jar Binks", "George Lucas") == []
    assert template_problems("[X] is a member of [Y].", "Clarence Thomas", "Republican Party") == []


def test_own_templates_read_well_with_careful_labels() -> None:
    """Every one of kgprobe's templates, filled with up to 12 demo facts of its relation as
    the careful verbalizer writes them: no doubled word, no head noun said twice."""
    from kgprobe.graph.templates import demo_paths

    facts = _demo_facts(12)
    records = list(read_templates(demo_paths()[1], "kgprobe"))
    assert len(records) == 164
    problems = [(r.pid, r.text, p) for r in records for s, o in facts.get(r.pid, [])
                for p in template_problems(r.text, s, o)]
    assert problems == []
    assert sum(len(facts.get(r.pid, [])) for r in records) > 1500  # every relation has facts
