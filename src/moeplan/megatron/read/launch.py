"""Which words of a launch script's simple command are Megatron-LM's arguments (for :mod:`.shell`): those after
the script a Python launcher runs (``python pretrain_gpt.py``, ``torchrun ... pretrain_gpt.py``, ``deepspeed``,
``accelerate launch``, ``python -m torch.distributed.run``, a ``*.py`` path), the launcher found first or after a
wrapper (``srun ...``, ``mpirun ...``, ``env ...``, ``$LAUNCHER``); every word of a bare argument list (a line
that starts with a ``--flag``, as moeplan's own export writes); none of another command's (``set -euo pipefail``,
``mkdir -p``, ``tee -a``, ``python -c CODE``). The script a shell runs with ``-c`` (``srun bash -c "..."``) is
handed back to be read as a script of its own."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from moeplan.megatron.read.shell_scan import Word

_LAUNCHER = re.compile(r"python[\d.]*|torchrun|deepspeed|accelerate|[^\s/]+\.py")  # a word's last path part
_PYTHON = re.compile(r"python[\d.]*")
_SCRIPT = re.compile(r"[^\s-]\S*\.py")
_SHELLS = frozenset({"bash", "sh", "dash", "zsh", "ksh"})
# Commands that run the command in their arguments: the launcher is the first launcher (or shell) word after them
_WRAPPERS = frozenset({"srun", "mpirun", "mpiexec", "env", "exec", "nohup", "numactl", "taskset", "stdbuf", "timeout",
                       "nice", "nsys", "ncu", "singularity", "apptainer", "docker", "podman", "conda", "uv"})
_TORCH_LAUNCH_MODULES = frozenset({"torch.distributed.run", "torch.distributed.launch"})  # `python -m` as torchrun
_VALUE_OPTIONS = "WX"  # python's options that take a value (-W ignore, -X dev)


@dataclass(frozen=True)
class Command:
    """What the reader takes from a simple command."""

    args: list[Word] = field(default_factory=list)  # the words Megatron-LM reads
    launches: bool = False  # it starts a Python launch, or a shell script that may: its NAME=V prefix is the job's
    script: Word | None = None  # the script a shell runs with -c


def _name(word: Word) -> str:
    return word.text.rpartition("/")[2]


def _is_program(word: Word) -> bool:
    """A launcher or a shell (not an option's value: ``--config=x.py``)."""
    name = _name(word)
    return not word.text.startswith("-") and (bool(_LAUNCHER.fullmatch(name)) or name in _SHELLS)


def _program(words: list[Word]) -> int | None:
    """Index of the launcher or shell the command runs: its first word, or the first one after a wrapper."""
    first = words[0]
    if _is_program(first):
        return 0
    if _name(first) in _WRAPPERS or first.text.startswith("$"):  # $LAUNCHER: a variable the script does not set
        return next((i for i in range(1, len(words)) if _is_program(words[i])), None)
    return None


def _python_script(words: list[Word], i: int) -> tuple[int | None, str | None]:
    """(index of the first argument of the script or module python runs, the module) for python's options from
    ``i``; (None, None) for ``-c CODE``, a script from standard input (``-``) or none."""
    while i < len(words):
        text = words[i].text
        if text == "-":
            return None, None
        if not text.startswith("-"):
            return i + 1, None
        for k, letter in enumerate("" if text.startswith("--") else text[1:]):  # -u, -uB, -W ignore, -mpkg
            rest = text[k + 2:]
            if letter == "c":
                return None, None
            if letter == "m":
                return (i + 1, rest) if rest else (i + 2, words[i + 1].text if i + 1 < len(words) else None)
            if letter in _VALUE_OPTIONS:
                i += not rest
                break
        i += 1
    return None, None


def _arguments(words: list[Word], at: int) -> int | None:
    """Index of Megatron-LM's first argument in a command whose launcher is ``words[at]`` (None: no launch)."""
    name = _name(words[at])
    if _PYTHON.fullmatch(name):
        start, module = _python_script(words, at + 1)
        if start is None or module not in _TORCH_LAUNCH_MODULES:
            return start
        at = start - 1  # python -m torch.distributed.run: torchrun, its options before the script
    elif name.endswith(".py"):
        return at + 1
    script = next((i for i in range(at + 1, len(words)) if _SCRIPT.fullmatch(words[i].text)), None)
    return at + 1 if script is None else script + 1


def _shell_script(words: list[Word], at: int) -> Word | None:
    """The script of ``bash -c SCRIPT`` (``-lc``, ``-ex -c``) when ``words[at]`` is the shell; None otherwise."""
    runs_string, i = False, at + 1
    while i < len(words):
        text = words[i].text
        if not text.startswith(("-", "+")) or words[i].quoted:
            return words[i] if runs_string else None
        letters = "" if text.startswith("--") else text[1:]
        runs_string = runs_string or "c" in letters
        i += 2 if letters.endswith(("o", "O")) else 1  # -o pipefail, -O extglob: the option's value
    return None


def command(words: list[Word]) -> Command:
    """What Megatron-LM reads from a simple command's words (expanded, redirections dropped)."""
    if not words:
        return Command()
    if words[0].text.startswith("--"):  # a bare argument list
        return Command(words, True)
    at = _program(words)
    if at is None:
        return Command()
    if _name(words[at]) in _SHELLS:
        script = _shell_script(words, at)
        return Command(launches=script is not None, script=script)
    start = _arguments(words, at)
    return Command() if start is None else Command(words[start:], True)
