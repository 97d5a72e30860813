"""One exception type for every user-facing input error.

The CLI turns it into a single line on stderr and exit code 2 (no traceback). The API raises it so
scripts can catch it.
"""


class MoeplanError(ValueError):
    """Bad input: unknown model, malformed config, impossible layout. ``str()`` is one line."""


class InvalidLayout(MoeplanError):
    """The layout breaks a validity rule at this run's size (GPU count, sequence length, GBS), or, from the
    planner, every layout does. On its own it is bad input; a sweep makes it the row of its length."""


class GroupedTensorRefused(MoeplanError):
    """The planner refuses --te-grouped-tensor: TE raises with it on every run the search would keep (no run with
    op-fused experts is left). A caller that can search without the variable (explain's remedy) catches this type."""


def one_line(text: object) -> str:
    """Any text (an exception, a value) collapsed onto one line, as error messages need."""
    return " ".join(str(text).split())


def yaml_problem(exc: BaseException) -> str:
    """A PyYAML error as ' at line L column C: problem' (where its mark says), one line: what the hardware
    file, calibration profile and strategy file readers print after 'FILE: malformed YAML'."""
    mark = getattr(exc, "problem_mark", None)
    where = f" at line {mark.line + 1} column {mark.column + 1}" if mark is not None else ""
    return f"{where}: {one_line(getattr(exc, 'problem', None) or exc)}"
