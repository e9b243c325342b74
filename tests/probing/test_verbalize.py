"""The careful verbalizer on a table of hard cases; every expected sentence written by hand.

Types are Wikidata classes as the demo graph has them (declared P31 or the documented
fallback types): Q5 human, Q6256 country, Q7278 political party, Q349 sport, Q15324 body of
water, Q46831 mountain range, Q3918 university, Q12973014 sports team, Q43229 organization,
Q34379 musical instrument, Q11424 film, Q7725634 literary work, Q15265344 broadcaster.
"""

from __future__ import annotations

import pickle

import pytest

from kgprobe.errors import ConfigError
from kgprobe.probing.measures.common import EndMarker, Entity, Fact, cloze_sentences, make_cloze
from kgprobe.probing.measures.factor import factor_items_from_fact
from kgprobe.probing.verbalize import (
    Name,
    after_determiner,
    check_verbalizer,
    cloze,
    entity_facts,
    fill,
    surface,
)


def ent(label: str, types: tuple[str, ...] = (), aliases: tuple[str, ...] = (),
        subject_of: str | None = None) -> Entity:
    return Entity(label, aliases, None, entity_facts(label, aliases, types, subject_of))


# (template, subject, object, the sentence a careful writer writes)
CASES = [
    # the three sentences of the issue
    ("[X] is a citizen of [Y].", ent("Dan Shor", ("Q5",)),
     ent("United States of America", ("Q6256",)), "Dan Shor is a citizen of the United States of America."),
    ("The political party of [X] is [Y].", ent("Clarence Thomas", ("Q5",)),
     ent("Republican Party", ("Q7278",)), "The political party of Clarence Thomas is the Republican Party."),
    ("[X] competes in [Y].", ent("cross"), ent("boxing", ("Q349",)), "Cross competes in boxing."),
    # articles from the name's form: unions, plural names, "X of Y", heads of descriptions
    ("[X] is a member of [Y].", ent("Belgium", ("Q6256",)), ent("European Union", ("Q43229",)),
     "Belgium is a member of the European Union."),
    ("[X] lies in [Y].", ent("Netherlands"), ent("Europe", ("Q5107",)), "The Netherlands lies in Europe."),
    ("[X] is a citizen of [Y].", ent("Manny Pacquiao", ("Q5",)), ent("Philippines", ("Q6256",)),
     "Manny Pacquiao is a citizen of the Philippines."),
    ("[X] is a citizen of [Y].", ent("Jan Hus", ("Q5",)), ent("Czech Republic", ("Q6256",)),
     "Jan Hus is a citizen of the Czech Republic."),
    ("[X] is a citizen of [Y].", ent("Mahmoud Abbas", ("Q5",)), ent("State of Palestine", ("Q6256",)),
     "Mahmoud Abbas is a citizen of the State of Palestine."),
    ("[X] is a citizen of [Y].", ent("Ai Weiwei", ("Q5",)), ent("People's Republic of China", ("Q6256",)),
     "Ai Weiwei is a citizen of the People's Republic of China."),
    ("[X] is a citizen of [Y].", ent("Erich Honecker", ("Q5",)), ent("Germany", ("Q6256",)),
     "Erich Honecker is a citizen of Germany."),
    # a label with its own "The": lower-case mid-sentence, capital at the start
    ("[X] is a citizen of [Y].", ent("Sidney Poitier", ("Q5",)), ent("The Bahamas", ("Q6256",)),
     "Sidney Poitier is a citizen of the Bahamas."),
    ("[X]'s capital city is [Y].", ent("The Bahamas", ("Q6256",)), ent("Nassau", ("Q515",)),
     "The Bahamas's capital city is Nassau."),
    # universities: "the University of X", but "Harvard University"
    ("[X] studied at [Y].", ent("Stephen Hawking", ("Q5",)), ent("University of Oxford", ("Q3918",)),
     "Stephen Hawking studied at the University of Oxford."),
    ("[X] studied at [Y].", ent("Barack Obama", ("Q5",)), ent("Harvard University", ("Q3918",)),
     "Barack Obama studied at Harvard University."),
    # bodies of water and mountain ranges: "the" whatever the form, not lakes
    ("[X] flows into [Y].", ent("Inn", ("Q15324",)), ent("Danube", ("Q15324",)), "The Inn flows into the Danube."),
    ("[X] flows into [Y].", ent("Niagara River"), ent("Lake Ontario", ("Q15324",)),
     "The Niagara River flows into Lake Ontario."),
    ("[X] is located next to [Y].", ent("Venice"), ent("Adriatic Sea", ("Q15324",)),
     "Venice is located next to the Adriatic Sea."),
    ("[X] lies in [Y].", ent("Marmolada"), ent("Dolomites", ("Q46831",)), "Marmolada lies in the Dolomites."),
    # sports teams: plural nicknames and national teams take "the", clubs do not
    ("[X] played for [Y].", ent("Michael Jordan", ("Q5",)), ent("Chicago Bulls", ("Q12973014",)),
     "Michael Jordan played for the Chicago Bulls."),
    ("[X] played for [Y].", ent("Pelé", ("Q5",)), ent("Brazil national football team", ("Q12973014",)),
     "Pelé played for the Brazil national football team."),
    ("[X] played for [Y].", ent("Frank Lampard", ("Q5",)), ent("Chelsea F.C.", ("Q12973014",)),
     "Frank Lampard played for Chelsea FC."),  # one period, and it ends the sentence
    # names of people never get an article, whatever their form
    ("[X] is a sibling of [Y].", ent("Mary I of England", ("Q5",)), ent("Edward VI of England", ("Q5",)),
     "Mary I of England is a sibling of Edward VI of England."),
    ("[X] is married to [Y].", ent("Henry VIII", ("Q5",)), ent("Catherine of Aragon"),
     "Henry VIII is married to Catherine of Aragon."),
    ("[X] was born in [Y].", ent("The Weeknd", ("Q5",)), ent("Toronto", ("Q515",)), "The Weeknd was born in Toronto."),
    ("The spouse of [X] is [Y].", ent("Kate Winslet", ("Q5",)), ent("The Edge", ("Q5",)),
     "The spouse of Kate Winslet is The Edge."),
    # an untyped subject of a relation whose subjects are people is a person: no article
    ("[X] is married to [Y].", ent("Gabrielle Union", subject_of="P26"), ent("Dwyane Wade", ("Q5",)),
     "Gabrielle Union is married to Dwyane Wade."),
    ("[X] was educated at [Y].", ent("Beatrix of the Netherlands", subject_of="P69"),
     ent("Leiden University", ("Q3918",)), "Beatrix of the Netherlands was educated at Leiden University."),
    # ... and of a relation that does not say: the form decides
    ("[X] is a member of [Y].", ent("Netherlands", subject_of="P463"), ent("NATO", ("Q43229",)),
     "The Netherlands is a member of NATO."),
    ("[X] is developed by [Y].", ent("Blitz: The League"), ent("Midway Games", ("Q4830453",)),
     "\"Blitz: The League\" is developed by Midway Games."),  # a subtitled title, quoted
    # templates that already determine the slot: no "the the", no article in an appositive
    ("[X] is a member of the political party [Y].", ent("Clarence Thomas", ("Q5",)),
     ent("Republican Party", ("Q7278",)), "Clarence Thomas is a member of the political party Republican Party."),
    ("[X] plays the [Y].", ent("Acker Bilk", ("Q5",)), ent("clarinet", ("Q34379",)), "Acker Bilk plays the clarinet."),
    ("[X] lies in the mountain range [Y].", ent("Ben Nevis"), ent("Grampian Mountains", ("Q46831",)),
     "Ben Nevis lies in the mountain range Grampian Mountains."),
    ("[X] is located in the country of [Y].", ent("Manila"), ent("Philippines", ("Q6256",)),
     "Manila is located in the country of the Philippines."),
    ("[X] is a citizen of the [Y].", ent("Sidney Poitier", ("Q5",)), ent("The Bahamas", ("Q6256",)),
     "Sidney Poitier is a citizen of the Bahamas."),
    # titles of creative works are quoted (by type, or as the subject of a work relation)
    ("[X] was directed by [Y].", ent("The Long Voyage Home", ("Q11424",)), ent("John Ford", ("Q5",)),
     "\"The Long Voyage Home\" was directed by John Ford."),
    ("The author of [X] is [Y].", ent("Foundation and Earth", subject_of="P50"), ent("Isaac Asimov", ("Q5",)),
     "The author of \"Foundation and Earth\" is Isaac Asimov."),
    ("[X] was originally broadcast on [Y].", ent("Stranger Things", subject_of="P449"),
     ent("Netflix", ("Q15265344",)), "\"Stranger Things\" was originally broadcast on Netflix."),
    # capitals: camel-case brands keep their spelling; particles are capitalised
    ("[X] was developed by [Y].", ent("iPad Pro"), ent("Apple Inc.", ("Q4830453",)), "iPad Pro was developed by Apple Inc."),
    ("[X] is a citizen of [Y].", ent("de Gaulle", ("Q5",)), ent("France", ("Q6256",)), "De Gaulle is a citizen of France."),
    # common nouns stay bare and lower-case mid-sentence
    ("[X] died of [Y].", ent("Steve Jobs", ("Q5",)), ent("pancreatic cancer", ("Q1931388",)),
     "Steve Jobs died of pancreatic cancer."),
    ("[X] speaks [Y].", ent("Jan Hus", ("Q5",)), ent("Czech", ("Q34770",)), "Jan Hus speaks Czech."),
    # Wikidata's own evidence: the alias "The Jewel Tower" of "Jewel Tower" (no rule would know)
    ("[X] is owned by [Y].", ent("Jewel Tower", (), ("The Jewel Tower",)),
     ent("English Heritage", ("Q43229",)), "The Jewel Tower is owned by English Heritage."),
    # a question's answer starts a sentence
    ("Which country is [X] a citizen of? [Y]", ent("Dan Shor", ("Q5",)),
     ent("United States of America", ("Q6256",)), "Which country is Dan Shor a citizen of? The United States of America"),
]


@pytest.mark.parametrize(("template", "subject", "obj", "expected"), CASES,
                         ids=[c[3][:40] for c in CASES])
def test_careful_sentences(template: str, subject: Entity, obj: Entity, expected: str) -> None:
    assert fill(template, subject.name, obj.name) == expected


@pytest.mark.parametrize(("template", "subject", "obj", "expected"),
                         [c for c in CASES if not c[0].rstrip().endswith("]")],
                         ids=[c[3][:40] for c in CASES if not c[0].rstrip().endswith("]")])
def test_cloze_agrees_with_the_sentence(template: str, subject: Entity, obj: Entity, expected: str) -> None:
    """The cloze cuts the same sentence: context + continuation + tail."""
    c = make_cloze(template, subject.labels(1)[0])
    assert c.sentence(obj.labels(1)[0]) == expected


def test_raw_labels_are_written_as_they_are() -> None:
    """A plain str (and an Entity without verbalizer facts) is the DFA paper's raw filling."""
    assert fill("[X] is a citizen of [Y].", "Dan Shor", "United States of America") == (
        "Dan Shor is a citizen of United States of America.")
    assert fill("[X] competes in [Y].", "cross", "boxing") == "cross competes in boxing."
    raw = Entity("United States of America", ("USA",))
    assert raw.labels() == ("United States of America", "USA") and raw.name == "United States of America"
    c = cloze("[X] is a citizen of [Y].", "Dan Shor")
    assert c.continuation(raw.name) == " United States of America"


def test_the_article_is_in_the_continuation_of_each_candidate_alone() -> None:
    """The true object's article is scored with the true object only: a distractor that needs no
    article gets none, and one that needs it gets its own."""
    subject = ent("Dan Shor", ("Q5",))
    [c] = cloze_sentences(["[X] is a citizen of [Y]."], subject)
    assert c.context == "Dan Shor is a citizen of"
    end = EndMarker("tail", ".")
    assert end.continuation(c.cloze, ent("United States of America", ("Q6256",)).name) == (
        " the United States of America.", False)
    assert end.continuation(c.cloze, ent("France", ("Q6256",)).name) == (" France.", False)
    assert end.continuation(c.cloze, ent("Netherlands", ("Q6256",)).name) == (" the Netherlands.", False)
    # a name that ends in an abbreviation's period is written without it before the sentence's
    [p] = cloze_sentences(["[X] played for [Y]."], ent("Frank Lampard", ("Q5",)))
    assert end.continuation(p.cloze, ent("Chelsea F.C.", ("Q12973014",)).name) == (" Chelsea FC.", False)
    assert end.continuation(p.cloze, "Chelsea F.C.") == (" Chelsea F.C..", False)  # raw: as it is


def test_article_per_label_not_per_entity() -> None:
    """Aliases are written each in its own form: "the USA" and "the UK", but "America" bare;
    word acronyms ("NASA") take no article even when the full name does."""
    usa = ent("United States of America", ("Q6256",), ("USA", "America", "United States"))
    c = cloze("[X] is a citizen of [Y].", "Dan Shor")
    assert [c.continuation(x) for x in usa.labels()] == [
        " the United States of America", " the USA", " America", " the United States"]
    nasa = ent("National Aeronautics and Space Administration", ("Q43229",), ("NASA",))
    assert [surface(x, "operated by ") for x in nasa.labels()] == [
        "the National Aeronautics and Space Administration", "NASA"]


def test_appositive_detection() -> None:
    assert after_determiner("is a member of the political party")
    assert after_determiner("plays the")
    assert after_determiner("has the official language")
    assert not after_determiner("is located in the country of")
    assert not after_determiner("is a citizen of")
    assert not after_determiner("The capital of France's neighbour is")


def test_factor_items_are_written_carefully() -> None:
    fact = Fact(ent("Dan Shor", ("Q5",)), "P27", ent("United States of America", ("Q6256",)))
    item = factor_items_from_fact(fact, "[X] is a citizen of [Y].",
                                  [ent("France", ("Q6256",)), ent("United Kingdom", ("Q6256",))])
    assert item.completions == ("Dan Shor is a citizen of the United States of America.",
                                "Dan Shor is a citizen of France.",
                                "Dan Shor is a citizen of the United Kingdom.")


def test_name_survives_pickling_and_compares_as_its_label() -> None:
    n = ent("Czech Republic", ("Q6256",)).name
    assert isinstance(n, Name) and n == "Czech Republic" and hash(n) == hash("Czech Republic")
    back = pickle.loads(pickle.dumps(n))
    assert isinstance(back, Name) and surface(back, "a citizen of ") == "the Czech Republic"


def test_verbalizer_is_part_of_every_label_measure_configuration() -> None:
    """Changing how sentences are written changes the configuration hash (stored scores are
    never mixed), for the distractor measure and for KaRR, which keys no shared setting."""
    from kgprobe.probing.measures.catalog import create
    from kgprobe.probing.measures.registry import RunContext

    for name in ("kmin", "karr", "factor"):
        m = create(name, {})
        careful, raw = m.config(RunContext()), m.config(RunContext(verbalizer="raw"))
        assert careful != raw, name


def test_unknown_verbalizer_is_refused() -> None:
    assert check_verbalizer("raw") == "raw"
    with pytest.raises(ConfigError, match="careful or raw"):
        check_verbalizer("fancy")


# --- articles from evidence, sentence ends (issue 41) ------------------------------------------------

def _demo_entities(*qids: str) -> dict[str, Entity]:
    """Demo-graph entities as the probe loop builds them: label, aliases, P31 and inferred types."""
    import gzip
    import json

    from kgprobe.graph.templates import demo_paths

    want, out = set(qids), {}
    for e in json.loads(gzip.decompress(demo_paths()[0].read_bytes())):
        if e.get("type") != "item" or e["id"] not in want:
            continue
        label = e["labels"]["en"]["value"]
        aliases = tuple(a["value"] for a in (e.get("aliases") or {}).get("en") or [])
        types = [c["mainsnak"]["datavalue"]["value"]["id"] for c in (e.get("claims") or {}).get("P31", [])]
        types += [t["type"] for t in e.get("kgprobe_inferred_types") or []]
        out[e["id"]] = ent(label, tuple(types), aliases)
    assert set(out) == want
    return out


def test_a_the_alias_vouches_for_the_main_label_only() -> None:
    """"The Arsenal" (an alias of Arsenal F.C.) does not make the alias "Arsenal" "the Arsenal":
    a club is written bare; "The Arsenal" itself stays what Wikidata lists. A plural nickname
    known as "The …" takes it ("the Gunners", "the Bulls"); a main label known as "The …"
    takes it ("the Jewel Tower")."""
    c = cloze("[X] plays for [Y].", "Pierre-Emerick Aubameyang")
    built = ent("Arsenal F.C.", ("Q12973014",), ("The Arsenal", "Arsenal", "The Gunners", "Gunners"))
    assert [c.continuation(x) for x in built.labels()] == [
        " Arsenal F.C.", " the Arsenal", " Arsenal", " the Gunners", " the Gunners"]
    demo = _demo_entities("Q9617", "Q631", "Q128109")  # Arsenal F.C., Inter Milan, Chicago Bulls
    arsenal = dict(zip(demo["Q9617"].labels(), (c.continuation(x) for x in demo["Q9617"].labels()),
                       strict=True))
    assert arsenal["Arsenal"] == " Arsenal"
    inter = {x: c.continuation(x) for x in demo["Q631"].labels()}
    assert inter["Inter"] == " Inter"
    bulls = {x: c.continuation(x) for x in demo["Q128109"].labels()}
    assert bulls["Bulls"] == " the Bulls"


@pytest.mark.parametrize(("label", "types", "written"), [
    # events and editions led by a year
    ("1998 FIFA World Cup", (), "the 1998 FIFA World Cup"),
    ("2012 Summer Olympics", (), "the 2012 Summer Olympics"),
    ("2019–20 Premier League", (), "the 2019–20 Premier League"),
    ("2017 Washington train derailment", (), "the 2017 Washington train derailment"),  # demo Q46014043
    # "National … of …" institutions; libraries, galleries, gardens, museums
    ("National Library of Wales", ("Q43229",), "the National Library of Wales"),
    ("National Academy of Sciences", ("Q43229",), "the National Academy of Sciences"),  # demo Q270794
    ("British Library", ("Q43229",), "the British Library"),
    ("Royal Botanic Gardens", (), "the Royal Botanic Gardens"),
    ("National Gallery", (), "the National Gallery"),
    ("Kew Gardens", (), "Kew Gardens"),  # the reviewed exception
    # subtitled titles of untyped works are quoted (and take no article)
    ("Léon: The Professional", (), "\"Léon: The Professional\""),  # demo Q484675
    ("Three Colours: Blue", (), "\"Three Colours: Blue\""),
    # ... but a typed non-work with a colon is not a title
    ("CTV: The Comedy Network", ("Q15265344",), "CTV: The Comedy Network"),
    # people never
    ("National Hero", ("Q5",), "National Hero"),
])
def test_article_classes(label: str, types: tuple[str, ...], written: str) -> None:
    assert surface(ent(label, types).name, "It was about ") == written


def test_demo_classes_take_the_article() -> None:
    demo = _demo_entities("Q484675", "Q46014043", "Q270794", "Q6397893")
    assert fill("[X] is about [Y].", "It", demo["Q484675"].name) == 'It is about "Léon: The Professional".'
    assert fill("[X] is about [Y].", "It", demo["Q46014043"].name) == (
        "It is about the 2017 Washington train derailment.")
    assert fill("[X] is about [Y].", "It", demo["Q270794"].name) == (
        "It is about the National Academy of Sciences.")
    assert fill("[X] is about [Y].", "It", demo["Q6397893"].name) == "It is about Kew Gardens."


@pytest.mark.parametrize(("label", "types", "at_end"), [
    ("Washington, D.C.", ("Q515",), " Washington, DC."),
    ("Arsenal F.C.", ("Q12973014",), " Arsenal FC."),
    ("Paris S. G.", ("Q12973014",), " Paris SG."),
    ("Apple Inc.", ("Q4830453",), " Apple Inc."),
    ("Robert Downey Jr.", ("Q5",), " Robert Downey Jr."),
    ("Paris", ("Q515",), " Paris."),
])
def test_every_candidate_pays_for_the_sentence_end(label: str, types: tuple[str, ...],
                                                    at_end: str) -> None:
    """A name ending in an abbreviation's period is written without it before the sentence's
    period, so the last character scored is the sentence's own period for every candidate,
    never a period that the abbreviation needs anyway; mid-sentence it keeps its periods."""
    e = ent(label, types)
    c = cloze("[X] plays for [Y].", "Someone")
    cont, eos = EndMarker("tail", ".").continuation(c, e.name)
    assert (cont, eos) == (at_end, False)
    assert c.sentence(e.name) == f"Someone plays for{at_end}"
    assert fill("[X] is in [Y].", e.name, "Europe").startswith(surface(e.name, ""))  # subject: as is
    q = make_cloze("Where does [X] play? [Y]", "Someone")  # a question: the end marker's text
    assert EndMarker("tail", ".").continuation(q, e.name) == (at_end, False)
    assert EndMarker("eos").continuation(c, e.name) == (f" {surface(e.name, 'for ')}", True)


def test_the_new_rules_mark_scores_of_the_old_rules_stale(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 41 changed what careful sentences say (articles, sentence ends, each sentence
    once): the rules' version in the configuration differs from the one stored scores of the
    old rules (version 1) carry, so they are re-scored, never mixed."""
    from kgprobe.probing.measures import registry
    from kgprobe.probing.measures.catalog import create
    from kgprobe.probing.measures.registry import RunContext

    m = create("kmin", {})
    now = m.config(RunContext())
    monkeypatch.setattr(registry, "CAREFUL_RULES_VERSION", 1)
    assert m.config(RunContext()) != now
    assert now["verbalizer_rules"] == 2
