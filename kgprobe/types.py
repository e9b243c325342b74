"""kgprobe's vocabulary: the identities that travel between layers, named (issue 39, step 7).

Aliases only — a QID is still a ``str`` — so that a signature says which string it means (in
the style of lm-pub-quiz's ``types.py``). Imports nothing of kgprobe: every layer may use it.
"""

from __future__ import annotations

from typing import TypeAlias

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
