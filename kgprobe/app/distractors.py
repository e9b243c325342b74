"""``kgprobe distractors``: the distractors of one fact, ranked, each with why it qualified; the
same function from the CLI and :mod:`kgprobe.api`, options checked before the graph is
contacted."""

from __future__ import annotations

from typing import Any

from kgprobe.app.options import check_date, check_number, check_seed
from kgprobe.errors import ConfigError
from kgprobe.probing.distractors import DistractorList, distractors_command
from kgprobe.records import template_too_long


def distractors(subject: str, relation: str, object: str | None = None, *, strategy: str = "temp+sem",
                n: int = 5, seed: int = 0, at: str | None = None, model: str | Any | None = None,
                template: str | None = None, index_dir: str | None = None) -> DistractorList:
    """The distractors of (``subject``, ``relation``, ``object``: default the one valid at
    ``at``), found by ``strategy``; ``model`` and ``template`` for appropt."""
    check_number("-n", n, 1)
    check_seed(seed)
    check_date(at)
    if template is not None and template_too_long(template):
        raise ConfigError(f"--template: {template_too_long(template)}")
    return distractors_command(subject, relation, object, strategy=strategy, n=n, seed=seed, at=at,
                               model=model, template=template, index_dir=index_dir)
