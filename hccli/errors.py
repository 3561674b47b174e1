"""The one exception type the CLI's error boundary turns into a one-line message."""

from __future__ import annotations


class HcError(Exception):
    """A failure the user caused or can act on.

    The message is a single line that names the file, key or tensor and what was
    expected. exit_code 2 = bad input / unreadable; 1 = verification found problems.
    """

    def __init__(self, message: str, exit_code: int = 2):
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code

    def __str__(self) -> str:
        return self.message
