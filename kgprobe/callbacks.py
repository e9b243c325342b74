"""A Hugging Face ``TrainerCallback`` that scores a probe set during training (issue 42 #4).

Kept in its own module: ``import kgprobe`` never imports it (nor transformers' Trainer), and
it needs nothing but transformers, which the scoring engine needs anyway. It plays the part of
lm-pub-quiz's Trainer callback, with a probe set (``kgprobe export``, or the shipped ``demo``)
as the fixed dataset and no graph server beside the training job::

    from kgprobe.callbacks import ProbeSetCallback

    trainer = Trainer(model=model, args=args, train_dataset=ds, processing_class=tokenizer)
    ProbeSetCallback("demo", every=500).attach(trainer)
    trainer.train()   # every 500 steps: kgprobe/<relation>/mean, .../known_share in the logs

Every ``every`` optimizer steps (``state.global_step``), on the main process, the model is
scored as it is at that step (in memory, in its dtype and on its device, no score cache:
:func:`kgprobe.app.probe_sets.score_probe_set`), put back in training mode, and the report's
per-relation figures are logged through ``trainer.log``: they reach ``state.log_history`` and
every logger the Trainer reports to (TensorBoard, W&B, ...). docs/probe-sets.md.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any

from kgprobe.errors import ConfigError

try:
    from transformers import TrainerCallback
except ImportError as exc:  # pragma: no cover - transformers is a dependency of the engine
    raise ConfigError("kgprobe.callbacks needs transformers: pip install transformers") from exc

if TYPE_CHECKING:  # pragma: no cover
    from kgprobe.app.probe_sets import SetResults


class ProbeSetCallback(TrainerCallback):  # type: ignore[misc]
    """Score ``probe_set`` (a path, or ``"demo"``) every ``every`` steps and log, per relation
    and for ``all``, the report measure's ``mean``, ``known_share`` and ``staleness`` as
    ``<prefix>/<relation>/<figure>``, with ``<prefix>/seconds`` (the call's wall time).

    ``tokenizer``: default the Trainer's ``processing_class``; ``measure``: the measure key of
    the figures (default the set's first); ``model_name``: the name in the run's record.
    ``last``: the latest call's :class:`~kgprobe.app.probe_sets.SetResults` (the per-fact
    and per-relation DataFrames; earlier calls' are not kept), ``last_step`` its step."""

    def __init__(self, probe_set: str | os.PathLike[str] = "demo", *, every: int,
                 tokenizer: Any = None, measure: str | None = None, model_name: str | None = None,
                 prefix: str = "kgprobe") -> None:
        from kgprobe.probing.probe_set import read_set

        if not isinstance(every, int) or isinstance(every, bool) or every < 1:
            raise ConfigError(f"every must be a whole number of steps >= 1, got {every!r}")
        self.probe_set = read_set(probe_set)  # read and checked once, before training starts
        self.every = every
        self.tokenizer = tokenizer
        self.measure = measure
        self.model_name = model_name
        self.prefix = prefix
        self.trainer: Any = None
        self.last: SetResults | None = None
        self.last_step: int | None = None

    def attach(self, trainer: Any) -> ProbeSetCallback:
        """Add this callback to ``trainer`` and log through it (``trainer.log``)."""
        self.trainer = trainer
        trainer.add_callback(self)
        return self

    def on_step_end(self, args: Any, state: Any, control: Any, model: Any = None,
                    processing_class: Any = None, **kwargs: Any) -> Any:
        if state.global_step % self.every or not state.is_world_process_zero or model is None:
            return control
        logs = self.score(model, self.tokenizer or processing_class, state.global_step)
        if self.trainer is not None:
            self.trainer.log(logs)
        else:  # not attached: the values still reach the history, not the Trainer's loggers
            state.log_history.append({**logs, "step": state.global_step})
        return control

    def score(self, model: Any, tokenizer: Any, step: int) -> dict[str, float]:
        """Score the set with ``model`` as it is now; the figures to log (model left in the
        mode it was in)."""
        from kgprobe.app.probe_sets import score_probe_set

        if tokenizer is None:
            raise ConfigError("ProbeSetCallback needs the tokenizer: give tokenizer=... or the "
                              "Trainer's processing_class")
        started = time.monotonic()
        training = bool(getattr(model, "training", False))
        try:
            done = score_probe_set(self.probe_set, model, None, tokenizer=tokenizer,
                                   model_name=self.model_name, cache=False, progress=False,
                                   measure=self.measure)
        finally:
            if training:
                model.train()
        self.last, self.last_step = done, step
        logs = {f"{self.prefix}/{key}/{name}": float(v)
                for key, figs in done.figures().items() for name, v in figs.items() if v is not None}
        logs[f"{self.prefix}/seconds"] = round(time.monotonic() - started, 3)
        return logs
