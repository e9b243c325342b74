"""Errors that the CLI turns into one clear line and a non-zero exit code (no traceback)."""

from __future__ import annotations


class KgprobeError(Exception):
    """Base class: an expected failure whose message is meant for the user."""

    exit_code = 1


class ConfigError(KgprobeError):
    """Bad configuration or bad user input (unknown model, relation, file format...)."""

    exit_code = 2


class GraphUnavailable(KgprobeError):
    """The graph server cannot be reached, refused the credentials, or went away."""

    exit_code = 3


class InputError(KgprobeError):
    """Input data is unsupported or malformed beyond the error budget."""

    exit_code = 4


class OutputError(KgprobeError):
    """An output file cannot be written: no permission, a read-only filesystem, a full disk."""

    exit_code = 6
