"""Knowledge measures from the four papers, on the shared scoring engine.

Each measure builds scoring requests and does the arithmetic on the results; no measure calls a
model (docs/design.md §1). Modules: :mod:`.distractors` (Pl, K, Min@n/Avg@n), :mod:`.baselines`
(Probability, Precision@n, KaRR, ROUGE-L, BERTScore-style, LLM-as-judge), :mod:`.belief`
(BELIEF, BELIEF-ICL), :mod:`.information` (entropy, KL, instillation), :mod:`.factor`
(FACTOR), :mod:`.evaluation` (Kendall's tau, robustness, k-fold grid search). Formulas and
choices: docs/measures.md.
"""

from kgprobe.probing.measures.common import EndMarker, Entity, Fact, Runner, end_marker_for

__all__ = ["EndMarker", "Entity", "Fact", "Runner", "end_marker_for"]
