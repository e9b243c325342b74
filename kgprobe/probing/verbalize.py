"""Fill relation templates with labels: full sentences and cloze prompts (pure functions).

Whitespace convention shared with the scoring engine (docs/design.md §3): a cloze *context* never
ends in whitespace; the space that separated it from the object slot moves to the front of the
*continuation* (``"Paris was born in"`` + ``" France"``).

Two verbalizers (docs/measures.md, "Verbalizer"):

- ``raw``: labels go into templates as they are (what the DFA paper and LAMA do). A plain
  ``str`` label is always written raw.
- ``careful``: a :class:`Name` (a label that carries how a careful writer writes it) gets the
  definite article where English needs one ("a citizen of the United States of America"),
  a capital at the start of a sentence ("Cross competes in boxing.") and double quotes when
  it is the title of a creative work. The article is part of the object's *continuation*:
  each candidate is scored in its own correct form, so a distractor that needs no article
  is never charged for the true object's article, and vice versa.

:func:`name` decides the form of one label from the entity's data (its P31 types, its
aliases, the label's own shape); the rules are listed next to each table below.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass

from kgprobe.errors import ConfigError, InputError
from kgprobe.records import STYLE_OBJECT_LAST, derive_style

SUBJECT = "[X]"
OBJECT = "[Y]"

#: The verbalizers a run can choose (``ProbeConfig.verbalizer``).
VERBALIZERS = ("careful", "raw")
#: Version of the careful rules, in the configuration hash of careful runs: a change of the
#: rules (a new head noun, a new class) must mark scores written under the old ones stale.
CAREFUL_RULES_VERSION = 2

# --- classes (Wikidata QIDs of P31 types) ----------------------------------------------------------

HUMAN = "Q5"
#: Classes whose names never take "the": people (names of people never get an article), and
#: the demo's classes of common nouns or bare names (languages, sports, continents, causes of
#: death, positions, instruments: templates that want "the" say it, "plays the [Y]").
NO_ARTICLE_CLASSES = frozenset({
    HUMAN, "Q34770", "Q349", "Q5107", "Q1931388", "Q4164871", "Q34379", "Q1288568",
    "Q33742", "Q315",  # modern language, natural language, language
})
#: Classes whose names take "the" whatever their form: rivers, seas and other bodies of
#: water ("the Danube", "the Rhine", "the Adriatic Sea"; not lakes: "Lake Superior") and
#: mountain ranges ("the Dolomites", "the Sierra Nevada", "the Drakensberg").
THE_CLASSES = frozenset({
    "Q15324", "Q4022", "Q165", "Q9430", "Q23397", "Q46831", "Q39594", "Q37901",
    # body of water, river, sea, ocean, lake (lakes: see _LAKE), mountain range, bay, strait
})
SPORTS_TEAM = frozenset({"Q12973014", "Q476028", "Q847017", "Q13393265", "Q17270000"})
#: Creative works, whose labels are titles and are quoted ("“Nikita” was directed by …"): film,
#: literary work, book, novel, written work, short story, poem, play, television series,
#: television program, song, single, album, musical work, painting, work of art, video game,
#: sculpture, opera, creative work.
WORK_CLASSES = frozenset({
    "Q11424", "Q7725634", "Q571", "Q8261", "Q47461344", "Q49084", "Q5185279", "Q25379",
    "Q5398426", "Q15416", "Q7366", "Q134556", "Q482994", "Q105543609", "Q2188189", "Q3305213",
    "Q838948", "Q7889", "Q860861", "Q1344", "Q17537576", "Q24856", "Q21191270", "Q1259759",
    "Q24862", "Q506240", "Q202866", "Q7725310",  # short film, TV film, animated film, series of works
})
#: Where the graph declares no type for an entity, the class that the relation's subjects
#: have in Wikidata (its subject-type constraint), used only to quote titles: the subjects of
#: "author", "director", "screenwriter", "original broadcaster" and "original language of
#: film or TV show" are creative works. Relations whose subjects mix works with other
#: things (P170 "creator": paintings and fictional characters) are left out.
WORK_SUBJECT_RELATIONS = frozenset({"P50", "P57", "P58", "P449", "P364"})
#: Likewise, relations whose subjects Wikidata constrains to humans (subject type constraint
#: Q5): an untyped subject of these is a person, written as it is ("Gabrielle Union" is
#: no union, "Beatrix of the Netherlands" no country).
PERSON_SUBJECT_RELATIONS = frozenset({
    "P19", "P20", "P26", "P27", "P39", "P54", "P69", "P102", "P103", "P108", "P509", "P1303",
    "P1412", "P3373", "P6886",
})

# --- the rules for "the" ---------------------------------------------------------------------------


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


#: Head nouns that make a proper name a description that takes "the" wherever they stand last
#: ("the Czech Republic", "the Republican Party", "the European Union", "the Indian Ocean").
#: Words that are also common surnames (Court, Bay, Church, Hill) are left out: a label of
#: unknown type could be a person.
THE_HEADS = _words("""
Republic Kingdom Union States Emirates Islands Isles Federation Empire Confederation
Commonwealth Caliphate Sultanate Principality Dynasty Party Coalition League Alliance Front
Sea Ocean Gulf Channel Strait Canal Mountains Alps Range Desert Peninsula River
Agency Bureau Service Administration Authority Academy Institute Institution Association
Society Committee Council Commission Company Corporation Organisation Organization Navy Army
Forces Corps Nations Museum Parliament Government Assembly Senate Foundation Trust Klan
Orchestra Line Railway Centre Center Hotel System Movement Convention
Library Gallery Gardens Observatory Archives
""")
#: Heads that take "the" only in an "X of Y" name: "the University of Oxford" but "Harvard
#: University"; "the Supreme Court of the United States"; "the City of Brussels"; "the Bay
#: of Bengal". The head must be the word right before "of", so "Catherine of Aragon" stays bare.
OF_HEADS = THE_HEADS | _words("""
University College School Court City State Bay Lake Isle Province Region District County
Duchy Republic Prefecture Department Ministry Order Church Office Bank Board House
""")
#: Plural names and names whose "the" is idiomatic, whatever their class.
THE_NAMES = _words("""
Netherlands Philippines Bahamas Maldives Seychelles Comoros Gambia Americas Balkans Andes
Himalayas Alps Pyrenees Rockies Dolomites Hebrides Azores Falklands Midlands Caucasus Sahara
Congo Vatican
""")
_LAKE = re.compile(r"^(Lake|Loch|Mount|Mont|Monte)\s", re.UNICODE)
_NATIONAL_TEAM = re.compile(r"\bnational\b.*\bteam\b|\bteam$", re.IGNORECASE)
_INITIALISM = re.compile(r"^(?:[A-Z]\.?){2,6}$")
_CLUB_MARK = re.compile(r"\b(F\.?C\.?|A\.?F\.?C\.?|S\.?C\.?|C\.?F\.?|CF|FC|SK|BK|IF|AC|CD|SV)\b")
_LEADING_THE = re.compile(r"^the\s+", re.IGNORECASE)
#: A year (or season, "2019–20") leading the name of an event or edition: "the 1998 FIFA World
#: Cup", "the 2012 Summer Olympics", "the 2017 Washington train derailment".
_YEAR_LED = re.compile(r"^\d{4}(?:[–/-]\d{2,4})?\s+\S")
#: A plural proper name ("Bulls", "Soviets", "Republicans", "76ers"): with "the" in running
#: text when the entity is known as "The …".
_PLURAL = re.compile(r"^\S*[^\Ws](?<!u)(?<!i)s$")

#: The reviewed exceptions where neither the types nor the label's shape decide (each one read
#: in context; docs/templates.md): names whose shape calls for "the" but which English writes
#: bare, and names that take "the" which no rule derives.
NO_THE_LABELS = frozenset({
    "kew gardens",  # "Kew Gardens is a botanical garden" (but "the Royal Botanic Gardens")
    "prince philip, duke of edinburgh",  # a person (untyped in the demo graph) with a title
})
THE_LABELS = frozenset({
    "ivory coast", "white house", "hague", "vatican",
})


@dataclass(frozen=True)
class Facts:
    """What the graph says about an entity that decides how its names are written."""

    types: frozenset[str] = frozenset()
    #: labels the entity is also known by with a leading "the" ("The University of Sydney"),
    #: lower-cased without it: Wikidata's evidence that the *main label* takes the article
    #: (never evidence for another alias: "The Arsenal" does not make "plays for the Arsenal")
    the_forms: frozenset[str] = frozenset()
    #: the entity's main label takes "the" (its initialisms then do too: "the USA", "the UK")
    main_takes_the: bool = False
    work: bool = False
    #: the entity's main label, lower-cased (the one name a "The …" alias vouches for)
    main: str = ""


class Name(str):
    """A label that knows how a careful writer writes it: with "the", or as a quoted title.

    It compares and hashes as the plain label, so keys, deduplication and aliases are unchanged;
    only :func:`fill` and :class:`Cloze` write it differently. A plain ``str`` stays raw.
    """

    article: bool
    work: bool
    person: bool

    def __new__(cls, text: str, *, article: bool = False, work: bool = False,
                person: bool = False) -> Name:
        obj = super().__new__(cls, text)
        obj.article, obj.work, obj.person = article, work, person
        return obj

    def __reduce__(self) -> tuple[object, ...]:  # pickling keeps the form (multiprocessing)
        return (_make_name, (str(self), self.article, self.work, self.person))


def _make_name(text: str, article: bool, work: bool, person: bool) -> Name:
    return Name(text, article=article, work=work, person=person)


def entity_facts(label: str, aliases: Iterable[str] = (), types: Iterable[str] = (),
                 subject_of: str | None = None) -> Facts:
    """:class:`Facts` of an entity from its graph row; ``subject_of`` is a relation it is the
    subject of (its subjects' class stands in for missing types: works, people)."""
    ts = frozenset(types)
    if not ts and subject_of in PERSON_SUBJECT_RELATIONS:
        ts = frozenset({HUMAN})
    the_forms = frozenset(_LEADING_THE.sub("", a).strip().lower() for a in aliases
                          if a and _LEADING_THE.match(a))
    work = bool(ts & WORK_CLASSES) or (not ts and (
        subject_of in WORK_SUBJECT_RELATIONS
        or ": " in label))  # an untyped "Léon: The Professional": a subtitled title
    main = label.strip().lower()
    base = Facts(ts, the_forms, False, work, main)
    return Facts(ts, the_forms, _takes_the(label, base), work, main)


@functools.lru_cache(maxsize=1 << 16)  # pure; called per candidate per cloze sentence
def name(label: str, facts: Facts) -> Name:
    """``label`` with the form a careful writer gives it (see the module doc)."""
    return Name(label, article=_takes_the(label, facts), work=facts.work,
                person=HUMAN in facts.types)


def _takes_the(label: str, f: Facts) -> bool:
    """Whether a careful writer puts "the" before ``label`` in running text."""
    text = label.strip()
    if not text or f.work or f.types & NO_ARTICLE_CLASSES or _LEADING_THE.match(text):
        return False  # people, common nouns, titles; "The Bahamas" carries its own
    low = text.lower()
    if low in NO_THE_LABELS:
        return False
    if low in THE_LABELS:
        return True
    if low in f.the_forms and (
            _PLURAL.match(text) and not text[:1].islower() or  # "the Bulls", "the Soviets"
            low == f.main and not f.types & SPORTS_TEAM):  # "the White House"; teams: below
        return True  # Wikidata knows the name as "The <label>"
    if _YEAR_LED.match(text):
        return True  # "the 1998 FIFA World Cup", "the 2012 Summer Olympics"
    if f.types & THE_CLASSES:
        return not _LAKE.match(text)
    if _INITIALISM.match(text):
        return f.main_takes_the and (len(text.replace(".", "")) <= 3
                                     or not re.search(r"[AEIOU]", text))
    words = text.replace(",", " ").split()
    if not words[0][:1].isupper() or ": " in text:
        return False  # a common noun phrase ("independent politician"); a subtitled title
    if f.types & SPORTS_TEAM:
        if _NATIONAL_TEAM.search(text):
            return True  # "the Brazil national football team"
        last = words[-1]
        return (not _CLUB_MARK.search(text) and len(words) > 1 and last[:1].isupper()
                and text.isascii()  # English plural nicknames, not "… de Desportos"
                and last.endswith("s") and not last.endswith(("ss", "us", "is")))  # the Chicago Bulls
    head, of, _ = text.partition(" of ")
    if not of and words[-1] in THE_NAMES:
        return True  # "the Netherlands", "the Greater Caucasus"; not "Beatrix of the Netherlands"
    if of:
        if words[0] == "National":
            return True  # "the National Library of Wales", "the National Academy of Sciences"
        return head.split()[-1] in OF_HEADS if head.split() else False
    return words[-1] in THE_HEADS and len(words) > 1


# --- writing a name into a template ------------------------------------------------------------------

_DETERMINER = _words("the a an this that these those its his her their our my your whose")
#: Words that end an appositive look-back ("is a member of the party [Y]" is an appositive;
#: "is located in the country of [Y]" is not: "of" ends it).
_STOP = _words("""
of in on at by for to with from into onto as than and or is was are were be been has have had
does did do lies flows empties plays played speaks wrote holds held named called
""")


@functools.lru_cache(maxsize=1 << 12)  # pure; one template prefix serves every candidate
def after_determiner(before: str) -> bool:
    """Whether the words right before a slot already determine it: "the [Y]", "the party [Y]",
    "its capital [Y]" (an appositive after a noun with its own determiner), so the name gets
    no article of its own."""
    words = re.findall(r"[\w'’-]+", before.lower())
    for w in reversed(words[-4:]):
        if w in _DETERMINER:
            return True
        if w in _STOP or w.endswith("'s"):
            return False
    return False


@functools.lru_cache(maxsize=1 << 12)
def sentence_initial(before: str) -> bool:
    """Whether a slot starts a sentence: nothing before it, or a sentence end ("? ")."""
    b = before.rstrip()
    return not b or b.endswith((".", "?", "!", ":", "\n"))


def _capitalize(text: str) -> str:
    """First letter upper-cased, except camel-case brand names ("iPhone", "eBay", "tvN")
    whose own spelling wins; "de Gaulle" and "cross" become "De Gaulle" and "Cross"."""
    first = text.split(" ", 1)[0]
    if first[:1].islower() and any(c.isupper() for c in first[1:]):
        return text
    return text[:1].upper() + text[1:]


#: The initialism that ends a name ("D.C.", "F.C.", "U. S. A."), written without its periods
#: before the sentence's own period.
_FINAL_INITIALISM = re.compile(r"(?<![\w.])((?:[A-Z]\. ?){1,5}[A-Z]\.)$")


def period_free(text: str) -> str:
    """``text`` without the abbreviation period it ends in, as it is written before the
    sentence's own period: "Washington, DC", "Arsenal FC", "Apple Inc", "Robert Downey Jr".

    English writes one period where an abbreviation ends a sentence, and then that period no
    longer tells that the sentence ends ("D.C." pays ~0.3 nats for it, where "Paris." pays
    up to 4.9): the periodless style (AP/British: "DC", "FC", "Inc") keeps the sentence's
    period a real sentence end, one token of the same kind for every candidate
    (docs/measures.md, "Sentence ends")."""
    m = _FINAL_INITIALISM.search(text)
    if m:
        return text[:m.start()] + m.group(1).replace(".", "").replace(" ", "")
    return text.rstrip(".").rstrip()


def surface(label: str, before: str = "", after: str = "") -> str:
    """How ``label`` is written after the text ``before`` (the template up to its slot) and
    before ``after`` (what follows the slot, e.g. the sentence's period).

    A plain ``str`` is written raw. A :class:`Name` gets "the" unless the template already
    determines the slot, a leading "The" lower-cased mid-sentence ("a citizen of the
    Bahamas"; dropped after a template's own "the"), quotes for a work's title, a capital
    at the start of a sentence, and before a period no abbreviation period of its own
    (:func:`period_free`)."""
    if not isinstance(label, Name):
        return label
    text = str(label)
    if after.startswith(".") and text.endswith(".") and not label.work:
        text = period_free(text) or text
    initial = sentence_initial(before)
    determined = after_determiner(before)
    if label.work:
        text = f'"{text}"'
    elif not label.person:  # a person's name is written as it is ("The Weeknd")
        m = _LEADING_THE.match(text)
        if m:
            text = text[m.end():] if determined else "the " + text[m.end():]
        elif label.article and not determined:
            text = "the " + text
    return _capitalize(text) if initial else text


@dataclass(frozen=True)
class Cloze:
    """An object-last prompt cut before the object: score ``continuation(obj)`` after ``context``.

    ``tail`` is what followed the object slot in the template (usually ``"."``); continuation
    scoring leaves it out so that only the object's tokens are scored. A careful object's
    article is in the continuation (" the United States of America"), not the context.
    """

    context: str
    separator: str
    tail: str

    def continuation(self, obj: str, after: str = "") -> str:
        """The object as written after the context; ``after`` is what will follow it (the
        end marker's period: a careful name then drops its own abbreviation period)."""
        return f"{self.separator}{surface(obj, self.context + self.separator, after)}"

    def sentence(self, obj: str) -> str:
        return f"{self.context}{self.continuation(obj, self.tail)}{self.tail}"


def fill(template: str, subject: str, obj: str | None = None) -> str:
    """The template with the subject (and the object, if the template has a slot for it)."""
    if SUBJECT not in template:
        raise InputError(f"template has no subject slot {SUBJECT}: {template!r}")
    if OBJECT in template and obj is None:
        raise InputError(f"template needs an object label: {template!r}")
    out: list[str] = []
    rest = template
    while True:
        i, j = rest.find(SUBJECT), rest.find(OBJECT) if obj is not None else -1
        hits = [(k, s) for k, s in ((i, SUBJECT), (j, OBJECT)) if k >= 0]
        if not hits:
            out.append(rest)
            return "".join(out)
        k, slot = min(hits)
        out.append(rest[:k])
        value: str = subject if slot == SUBJECT else obj  # type: ignore[assignment]
        rest = rest[k + len(slot):]
        out.append(surface(value, "".join(out), rest))


def cloze(template: str, subject: str, style: str | None = None) -> Cloze:
    """Cut an object-last template before its object slot.

    Raises ``InputError`` for a template whose object is not last: continuation scoring of such
    a template would silently ignore the words after the object.
    """
    actual = derive_style(template)
    if (style is not None and style != STYLE_OBJECT_LAST) or actual != STYLE_OBJECT_LAST:
        raise InputError(f"not an object-last template (style {style or actual}): {template!r}")
    head, _, tail = template.partition(OBJECT)
    filled = fill(head, subject)
    context = filled.rstrip()
    separator = filled[len(context) :]
    # Collapse any run of whitespace to the single space the scoring engine expects.
    separator = " " if separator else ""
    return Cloze(context=context, separator=separator, tail=tail)


def check_verbalizer(value: str) -> str:
    """``value`` if it names a verbalizer, else a ``ConfigError`` listing them."""
    if value not in VERBALIZERS:
        raise ConfigError(f"unknown verbalizer {value!r}; use {' or '.join(VERBALIZERS)}")
    return value
