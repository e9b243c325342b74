"""Distractor strategies: the contract of one way to find a fact's distractors
(:class:`DistractorStrategy`) and the registry of them (:data:`STRATEGIES`, entry-point group
``kgprobe.strategies``).

``kgprobe distractors -s NAME``, ``kgprobe probe --strategy NAME`` (and ``kmin:strategy=NAME``),
the probe configuration's check and the CLI's help all read the registry, so a new strategy is
one class in one module (or one installed package). The built-ins (random, sem, temp+sem,
appropt; :mod:`kgprobe.probing.distractors`) are lazy entries: this module imports nothing heavy,
so the CLI lists them in its help without importing the graph code.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from kgprobe.plugins import STRATEGIES as STRATEGY_GROUP
from kgprobe.plugins import Registry

if TYPE_CHECKING:  # pragma: no cover
    from kgprobe.graph.client import Graph
    from kgprobe.graph.distractors import FactContext
    from kgprobe.probing.distractors import Distractor, Prefetched
    from kgprobe.probing.engine import Engine
    from kgprobe.probing.measures.common import EndMarker
    from kgprobe.probing.semantic import SemanticIndex


@dataclass
class Search:
    """What a strategy may use besides the graph and the fact: the run's seed and reference
    date (a sort key), the semantic index (when ``needs_index``), the model's engine, template
    and end marker (when ``needs_model``) and what a probe batch read for the fact already."""

    seed: int = 0
    at: int | None = None
    index: SemanticIndex | None = None
    engine: Engine | None = None
    template: str | None = None
    end: EndMarker | None = None
    prefetched: Prefetched | None = None


class DistractorStrategy:
    """One way to find up to ``n`` ranked distractors of a fact f = (s, r, o).

    A plug-in subclasses it, sets ``name`` and ``summary`` and writes :meth:`find`;
    ``@STRATEGIES.register`` (or an entry point of the group ``kgprobe.strategies``) makes
    ``--strategy NAME`` use it. The strategy's name goes into the keys of the scores it serves
    (``kmin_temp_sem_n5``), so two strategies never share stored scores."""

    #: the name ``--strategy`` takes
    name: ClassVar[str] = ""
    #: one line: what makes a candidate a distractor (``kgprobe plugins``, the help)
    summary: ClassVar[str] = ""
    #: reads the semantic index (the run loads it, building it when stale, before the facts)
    needs_index: ClassVar[bool] = False
    #: asks the probed model (its engine): such distractors depend on the model, so they
    #: cannot be exported into a probe set
    needs_model: ClassVar[bool] = False
    #: what a probe batch reads for all its facts in one round trip per need before the
    #: strategy runs (:func:`kgprobe.probing.distractors.prefetch`), answered through
    #: ``search.prefetched``; a strategy that sets none is asked per fact, as it asks:
    #: a seeded draw from Ω(f) (``prefetched.random``)
    draws_random: ClassVar[bool] = False
    #: the past objects of (s, r), which come first (``prefetched.temporal``)
    past_first: ClassVar[bool] = False
    #: o's nearest neighbours in the semantic index, checked against Ω(f) (``prefetched.plan_a``,
    #: ``prefetched.omega``, ``prefetched.typed``); ``needs_index`` too
    searches_neighbours: ClassVar[bool] = False

    def find(self, graph: Graph, ctx: FactContext, n: int,
             search: Search) -> tuple[list[Distractor], str | None]:
        """Up to ``n`` distractors of the fact ``ctx`` (rank 1 the hardest), and why there are
        fewer than ``n`` (None when there are ``n``): an empty list is an answer, not an error."""
        raise NotImplementedError


#: every distractor strategy by name: the built-ins, then the plug-ins of ``kgprobe.strategies``
STRATEGIES: Registry[type[DistractorStrategy]] = Registry(
    "distractor strategy", STRATEGY_GROUP, DistractorStrategy,
    requires=("summary",), overrides=("find",),
    describe=lambda cls: cls.summary)

#: the built-ins: name -> (class in :mod:`kgprobe.probing.distractors`, summary); the classes
#: take their summaries from here, so the listing says the same before and after the import
BUILTIN_STRATEGIES = {
    "random": ("RandomStrategy", "a seeded sample of the entities sharing o's type (Ω(f))"),
    "sem": ("SemanticStrategy", "the members of Ω(f) closest to o in the semantic index"),
    "temp+sem": ("TemporalSemanticStrategy",
                 "past objects of (s, r), most recent first, then semantic ones"),
    "appropt": ("ApproptStrategy",
                "the model's constrained beam search over the labels of Ω(f) (needs the model)"),
}
for _name, (_cls, _summary) in BUILTIN_STRATEGIES.items():
    STRATEGIES.add_lazy(_name, f"kgprobe.probing.distractors:{_cls}", _summary)

#: the built-in strategies' names, in order
BUILTIN = tuple(BUILTIN_STRATEGIES)


def strategy_class(name: str) -> type[DistractorStrategy]:
    """The strategy called ``name`` (plug-ins loaded); an unknown one is one line that lists
    the known ones."""
    return STRATEGIES.lookup(name, "a strategy of another package: install it, or kgprobe --plugin MODULE")


def help_text(default: str | None = None) -> str:
    """The built-in names for a CLI help line, ``default`` marked: ``random, sem, temp+sem
    (default) or appropt``, and where plug-ins' come from."""
    names = [f"{n} (default)" if n == default else n for n in BUILTIN]
    return ", ".join(names[:-1]) + " or " + names[-1] + ", or a plug-in's (kgprobe plugins)"
