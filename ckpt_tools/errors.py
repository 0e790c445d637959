"""Errors that stop a command before it can judge anything (exit code 2 in the CLI)."""

from __future__ import annotations


class CkptError(Exception):
    """A one-line, user-facing reason why a command cannot run. The CLI prints it and exits 2."""


class TargetError(CkptError):
    """The target is missing, unreadable, or holds no safetensors file."""


class UsageError(CkptError):
    """The command was called with options that do not fit together."""
