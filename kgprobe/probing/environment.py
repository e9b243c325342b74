"""Where and how a probe run computed its numbers, recorded on its ProbeRun node and in
``results.json`` (docs/results.md, "environment"): every setting outside the measure's own
configuration that can move a score or a timing — the interpreter and platform, torch's CPU
threads, the accelerator, the engine's row budget, ``--model-arg``/``--device`` as given.

Read-only: nothing here changes a setting, and torch is consulted only when it is already
imported (a model was loaded), so recording costs no import.
"""

from __future__ import annotations

import os
import platform
import sys
from collections.abc import Mapping
from typing import Any, TypedDict

#: Environment variables that change how many threads the numeric libraries use.
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "TOKENIZERS_PARALLELISM")
#: ``--model-arg`` keys never recorded (a secret, not a setting).
SECRET_ARGS = frozenset({"token", "use_auth_token"})


def _batch_tokens(runner: Any) -> int | None:
    """The scoring engine's row budget (tokens per forward row) as the engine resolved it."""
    for name in ("causal", "masked", "seq2seq"):
        backend = getattr(runner, name, None)
        value = getattr(backend, "batch_tokens", None)
        if isinstance(value, int):
            return value
    value = getattr(runner, "batch_tokens", None)
    return value if isinstance(value, int) else None


class TorchInfo(TypedDict):
    """torch's threads and CUDA version, and the accelerator's name (None: none, or no torch)."""

    torch_threads: int | None
    cuda: str | None
    accelerator: str | None


class RunEnvironment(TorchInfo):
    """A run's environment (the ProbeRun's ``environment``; :func:`run_environment`)."""

    python: str
    python_implementation: str
    platform: str
    machine: str
    cpu_count: int | None
    thread_variables: dict[str, str]
    device: str | None
    device_requested: str | None
    batch_tokens: int | None
    model_args: dict[str, object]  # the --model-arg values, secrets left out


def _torch(device: str | None) -> TorchInfo:
    torch = sys.modules.get("torch")
    if torch is None:
        return {"torch_threads": None, "cuda": None, "accelerator": None}
    out: TorchInfo = {"torch_threads": int(torch.get_num_threads()),
                           "cuda": getattr(torch.version, "cuda", None), "accelerator": None}
    dev = str(device or "")
    if dev.startswith("cuda") and torch.cuda.is_available():
        index = int(dev.split(":", 1)[1]) if ":" in dev else torch.cuda.current_device()
        out["accelerator"] = str(torch.cuda.get_device_name(index))
    elif dev.startswith("mps"):
        out["accelerator"] = "Apple MPS"
    return out


def run_environment(
    runner: Any = None, *, device: str | None = None, model_args: Mapping[str, object] | None = None,
    device_requested: str | None = None,
) -> RunEnvironment:
    """The environment of a run: interpreter, platform, CPU count, thread settings, torch's
    threads and CUDA version, the accelerator's name (``torch.cuda.get_device_name``) when the
    model runs on one, the engine's ``batch_tokens`` and the model arguments (secrets left out).
    ``device`` defaults to the runner's model's."""
    if device is None:
        lm_device = getattr(getattr(runner, "lm", None), "device", None)
        device = None if lm_device is None else str(lm_device)
    return {
        "python": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "thread_variables": {k: os.environ[k] for k in THREAD_VARIABLES if k in os.environ},
        **_torch(device),
        "device": device,
        "device_requested": device_requested,
        "batch_tokens": _batch_tokens(runner),
        "model_args": {k: v for k, v in sorted((model_args or {}).items()) if k not in SECRET_ARGS},
    }
