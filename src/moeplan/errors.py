"""One exception type for every user-facing input error.

The CLI turns it into a single line on stderr and exit code 2 (no traceback). The API raises it so
scripts can catch it.
"""


class MoeplanError(ValueError):
    """Bad input: unknown model, malformed config, impossible layout. ``str()`` is one line."""
