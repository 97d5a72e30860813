"""The words of a Megatron-LM launch script as bash splits them, each with the line it starts on: a command's
words (``torchrun ... pretrain_gpt.py --num-layers 48 \\``), a bash array's items (``ARGS=(--a 1 --b)``,
``ARGS+=(...)``, on one line or several) and the words of a variable's value (``GPT_ARGS="`` / ``--num-layers
48 \\`` / ``"``: what ``$GPT_ARGS`` splits into), each an argument list of its own (:attr:`ShellWords.lists`:
a flag's values never run on into the next list). Environment assignments (``export NAME=V``, ``NAME=V cmd``,
``NAME=V``) are kept as :class:`Assignment`. Not a shell: references (``$GPT_ARGS``, ``"${ARGS[@]}"``, ``$(...)``)
stay words, so every flag the file defines is read wherever it stands. A backslash at the end of a line
continues it (blanks after it tolerated) and ends the word before it; quotes may span lines."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from moeplan.errors import MoeplanError
from moeplan.megatron.read.collect import fail

Token = tuple[str, int]  # a word and the line it starts on

_OPERATORS = "();|&\n"  # bash metacharacters that end a word (redirections stay inside words: ignored)
_ASSIGNING = frozenset({"export", "declare", "typeset", "local", "readonly", "env"})  # NAME=V words follow
_KEYWORDS = frozenset({"if", "then", "elif", "else", "do", "while", "until", "!", "{", "time"})  # a command follows
_ASSIGNMENT = re.compile(r"([A-Za-z_]\w*)\+?=")
_CONTINUATION = re.compile(r"\\[ \t]*(\n|$)")
_PLAIN, _QUOTED, _SUBSTITUTED = "", "quoted", "substituted"  # how a word's character was written


@dataclass(frozen=True)
class Assignment:
    """``NAME=VALUE`` (or ``+=``) at a command's start or after export/declare/env, the value's quotes removed."""

    name: str
    value: str
    line: int


@dataclass
class ShellWords:
    """A script's argument lists (each a list of (word, line)) and its scalar assignments, in file order."""

    lists: list[list[Token]] = field(default_factory=list)
    assignments: list[Assignment] = field(default_factory=list)


@dataclass
class _Word:
    line: int
    chars: list[tuple[str, int, str]] = field(default_factory=list)  # (character, its line, how: _PLAIN ...)

    @property
    def text(self) -> str:
        return "".join(c for c, _, _ in self.chars)


@dataclass(frozen=True)
class _Op:
    text: str
    line: int
    glued: bool  # right after a word, no blank between ("ARGS=(")


class _Scanner:
    """Splits the text into words and operators, quotes removed, each character remembering its line."""

    def __init__(self, text: str, origin: str) -> None:
        self.text, self.origin = text.replace("\r\n", "\n"), origin
        self.pos, self.line = 0, 1
        self.items: list[_Word | _Op] = []
        self.word: _Word | None = None

    def scan(self) -> list[_Word | _Op]:
        while self.pos < len(self.text):
            self._step(self.text[self.pos])
        self._end_word()
        return self.items

    def _step(self, ch: str) -> None:
        if ch == "\\":
            self._backslash()
        elif ch in " \t\r":
            self._end_word()
            self.pos += 1
        elif ch == "#" and self.word is None:
            end = self.text.find("\n", self.pos)
            self.pos = len(self.text) if end < 0 else end
        elif ch == "'":
            self._single_quoted()
        elif ch == '"':
            self._double_quoted()
        elif ch in "$`" and self.text.startswith(("$(", "`"), self.pos):
            self._substitution()
        elif ch in _OPERATORS:
            self._operator(ch)
        else:
            self._add(ch, _PLAIN)
            self.pos += 1

    def _add(self, text: str, how: str) -> None:
        if self.word is None:
            self.word = _Word(self.line)
        for ch in text:
            self.word.chars.append((ch, self.line, how))
            self.line += ch == "\n"

    def _end_word(self) -> None:
        if self.word is not None:
            self.items.append(self.word)
            self.word = None

    def _backslash(self) -> None:
        continued = _CONTINUATION.match(self.text, self.pos)
        if continued:  # a continued line ends the word before it, as the line-by-line reader always did
            self._end_word()
            self.pos = continued.end()
            self.line += bool(continued.group(1))
            return
        self._add(self.text[self.pos + 1], _QUOTED)
        self.pos += 2

    def _unclosed(self, line: int, what: str) -> MoeplanError:
        return fail(self.origin, line, f"bad argument line: no closing {what} for the one opened here")

    def _single_quoted(self) -> None:
        end = self.text.find("'", self.pos + 1)
        if end < 0:
            raise self._unclosed(self.line, "quotation (')")
        self._open()
        self._add(self.text[self.pos + 1:end], _QUOTED)
        self.pos = end + 1

    def _open(self) -> None:
        """An opening quote starts a word even when nothing follows it ("" is a word)."""
        if self.word is None:
            self.word = _Word(self.line)

    def _double_quoted(self) -> None:
        start = self.line
        self._open()
        self.pos += 1
        while True:
            if self.pos >= len(self.text):
                raise self._unclosed(start, 'quotation (")')
            ch, nxt = self.text[self.pos], self.text[self.pos + 1:self.pos + 2]
            if ch == '"':
                self.pos += 1
                return
            if ch == "\\" and nxt == "\n":  # removed inside double quotes too
                self.pos += 2
                self.line += 1
            elif ch == "\\" and nxt and nxt in '$`"\\':
                self._add(nxt, _QUOTED)
                self.pos += 2
            elif self.text.startswith(("$(", "`"), self.pos):
                self._substitution()
            else:
                self._add(ch, _QUOTED)
                self.pos += 1

    def _substitution(self) -> None:
        """``$(...)`` (nested, ``$((...))`` too) or a backquoted command, kept whole inside the word."""
        start, closing = self.line, ("`" if self.text[self.pos] == "`" else ")")
        end = self._substitution_end(self.pos + (1 if closing == "`" else 2), closing)
        if end < 0:
            raise self._unclosed(start, f"'{closing}'")
        self._add(self.text[self.pos:end + 1], _SUBSTITUTED)
        self.pos = end + 1

    def _substitution_end(self, i: int, closing: str) -> int:
        """Index of the ``closing`` that ends a substitution whose text starts at ``i`` (-1: none)."""
        depth = 0
        while i < len(self.text):
            ch = self.text[i]
            if ch == "\\":
                i += 1
            elif ch in "'\"" and closing == ")":
                i = self.text.find(ch, i + 1)
                if i < 0:
                    return -1
            elif ch == closing and depth == 0:
                return i
            elif closing == ")":
                depth += (ch == "(") - (ch == ")")
            i += 1
        return -1

    def _operator(self, ch: str) -> None:
        glued = self.word is not None
        self._end_word()
        self.items.append(_Op(ch, self.line, glued))
        self.line += ch == "\n"
        self.pos += 1


def _split(chars: list[tuple[str, int, str]]) -> list[Token]:
    """A value split at blanks as an unquoted ``$NAME`` is (quotes do not protect), each word with its line; a
    command substitution stays one word (its output, unknown here, is what the variable holds)."""
    out: list[Token] = []
    word: list[str] = []
    line = 0
    for ch, at, how in [*chars, (" ", 0, _PLAIN)]:
        if ch in " \t\n\r" and how != _SUBSTITUTED:
            if word:
                out.append(("".join(word), line))
            word = []
        else:
            line = at if not word else line
            word.append(ch)
    return out


def _assignment(word: _Word) -> tuple[str, int] | None:
    """(name, index where the value starts) of an unquoted ``NAME=`` / ``NAME+=`` at the word's start."""
    m = _ASSIGNMENT.match(word.text)
    if m is None or any(how != _PLAIN for _, _, how in word.chars[:m.end()]):
        return None
    return m.group(1), m.end()


class _Grouper:
    """Walks the scanner's words and operators: commands, arrays and assignments into :class:`ShellWords`."""

    def __init__(self) -> None:
        self.out = ShellWords()
        self.current: list[Token] = []
        self.command_start = True  # the next word may be an assignment or a command name
        self.assigning: str | None = None  # export/declare/env: its options skipped, NAME=V words assignments
        self.array_name: str | None = None  # the last word was "NAME=" (an array may open, glued)
        self.array_line: int | None = None  # where the open array started

    def close(self) -> None:
        if self.current:
            self.out.lists.append(self.current)
        self.current = []

    def operator(self, op: _Op) -> None:
        pending, self.array_name = self.array_name, None
        if self.array_line is not None:
            if op.text == ")":
                self.array_line = None
                self.close()
            return  # newlines (and bash's syntax errors) inside an array
        if op.text == "(" and op.glued and pending is not None:
            self.out.assignments.pop()  # NAME=(...) is an array, not the scalar NAME=""
            self.close()
            self.array_line = op.line
            return
        self.close()
        self.command_start, self.assigning = True, None

    def word(self, word: _Word) -> None:
        self.array_name = None
        if self.array_line is not None:
            self.current.append((word.text, word.line))
            return
        if self.assigning and word.text.startswith("-") and word.chars[0][2] == _PLAIN:
            return  # export -n, declare -a / -x: the builtin's options
        found = _assignment(word) if self.command_start or self.assigning else None
        if found is not None:
            self._assign(word, *found)
            return
        self._state_after(word.text)
        self.current.append((word.text, word.line))

    def _state_after(self, text: str) -> None:
        """Where the next word stands after a word that is not an assignment."""
        if self.command_start and text in _KEYWORDS:
            return  # a command follows (then NAME=V cmd)
        if self.command_start and text in _ASSIGNING:
            self.assigning = text
        elif self.assigning == "env" or not self.assigning:
            self.assigning = None  # env's command, or a command's argument: no assignment follows
        self.command_start = False

    def _assign(self, word: _Word, name: str, start: int) -> None:
        value = word.chars[start:]
        if not value:
            self.array_name = name
        self.out.assignments.append(Assignment(name, "".join(c for c, _, _ in value), word.line))
        if words := _split(value):
            self.close()  # lists in file order: a later setting of a flag wins
            self.out.lists.append(words)


def shell_words(text: str, origin: str) -> ShellWords:
    """The argument lists and assignments of a launch script (or of a bare argument list)."""
    grouper = _Grouper()
    for item in _Scanner(text, origin).scan():
        if isinstance(item, _Op):
            grouper.operator(item)
        else:
            grouper.word(item)
    if grouper.array_line is not None:
        raise fail(origin, grouper.array_line, "bad argument line: the array opened here has no closing ')'")
    grouper.close()
    return grouper.out
