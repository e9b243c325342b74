"""kgprobe's vocabulary: the identities that travel between layers, named (issue 39, step 7).

Aliases only — a QID is still a ``str`` — so that a signature says which string it means (in
the style of lm-pub-quiz's ``types.py``). Two identities are composite and have a record with
one ``compose`` and one ``parse`` (issue 39, item 4): :class:`MeasureKeyParts` (a measure key)
and :class:`ScoreProperty` (a FACT property name ``<kind>__<model key>__<measure key>``).
Imports only :mod:`kgprobe.errors`: every layer may use it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, TypeAlias

from kgprobe.errors import ConfigError

#: a Wikidata item id, ``"Q42"``
QID: TypeAlias = str
#: a Wikidata property id (a relation), ``"P27"``
PID: TypeAlias = str
#: a FACT edge's key, ``"Q42$P27"`` (a statement's id)
FactKey: TypeAlias = str
#: the model part of score property names (weights and dtype), ``"smollm2_135m"``
ModelKey: TypeAlias = str
#: a registered measure's name, ``"kmin"``
MeasureName: TypeAlias = str
#: the measure part of score property names (name and every non-default setting),
#: ``"kmin_temp_sem_n5"``
MeasureKey: TypeAlias = str
#: a ProbeRun's id (a UUID hex)
RunId: TypeAlias = str
#: 16 hex digits of a canonical JSON's SHA-256 (``kgprobe.provenance.config_hash``)
ConfigHash: TypeAlias = str


# --- genuinely free-form maps (issue 39, item 4) ---------------------------------------------
# Everything with known keys has a record type (a dataclass or a TypedDict next to its writer).
# These four aliases are the maps whose keys are open by nature; each use says which one it is.

#: one JSON document as parsed (a user's file, an HTTP body, a Wikidata entity line): its reader
#: checks the keys it needs, and any others are kept or ignored as the format allows
JSONObject: TypeAlias = dict[str, Any]
#: the parameter map of one Cypher query (the driver's ``parameters``): keys are the query's
#: ``$names``, values any Bolt value
CypherParams: TypeAlias = dict[str, Any]
#: one row as the driver returns it for a query whose columns the caller chose (``Graph.read``)
GraphRow: TypeAlias = dict[str, Any]
#: a node's or edge's property map: open by design (score properties are named per model and
#: measure, loaders keep the qualifiers they find)
Properties: TypeAlias = dict[str, Any]

# --- composite identities: one writer and one reader each ------------------------------------

_PART = re.compile(r"^[a-z0-9]+(?:_[a-z0-9]+)*\Z")
_N = re.compile(r"n(\d+)\Z")
#: the longest model or measure key a property name may carry
MAX_PART = 64
#: what a FACT property name per (model, measure) pair holds (kgprobe/graph/probe_runs.py)
SCORE_KINDS = ("score", "known", "stale", "run", "cfg")


def check_part(part: str) -> str:
    """Refuse anything that is not already a clean key part (the guard before string building)."""
    if not isinstance(part, str) or len(part) > MAX_PART or not _PART.fullmatch(part):
        raise ConfigError(f"not a valid score key part (want [a-z0-9_], no '__'): {part!r}")
    return part


@dataclass(frozen=True)
class MeasureKeyParts:
    """A measure key's parts: ``<name>[_<strategy>_n<n>][_<rest>]``, e.g. ``kmin_temp_sem_n5_o1``.

    ``strategy`` and ``n`` are set together (a distractor measure) or not at all; ``rest`` is
    every non-default setting, ``_``-joined. All parts are clean key parts. A key does not say
    where a multi-word name ends, so :meth:`parse` takes the name's first word unless told the
    name; the distractor count is the first ``n<digits>`` word after a strategy."""

    name: str
    strategy: str | None = None
    n: int | None = None
    rest: str = ""

    def __post_init__(self) -> None:
        check_part(self.name)
        if (self.strategy is None) != (self.n is None):
            raise ConfigError(f"a measure key has a strategy and n together or neither: {self!r}")
        if self.strategy is not None:
            check_part(self.strategy)
        if self.n is not None and (not isinstance(self.n, int) or self.n < 0):
            raise ConfigError(f"a measure key's n is a count, not {self.n!r}")
        if self.rest:
            check_part(self.rest)

    def compose(self) -> MeasureKey:
        """The key, checked: ``kmin`` + ``temp_sem`` + 5 -> ``kmin_temp_sem_n5``."""
        words = [self.name]
        if self.strategy is not None:
            words += [self.strategy, f"n{self.n}"]
        if self.rest:
            words.append(self.rest)
        return check_part("_".join(words))

    @classmethod
    def parse(cls, key: str, name: str | None = None) -> MeasureKeyParts:
        """The parts of ``key``; ``name``: the measure's name part where known (it may have
        ``_`` in it, e.g. ``precision_at_n``). A key that is not one is a ConfigError."""
        try:
            check_part(key)
        except ConfigError:
            raise ConfigError(f"not a measure key (want [a-z0-9_], no '__'): {key!r}") from None
        if name is not None and key != name and not key.startswith(name + "_"):
            raise ConfigError(f"measure key {key!r} is not one of measure {name!r}")
        name = name if name is not None else key.split("_", 1)[0]
        words = key[len(name) + 1:].split("_") if key != name else []
        for i, word in enumerate(words[1:], start=1):
            m = _N.fullmatch(word)
            if m:
                return cls(name, "_".join(words[:i]), int(m.group(1)), "_".join(words[i + 1:]))
        return cls(name, rest="_".join(words))


@dataclass(frozen=True)
class ScoreProperty:
    """A FACT property name per (model, measure) pair: ``<kind>__<model_key>__<measure_key>``
    (``score__smollm2_135m__kmin_temp_sem_n5``), and ``extra``, a measure's further value
    appended to a score's name (``score__m__belief_rank``: ``extra="rank"``). :meth:`parse`
    cannot tell an extra from the key's last word, so it reads one as part of the key."""

    kind: str
    model_key: ModelKey
    measure_key: MeasureKey
    extra: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in SCORE_KINDS:
            raise ConfigError(f"not a score property kind: {self.kind!r} (one of {', '.join(SCORE_KINDS)})")
        check_part(self.model_key)
        check_part(self.measure_key)
        if self.extra is not None:
            if self.kind != "score":
                raise ConfigError(f"only a score property has extra values, not {self.kind!r}")
            check_part(self.extra)

    def compose(self) -> str:
        """The property name."""
        name = f"{self.kind}__{self.model_key}__{self.measure_key}"
        return name if self.extra is None else f"{name}_{self.extra}"

    @classmethod
    def parse(cls, name: str) -> ScoreProperty:
        """The record behind a property name; anything else is one ConfigError line."""
        parts = name.split("__") if isinstance(name, str) else []
        if len(parts) != 3 or parts[0] not in SCORE_KINDS:
            raise ConfigError(f"not a score property (want <{'|'.join(SCORE_KINDS)}>__<model>__<measure>): "
                              f"{name!r}")
        try:
            return cls(*parts)
        except ConfigError as e:
            raise ConfigError(f"not a score property: {name!r}: {e}") from None
