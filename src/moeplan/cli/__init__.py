"""Command-line front end: a thin layer over the API (argparse + rich, ``--json`` everywhere).

Every input error is a :class:`moeplan.base.errors.MoeplanError`: one line on stderr, exit code 2, no
traceback, nothing written.

One module per subcommand (its parser, handler and printer: :mod:`.plan`, :mod:`.estimate`, ...) and shared
modules for argument types (:mod:`.args`), tables (:mod:`.tables`), output (:mod:`.output`) and the calibration
profile (:mod:`.profile`); :func:`main` and :func:`build_parser` here.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from moeplan.base.errors import MoeplanError
from moeplan.cli.assistant import add_parsers as add_assistant_parsers
from moeplan.cli.calibrate import add_calibrate_parser
from moeplan.cli.check import add_check_parser
from moeplan.cli.estimate import add_estimate_parser
from moeplan.cli.explain import add_explain_parser
from moeplan.cli.hardware import add_hardware_parser
from moeplan.cli.helpformat import WrappingHelpFormatter
from moeplan.cli.models import add_models_parser
from moeplan.cli.output import LazyConsole, StdoutUnwritable, flush_stdout, output_width, write_stdout
from moeplan.cli.params import add_params_parser
from moeplan.cli.plan import add_plan_parser
from moeplan.cli.profile import announce_profile, apply_profile
from moeplan.cli.report import add_report_parser
from moeplan.cli.serve import add_parser as add_serve_parser
from moeplan.cli.sweep import add_sweep_parser


EPILOG = """\
examples:
  moeplan models
  moeplan hardware
  moeplan estimate qwen3-30b-a3b --gpu h100 --gpus 16 --seq-len 4k --gbs 1024 --ep 16
  moeplan plan deepseek-v3 --gpu h100 --gpus 1024 --seq-len 128k --gbs 1024
  moeplan params deepseek-v3 --seq-len 128k
  moeplan params ./my-model/config.json --json

MODEL is a built-in catalog name (see `moeplan models`) or a path to a Hugging Face config.json.
Every command takes --json for scripts. Exit codes: 0 an answer; 1 a valid question with no answer:
plan/report: no layout fits (one line on stderr names the closest run); sweep: a length has no plan (its
row says why; one line on stderr counts them); check: the file has errors (the findings say which, on
stdout; nothing on stderr); explain MODEL --seq-len A,B: no layout fits at a length (one line on
stderr; explain of run files compares a run that does not fit and notes it, exit 0); 2 bad input, with
a one-line message and nothing written; 141 (128 + SIGPIPE) the reader closed the pipe early (`| head`),
no message.
"""


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (exit code 2, no usage dump): `moeplan plan: error: ...`, and help that
    wraps at the terminal width (every parser, subcommands included: WrappingHelpFormatter)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["formatter_class"] = WrappingHelpFormatter  # the subcommands ask for RawDescriptionHelpFormatter
        super().__init__(*args, **kwargs)

    def _print_message(self, message: str, file: Any = None) -> None:
        """argparse drops write errors (--help into a full disk exited 0 with nothing written): on stdout they
        raise StdoutUnwritable, as every other write there does."""
        if message and file is sys.stdout:
            write_stdout(message)
        else:
            super()._print_message(message, file)

    def error(self, message: str) -> NoReturn:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


class _Version(argparse.Action):
    """`moeplan --version`: `moeplan X.Y.Z`, the installed distribution's version (importlib.metadata, read only
    when asked, so start-up stays as it is)."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> NoReturn:
        from importlib.metadata import PackageNotFoundError, version

        try:
            found = version("moeplan")
        except PackageNotFoundError:  # run from a source tree that was never installed
            found = "unknown (not installed)"
        parser._print_message(f"moeplan {found}\n", sys.stdout)  # stdout, as argparse's own version action
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="moeplan",
        description="Plan, check and explain long-context MoE training runs on Megatron Bridge / Megatron-Core.",
        epilog=EPILOG,
    )
    parser.add_argument("--version", action=_Version, help="print moeplan's version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True, parser_class=_Parser)
    for add in PARSERS:
        add(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    err: Any = LazyConsole(stderr=True)
    try:
        args = parser.parse_args(argv)  # --help / --version into a full disk: StdoutUnwritable (_Parser)
        console: Any = LazyConsole(width=output_width())
        apply_profile(args)
        announce_profile(args, console)
        code = int(args.handler(args, console))
        flush_stdout()  # a closed pipe or a full disk raises here, not in the interpreter's flush at exit
        return code
    except StdoutUnwritable as exc:
        _stdout_to_devnull()  # what is still buffered would fail again at exit, with a traceback-like message
        err.print(f"moeplan: error: {exc}", markup=False, highlight=False, soft_wrap=True)
        return 2
    except MoeplanError as exc:
        err.print(f"moeplan: error: {exc}", markup=False, highlight=False, soft_wrap=True)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # the reader went away (`moeplan plan ... | head`): stop quietly with 141 (128 + SIGPIPE, what a shell
        # reports for a filter the pipe ended; not 1, "no answer"), stdout pointed at /dev/null so that the
        # interpreter's final flush does not raise again (Python docs, "Note on SIGPIPE")
        _stdout_to_devnull()
        return 141


def _stdout_to_devnull() -> None:
    """Point the process's stdout at /dev/null (a real stdout only; a test's capture has no descriptor)."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)


# the subcommands in `moeplan --help` order
PARSERS = (add_models_parser, add_params_parser, add_hardware_parser, add_estimate_parser, add_plan_parser, add_sweep_parser, add_explain_parser, add_report_parser, add_calibrate_parser, add_check_parser,
           add_assistant_parsers, add_serve_parser)  # moeplan mcp, moeplan skill install; moeplan serve
