"""One exception type for every user-facing input error.

The CLI turns it into a single line on stderr and exit code 2 (no traceback). The API raises it so
scripts can catch it.
"""


class MoeplanError(ValueError):
    """Bad input: unknown model, malformed config, impossible layout. ``str()`` is one line."""


def one_line(text: object) -> str:
    """Any text (an exception, a value) collapsed onto one line, as error messages need."""
    return " ".join(str(text).split())
