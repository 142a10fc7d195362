"""The errors a user can fix, by what they are about. The CLI prints each as one line and exits with
code 2 (`--debug` shows the traceback); every other exception is a bug.

    UserError       the base: input the user can fix
    ConfigError     a config file, a `--set`, a command-line flag or an option's value
    DataError       a corpus or text file: missing, unreadable, damaged, misaligned, empty
    RunDirError     a run directory's files: missing, damaged, from another config, or held by a training
    ServeError      `mt serve` cannot start (the address is taken)
    WriteError      a file mt writes cannot be written: the disk is full, read-only, not ours, or gone
"""

from __future__ import annotations


class UserError(ValueError):
    """A problem with the user's input that the user can fix; its message names the file, key or line
    and says what to do."""


class ConfigError(UserError):
    """A problem with the user's config or command line; `key` names the option, where one is to blame."""

    def __init__(self, message: str, key: str = ""):
        super().__init__(message)
        self.key = key


class DataError(UserError):
    """A problem with corpus or text files."""


class RunDirError(UserError):
    """A problem with a run directory's files (checkpoints, spm.model, card.json, metrics.jsonl, the lock)."""


class ServeError(UserError):
    """`mt serve` cannot start."""


class WriteError(UserError):
    """The OS refused a write (mt.plumbing.files.write_failure words it): nothing was half-written."""
