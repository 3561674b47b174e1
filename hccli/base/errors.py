"""The one exception type the CLI's error boundary turns into a one-line message,
and the exit codes `hc` uses (each has one meaning; the README lists them)."""

from __future__ import annotations

EXIT_OK = 0
EXIT_FINDINGS = 1  # verify/diff found error-level problems, a --compare beyond --atol, a port that departs
EXIT_INPUT = 2  # bad usage or input: a flag, a file, a key, a tensor, an OS error on a path
EXIT_INTERNAL = 70  # a bug in hc (sysexits' EX_SOFTWARE): never mistaken for findings or bad input
EXIT_INTERRUPTED = 130  # Ctrl-C, as shells report SIGINT


class HcError(Exception):
    """A failure the user caused or can act on.

    The message is a single line that names the file, key or tensor and what was
    expected. exit_code EXIT_INPUT (2) = bad input / unreadable; EXIT_FINDINGS (1)
    = verification found problems.
    """

    def __init__(self, message: str, exit_code: int = EXIT_INPUT):
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code

    def __str__(self) -> str:
        return self.message
