"""The argument lists of a Megatron-LM launch script, each word with the line it is written on, read as bash
splits and expands them (:mod:`.shell_scan`: quotes, redirections and heredocs; :mod:`.launch`: which command's
words are Megatron-LM's). Each list is read on its own (:attr:`ShellWords.lists`: a flag's values never run on into
the next list):

- the arguments of a Python launch (``torchrun ... pretrain_gpt.py --num-layers 48 \\``); other commands' words are
  not read (``set -euo pipefail``), except in a bare argument list (a text whose first command starts with a
  ``--flag``: moeplan's own export, a pasted command line), where every word is;
- a bash array's items (``ARGS=(--a 1 --b)``, ``ARGS+=(...)``, on one line or several);
- the words of a variable's value (``GPT_ARGS="`` / ``--num-layers 48 \\`` / ``"``: what ``$GPT_ARGS`` splits
  into), so every flag the file defines is read wherever it is used;
- the script of ``bash -c`` / ``sh -c`` (``srun bash -c "python pretrain_gpt.py ..."``), read as a script.

References are expanded as bash does, in file order (control flow is not followed): ``$NAME``, ``${NAME}`` and
``${NAME:-default}`` / ``${NAME-default}``, unquoted (the value split into words) or in double quotes (one word),
after a ``=`` too (``--tensor-model-parallel-size=$TP``); not in single quotes or after a backslash. A name takes the
value of ``NAME=V`` alone on its command, ``export`` / ``declare`` / ``local`` / ``readonly`` / ``typeset NAME=V``,
not of ``NAME=V cmd`` (the command's environment only); a name the script does not set stays as written.
``${ARGS[@]}``, ``$(...)`` and the like stay words: the array's own list is read. The scalar assignments that set
a variable, or the environment of a command that launches, are kept as :class:`Assignment`."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from moeplan.megatron.read.collect import fail
from moeplan.megatron.read.launch import Command, command
from moeplan.megatron.read.shell_scan import DOUBLE, EXPANDED, PLAIN, SUBSTITUTED, Char, Op, Word, scan

Token = tuple[str, int]  # a word and the line it is written on

_ASSIGNING = frozenset({"export", "declare", "typeset", "local", "readonly", "env"})  # NAME=V words follow
_SETTING = _ASSIGNING - {"env"}  # their NAME=V sets the script's variable (env's: its command's environment)
_KEYWORDS = frozenset({"if", "then", "elif", "else", "do", "while", "until", "!", "{", "time"})  # a command follows
_ASSIGNMENT = re.compile(r"([A-Za-z_]\w*)(\+?)=")
# $NAME, ${NAME}, ${NAME:-default} / ${NAME-default} (bash parameter expansion)
_REFERENCE = re.compile(r"\$(?:([A-Za-z_]\w*)|\{([A-Za-z_]\w*)(?:(:?)-([^}]*))?\})")
_MAX_DEPTH = 8  # nested bash -c scripts read
_BLANKS = " \t\n\r"

Lookup = Callable[[str], "list[Char] | None"]  # a variable's value (its characters), None where unset


@dataclass(frozen=True)
class Assignment:
    """``NAME=VALUE`` (or ``+=``: VALUE is then the whole new value), its references expanded, quotes removed."""

    name: str
    value: str
    line: int


@dataclass
class ShellWords:
    """A script's argument lists (each a list of (word, line)) and its scalar assignments that set a variable or
    a launch's environment, in file order."""

    lists: list[list[Token]] = field(default_factory=list)
    assignments: list[Assignment] = field(default_factory=list)


def _text(chars: list[Char]) -> str:
    return "".join(c for c, _, _ in chars)


def _reference(chars: list[Char], text: str, i: int, lookup: Lookup) -> tuple[int, list[Char]] | None:
    """(end, value) of the reference bash expands at ``i``, or None: no reference, quoted by ``'`` or ``\\``, or
    a name the script does not set and no default."""
    how = chars[i][2]
    if chars[i][0] != "$" or how not in (PLAIN, DOUBLE):
        return None
    m = _REFERENCE.match(text, i)
    if m is None or any(h != how for _, _, h in chars[i:m.end()]):
        return None
    value = lookup(m[1] or m[2])
    if m[4] is not None and (value is None or (m[3] and not value)):  # the default, itself expanded
        return m.end(), _expand(chars[m.start(4):m.end(4)], lookup)
    return None if value is None else (m.end(), value)


def _expand(chars: list[Char], lookup: Lookup) -> list[Char]:
    """``chars`` with each reference replaced by its value, whose characters keep the lines they are written on
    and are marked to split (unquoted: :data:`EXPANDED`) or not (in double quotes)."""
    text, out, i = _text(chars), [], 0
    while i < len(chars):
        found = _reference(chars, text, i, lookup)
        if found is None:
            out.append(chars[i])
            i += 1
            continue
        mark = EXPANDED if chars[i][2] == PLAIN else DOUBLE
        i, value = found
        out.extend((c, line, SUBSTITUTED if how == SUBSTITUTED else mark) for c, line, how in value)
    return out


def _fields(word: Word, chars: list[Char]) -> list[Word]:
    """The words an expanded word splits into at the blanks of its unquoted expansions; a word that expands to
    nothing is dropped, unless quoted (``""``, ``"$EMPTY"``)."""
    out: list[Word] = []
    current: list[Char] = []
    for ch in [*chars, (" ", 0, EXPANDED)]:
        if ch[2] == EXPANDED and ch[0] in _BLANKS:
            if current:
                out.append(Word(current[0][1], current, word.quoted))
            current = []
        else:
            current.append(ch)
    return out or ([Word(word.line, [], True)] if word.quoted else [])


def _split(chars: list[Char]) -> list[Token]:
    """A value split at blanks as an unquoted ``$NAME`` is (quotes do not protect), each word with its line; a
    command substitution stays one word (its output, unknown here, is what the variable holds)."""
    out: list[Token] = []
    word: list[Char] = []
    for ch in [*chars, (" ", 0, PLAIN)]:
        if ch[0] in _BLANKS and ch[2] != SUBSTITUTED:
            if word:
                out.append((_text(word), word[0][1]))
            word = []
        else:
            word.append(ch)
    return out


def _assignment(word: Word) -> tuple[str, bool, int] | None:
    """(name, whether ``+=``, index where the value starts) of an unquoted ``NAME=`` / ``NAME+=`` at the word's
    start."""
    m = _ASSIGNMENT.match(word.text)
    if m is None or any(how != PLAIN for _, _, how in word.chars[:m.end()]):
        return None
    return m[1], bool(m[2]), m.end()


def _tokens(words: list[Word]) -> list[Token]:
    return [(w.text, w.line) for w in words]


class _Functions:
    """The script's shell functions that launch (``run() { torchrun pretrain_gpt.py "$@"; }``, ``function run {``):
    a call to one (``run --seq-length 4096``) passes its words to the launch."""

    def __init__(self) -> None:
        self.launching: set[str] = set()
        self.keyword = False  # the last command word was `function`: its name follows
        self.named: str | None = None  # a function named, its body's `{` to come
        self.body: str | None = None  # the function whose body is being read
        self.depth = 0  # braces open in that body

    def define(self, name: str) -> None:
        self.named = name

    def command_word(self, text: str) -> bool:
        """Whether a word at a command's start is part of a definition (``function``, the name after it, its
        body's ``{`` / ``}``) rather than a command."""
        if self.keyword:
            self.keyword, self.named = False, text
            return True
        if text == "function":
            self.keyword = True
            return True
        if text == "{" and (self.named or self.body):
            self.body, self.named = self.body or self.named, None
            self.depth += 1
            return True
        if text == "}" and self.body:
            self.depth -= 1
            self.body = self.body if self.depth else None
            return True
        self.named = None
        return False

    def launched(self) -> None:
        """A command of the body being read launches: so does a call to its function."""
        if self.body:
            self.launching.add(self.body)


class _Grouper:
    """Walks the scanner's words and operators in file order: commands, arrays and assignments into
    :class:`ShellWords`, the script's variables as they are set."""

    def __init__(self, out: ShellWords, variables: dict[str, list[Char]], origin: str, depth: int = 0) -> None:
        self.out, self.variables, self.origin, self.depth = out, variables, origin, depth
        self.current: list[Word] = []  # the command's words, expanded
        self.prefix: list[tuple[Assignment, list[Char]]] = []  # NAME=V of the command: its environment, or the
        # script's variables where no command word follows
        self.command_start = True  # the next word may be an assignment or a command name
        self.assigning: str | None = None  # export/declare/env: its options skipped, NAME=V words assignments
        self.opening: str | None = None  # "NAME=" glued to the "(" that follows: the array's name
        self.array: list[Token] = []  # the open array's items
        self.array_line: int | None = None  # where the open array started
        self.bare: bool | None = None  # the text is a bare argument list: its first command starts with a --flag
        self.functions = _Functions()

    def feed(self, items: list[Word | Op]) -> None:
        for item, nxt in zip(items, [*items[1:], None]):
            if isinstance(item, Op):
                self.operator(item, defines=item.text == "(" and isinstance(nxt, Op) and nxt.text == ")")
            else:
                self.word(item, opens_array=isinstance(nxt, Op) and nxt.text == "(" and nxt.glued)

    def end(self) -> None:
        if self.array_line is not None:
            raise fail(self.origin, self.array_line, "bad argument line: the array opened here has no closing ')'")
        self._finish()

    def operator(self, op: Op, defines: bool = False) -> None:
        if self.array_line is not None:
            if op.text == ")":
                if self.array:
                    self.out.lists.append(self.array)
                self.array, self.array_line = [], None
            return  # newlines (and bash's syntax errors) inside an array
        if op.text == "(" and self.opening is not None:  # NAME=(...): an array, not the scalar NAME=""
            self.array_line, self.opening = op.line, None
            return
        if defines and len(self.current) == 1 and not self.prefix:  # NAME () { ...; }: a function, not a command
            self.functions.define(self.current.pop().text)
        self._finish()

    def word(self, word: Word, opens_array: bool = False) -> None:
        if self.array_line is not None:
            self.array.extend(_tokens(self._expanded(word)))
            return
        if self.assigning and word.text.startswith("-") and word.chars[0][2] == PLAIN:
            return  # export -n, declare -a / -x: the builtin's options
        found = _assignment(word) if self.command_start or self.assigning else None
        if found is not None and opens_array and found[2] == len(word.chars):
            self.opening = found[0]
            if not found[1]:
                self.variables.pop(found[0], None)  # $ARGS is now the array's first item, not read here
        elif found is not None:
            self._assign(word, *found)
        elif self.command_start and self.functions.command_word(word.text):
            return
        elif not (self.command_start and word.text in _KEYWORDS):  # a keyword: a command follows
            self._state_after(word.text)
            self.current.extend(self._expanded(word))

    def _expanded(self, word: Word) -> list[Word]:
        return _fields(word, _expand(word.chars, self.variables.get))

    def _state_after(self, text: str) -> None:
        """Where the next word stands after a command word."""
        if self.command_start and text in _ASSIGNING:
            self.assigning = text
        elif self.assigning == "env" or not self.assigning:
            self.assigning = None  # env's command, or a command's argument: no assignment follows
        self.command_start = False

    def _assign(self, word: Word, name: str, append: bool, start: int) -> None:
        """``NAME=V``: its value's words are a list; it sets the variable now (export ...) or at the command's end
        where no command word follows (:meth:`_finish`); bash expands V with the command's earlier NAME=V."""
        earlier = {a.name: chars for a, chars in self.prefix}

        def lookup(key: str) -> list[Char] | None:
            return earlier[key] if key in earlier else self.variables.get(key)

        value = _expand(word.chars[start:], lookup)
        whole = [*(lookup(name) or []), *value] if append else value
        assignment = Assignment(name, _text(whole), word.line)
        if words := _split(value):
            self.out.lists.append(words)
        if self.assigning in _SETTING:
            self._set(assignment, whole)
        else:
            self.prefix.append((assignment, whole))

    def _set(self, assignment: Assignment, value: list[Char]) -> None:
        self.variables[assignment.name] = value
        self.out.assignments.append(assignment)

    def _finish(self) -> None:
        """The end of a simple command: Megatron-LM's words of it (:meth:`_command`); its NAME=V set the script's
        variables where it has no command word, else the environment of a command that launches."""
        words, prefix = self.current, self.prefix
        self.current, self.prefix = [], []
        self.command_start, self.assigning, self.opening = True, None, None
        if not words:
            for assignment, value in prefix:
                self._set(assignment, value)
            return
        launch = self._command(words)
        if launch.launches:
            self.functions.launched()
            self.out.assignments.extend(assignment for assignment, _ in prefix)
        if launch.args:
            self.out.lists.append(_tokens(launch.args))
        if launch.script is not None:
            self._run(launch.script)

    def _command(self, words: list[Word]) -> Command:
        """What Megatron-LM reads of a command (:func:`.launch.command`): in a bare argument list, every word,
        whatever bash would make of an unquoted ``|`` or ``(`` among them (a pasted command line); of a call to a
        function that launches, the words after its name."""
        if self.bare is None:
            self.bare = words[0].text.startswith("--")
        if self.bare:
            return Command(words, True)
        if words[0].text in self.functions.launching:
            return Command(words[1:], True)
        return command(words)

    def _run(self, script: Word) -> None:
        """The script of a ``bash -c``, read as a script of its own whose characters keep their lines."""
        if self.depth < _MAX_DEPTH and script.chars:
            inner = _Grouper(self.out, dict(self.variables), self.origin, self.depth + 1)
            inner.feed(scan(script.text, self.origin, [line for _, line, _ in script.chars]))
            inner.end()


def shell_words(text: str, origin: str) -> ShellWords:
    """The argument lists and assignments of a launch script (or of a bare argument list)."""
    grouper = _Grouper(ShellWords(), {}, origin)
    grouper.feed(scan(text.replace("\r\n", "\n"), origin))
    grouper.end()
    return grouper.out
