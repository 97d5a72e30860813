"""Output: the lazy rich console and tables (imported on first use, start-up time), the lazy API, JSON and
stdout writes that survive a closed pipe, the check that outputs neither clash nor overwrite an input, and
the trace file."""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn, TYPE_CHECKING

from moeplan.base.errors import MoeplanError

def _broken_pipe() -> NoReturn:
    raise BrokenPipeError(32, "Broken pipe")


class StdoutUnwritable(MoeplanError):
    """Standard output refused a write (`> /dev/full`: no space left, an I/O error): one line and exit code 2, as a
    file-output flag that cannot be written (moeplan.base.outfile.write_bytes: 'cannot write FILE: REASON'). A closed
    pipe is not this: it stays BrokenPipeError (exit 141, quiet)."""

    def __init__(self, exc: OSError) -> None:
        super().__init__(f"cannot write standard output: {exc.strerror or exc}")


class _Stdout:
    """The current sys.stdout (a test's capture included) as rich's file: its write and flush errors become
    StdoutUnwritable, a closed pipe stays BrokenPipeError (rich's on_broken_pipe)."""

    def write(self, text: str) -> int:
        try:
            return sys.stdout.write(text)
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise StdoutUnwritable(exc) from None

    def flush(self) -> None:
        flush_stdout()

    def __getattr__(self, name: str) -> Any:  # isatty, fileno, encoding, ...
        return getattr(sys.stdout, name)


def flush_stdout() -> None:
    """sys.stdout.flush(), a full disk StdoutUnwritable (a closed pipe stays BrokenPipeError)."""
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        raise
    except OSError as exc:
        raise StdoutUnwritable(exc) from None


# Start-up time: `moeplan --help` and `moeplan models` must start in well under 0.15 s, so rich, the
# API (and with it the engine, YAML and the planner) and the strategy reader are imported on first use.
if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

    from moeplan import api
    from moeplan.engine.estimate import Estimate
    from moeplan.hardware import GPUSpec
else:
    def Console(*args: Any, **kwargs: Any) -> Any:  # noqa: N802  (rich's class, imported when printing)
        from rich.console import Console as _Console

        if not kwargs.get("stderr") and kwargs.get("file") is None:
            kwargs["file"] = _Stdout()  # write errors on stdout: one line (StdoutUnwritable)
        console = _Console(*args, **kwargs)
        console.on_broken_pipe = _broken_pipe  # rich would exit 1 ("no answer"); main() exits 141
        return console

    def Table(*args: Any, **kwargs: Any) -> Any:  # noqa: N802
        from rich.table import Table as _Table

        return _Table(*args, **kwargs)

    class _Api:
        """:mod:`moeplan.api`, imported on first use."""

        def __getattr__(self, name: str) -> Any:
            from moeplan import api as module

            return getattr(module, name)

    api = _Api()


PIPED_COLUMNS = 80  # the width of output that reaches no terminal (a file, a pipe with no terminal behind it)


def output_width() -> int | None:
    """Columns of the tables on stdout: COLUMNS when set; stdout's own terminal (None: rich measures it); piped
    (`moeplan plan ... | head`) the terminal the user reads it in, stderr's or the controlling terminal's (/dev/tty);
    else PIPED_COLUMNS. Tables fold their knob columns below NARROW_COLUMNS (cli/tables.py), so 80 reads well."""
    columns = os.environ.get("COLUMNS", "").strip()
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    if _isatty(sys.stdout):
        return None
    return terminal_columns() or PIPED_COLUMNS


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, OSError, ValueError):
        return False


def terminal_columns() -> int | None:
    """The width of the terminal behind stderr, or of the controlling terminal; None when there is neither."""
    try:
        return os.get_terminal_size(sys.stderr.fileno()).columns or None
    except (AttributeError, OSError, ValueError):
        pass
    try:
        fd = os.open("/dev/tty", os.O_RDONLY | os.O_NOCTTY)
    except OSError:
        return None
    try:
        return os.get_terminal_size(fd).columns or None
    except OSError:
        return None
    finally:
        os.close(fd)


class LazyConsole:
    """A rich Console made (and rich imported) on first use: `--json` output never needs one."""

    def __init__(self, **kwargs: Any) -> None:
        self._kwargs = kwargs
        self._console: Any = None

    def real(self) -> Any:
        if self._console is None:
            self._console = Console(**self._kwargs)
        return self._console

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real(), name)


def escape(text: str) -> str:
    """rich markup escaping (rich imported on first use)."""
    from rich.markup import escape as _escape

    return _escape(text)


def write_bytes(*args: Any, **kwargs: Any) -> Any:
    from moeplan.base.outfile import write_bytes as _write

    return _write(*args, **kwargs)


def read_strategy(*args: Any, **kwargs: Any) -> Any:
    from moeplan.run.strategy import read_strategy as _read

    return _read(*args, **kwargs)


def strategy_text(*args: Any, **kwargs: Any) -> Any:
    from moeplan.run.strategy import strategy_text as _text

    return _text(*args, **kwargs)

Handler = Callable[[argparse.Namespace, Console], int]


def _non_finite_path(obj: Any, path: str = "") -> str | None:
    """The first key path (e.g. 'memory_gib.total') whose value is an infinite or NaN float, if any."""
    if isinstance(obj, float):
        return None if math.isfinite(obj) else (path or "(top level)")
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, (list, tuple)) else ()
    for k, v in items:
        hit = _non_finite_path(v, f"{path}.{k}" if path else str(k))
        if hit is not None:
            return hit
    return None


def print_json(obj: Any) -> None:
    """Standard JSON or nothing: Python would print Infinity / NaN, which JSON parsers (jq, JSON.parse) refuse."""
    try:
        text = json.dumps(obj, indent=2, sort_keys=False, allow_nan=False)
    except ValueError:
        raise MoeplanError(f"the result is not finite at '{_non_finite_path(obj)}' (an input beyond what the "
                           "model covers, e.g. a huge --capacity-factor); no JSON written") from None
    write_stdout(text + "\n")


def write_stdout(text: str) -> None:
    """``text`` on standard output, all of it, or BrokenPipeError (the reader has gone) or StdoutUnwritable (a full
    disk, an I/O error)."""
    try:
        _write_stdout(text)
    except BrokenPipeError:
        raise
    except OSError as exc:
        raise StdoutUnwritable(exc) from None


def _write_stdout(text: str) -> None:
    """``text`` on standard output, all of it or BrokenPipeError: a large write into a pipe whose reader has gone
    can return after its first part with no error from the text layer (a 0.5 MB `plan --json | head -1` exited 0,
    not 141), so where stdout is a real file descriptor the bytes go out through os.write until none are left."""
    if sys.stdout is not sys.__stdout__:  # captured or replaced stdout (tests, notebooks): its own write
        sys.stdout.write(text)
        return
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):
        sys.stdout.write(text)
        return
    sys.stdout.flush()
    data = text.encode(sys.stdout.encoding or "utf-8")
    while data:
        data = data[os.write(fd, data):]


def check_output(path: str | None, plot: bool = True) -> None:
    """Refuse an output path (and a plot format) before any work, so a bad path costs nothing."""
    if path is None:
        return
    from moeplan.base.outfile import check_target

    check_target(path)
    if plot:
        from moeplan.plots import format_of

        format_of(path)


def check_trace(path: str | None) -> None:
    """A Chrome trace is JSON: its file says so (Perfetto and chrome://tracing open ``.json``, and gzip-compressed
    JSON: ``.json.gz`` or ``.gz``, which write_trace compresses)."""
    check_output(path, plot=False)
    if path is not None and not str(path).lower().endswith((".json", ".gz")):
        raise MoeplanError(f"--trace {path}: a Chrome trace is JSON; name the file *.json (or *.json.gz for a "
                           "gzip-compressed one)")


_INPUT_FILES = {"model": "MODEL", "config": "CONFIG", "hardware": "--hardware", "calibration": "--calibration",
                "strategy": "--strategy"}  # the arguments that name files a command reads


def distinct_outputs(args: argparse.Namespace, *, inputs: Sequence[tuple[str, str]] = (),
                      **paths: str | None) -> None:
    """Two outputs of one command never share a file (the second would silently replace the first), and no output
    is a file the command reads (``--save-strategy`` over the ``--hardware`` file destroyed it): the files of
    _INPUT_FILES and ``inputs`` ((name, path) pairs, e.g. calibrate's logs). One file: moeplan.base.outfile.file_identity
    (a hard link, a symbolic link or another spelling of the path included)."""
    from moeplan.base.outfile import FileIdentity, file_identity

    read = [(name, getattr(args, attr, None)) for attr, name in _INPUT_FILES.items()]
    seen: dict[FileIdentity, str] = {}
    for name, path in [*read, *inputs]:
        if isinstance(path, str) and path != "-" and os.path.isfile(path):
            seen.setdefault(file_identity(path), f"{name} (an input)")
    for flag, path in paths.items():
        if path is None:
            continue
        name, key = "--" + flag.replace("_", "-"), file_identity(path)
        if key in seen:
            raise MoeplanError(f"{seen[key]} and {name} name the same file {path}; give each output its own path")
        seen[key] = name


def wrote(path: str, as_json: bool, what: str = "") -> None:
    """'wrote FILE' for every file written (on stderr under --json, so stdout stays JSON)."""
    line = f"wrote {path}" + (f" ({what})" if what else "")
    if as_json:
        Console(stderr=True, width=10_000).print(line, highlight=False, markup=False)
    else:
        Console(width=10_000).print(line, highlight=False, markup=False, soft_wrap=True)


def write_trace(path: str, tl: Any) -> None:
    """The Chrome trace-event file of a timeline (opens in Perfetto and chrome://tracing), gzip-compressed for a
    ``.gz`` name (deterministic: no time stamp or file name in the header; level 6: the headline trace's ~18 MB of
    JSON in ~1.7 MB, in ~0.15 s)."""
    from moeplan.base.outfile import write_bytes
    from moeplan.engine.timeline import chrome_trace_bytes

    data = chrome_trace_bytes(tl)
    if str(path).lower().endswith(".gz"):
        import gzip

        data = gzip.compress(data, compresslevel=6, mtime=0)
    write_bytes(path, data)


def schedule_refused(cfg: Any) -> bool:
    """Whether Megatron-Core refuses this run's pipeline schedule (then --plot and the report skip the timeline)."""
    from moeplan.engine.timeline import schedule_problem

    par = cfg.parallel
    return schedule_problem(par.pp, par.vpp, cfg.batch.microbatches(par.dp)) is not None


def trace_note(tl: Any) -> str:
    return (f"timeline of one iteration: {tl.pp} pipeline rank(s), {tl.microbatches} micro-batches, "
            f"{len(tl.ops)} forward/backward operations")
