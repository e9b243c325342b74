"""Errors that the CLI turns into one clear line and a non-zero exit code (no traceback)."""

from __future__ import annotations

from collections.abc import Iterator


class KgprobeError(Exception):
    """Base class: an expected failure whose message is meant for the user."""

    exit_code = 1


class ConfigError(KgprobeError):
    """Bad configuration or bad user input (unknown model, relation, file format...)."""

    exit_code = 2


class PluginError(ConfigError):
    """A plug-in (entry point, ``--plugin`` or ``KGPROBE_PLUGINS`` module) cannot be loaded: an
    import error, or a name that a built-in or another plug-in already holds."""


class GraphUnavailable(KgprobeError):
    """The graph server cannot be reached, refused the credentials, or went away."""

    exit_code = 3


class GraphWiped(GraphUnavailable):
    """What a command was writing to is gone from the graph: the graph wiped (``kgprobe db
    wipe``) or the command's own record deleted while it ran. Nothing of the failed write was
    committed; exit 3 like a lost server, with a line that says what happened."""


class LockedOut(GraphUnavailable):
    """The server refuses logins for a user after repeated failed attempts: not a wrong password."""

    def __init__(self, user: str, waited: float) -> None:
        super().__init__(
            f"the graph server refuses logins for user {user}: it locked that user after repeated "
            "failed logins, which any program on this machine can cause (the password kgprobe uses "
            f"is right); kgprobe retried for {waited:.0f} s. Find what sends bad logins to the "
            "server's ports, or raise KGPROBE_LOCKOUT_WAIT"
        )
        self.user, self.waited = user, waited


def lockout_waits(limit: float) -> Iterator[float]:
    """Seconds to sleep between tries while a user is locked out: 1, 2, 4, 8, 8, … until
    ``limit`` seconds in all (the last one cut to fit); nothing when ``limit`` is 0."""
    waited, delay = 0.0, 1.0
    while waited < limit:
        step = min(delay, limit - waited)
        yield step
        waited, delay = waited + step, min(delay * 2, 8.0)


class InputError(KgprobeError):
    """Input data is unsupported or malformed beyond the error budget."""

    exit_code = 4


class OutputError(KgprobeError):
    """An output file cannot be written: no permission, a read-only filesystem, a full disk."""

    exit_code = 6
