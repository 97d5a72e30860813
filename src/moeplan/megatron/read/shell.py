"""The argument lists of a Megatron-LM launch script, each word with the line it is written on, read as bash
splits and expands them (:mod:`.shell_scan`: quotes, redirections and heredocs; :mod:`.launch`: which command's
words are Megatron-LM's). Each list is read on its own (:attr:`ShellWords.lists`: a flag's values never run on into
the next list):

- the arguments of a Python launch (``torchrun ... pretrain_gpt.py --num-layers 48 \\``); other commands' words are
  not read (``set -euo pipefail``), except in a bare argument list (a text whose first command starts with a
  ``--flag``: moeplan's own export, a pasted command line), where every word is;
- a bash array's items (``ARGS=(--a 1 --b)``, ``ARGS+=(...)``, on one line or several), read as a variable's value
  is (below);
- the words of a variable's value (``GPT_ARGS="`` / ``--num-layers 48 \\`` / ``"``: what ``$GPT_ARGS`` splits
  into), where a launch's arguments reference it, directly or through another variable or array that is (a value
  only ``srun`` or ``torchrun`` reads, ``SRUN_ARGS="--nodes 2"``, is not Megatron-LM's); every value where the
  file launches nothing (a file of variables) or is a bare argument list;
- the script of ``bash -c`` / ``sh -c`` (``srun bash -c "python pretrain_gpt.py ..."``), read as a script.

References are expanded as bash does, in file order (control flow is not followed): ``$NAME``, ``${NAME}``,
``${NAME:-word}`` / ``${NAME-word}``, ``${NAME:=word}`` / ``${NAME=word}`` (which also set NAME), ``${NAME:+word}`` /
``${NAME+word}`` and ``${NAME:?msg}`` / ``${NAME?msg}`` (NAME's value; unset: left as written), unquoted (the
value split into words) or in double quotes (one word), after a ``=`` too (``--tensor-model-parallel-size=$TP``); not in single quotes or after a backslash. A name takes the
value of ``NAME=V`` alone on its command, ``export`` / ``declare`` / ``local`` / ``readonly`` / ``typeset NAME=V``,
not of ``NAME=V cmd`` (the command's environment only); a name the script does not set stays as written.
A ``$((...))`` of integers, set variables, ``+ - * / %`` and parentheses is evaluated; other arithmetic,
``${ARGS[@]}``, ``$(...)`` and the like stay words: the array's own list is read. The scalar assignments that set
a variable, or the environment of a command that launches, are kept as :class:`Assignment`."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from moeplan.megatron.read.collect import fail
from moeplan.megatron.read.launch import Command, command
from moeplan.megatron.read.shell_scan import (DOUBLE, EXPANDED, PLAIN, SUBSTITUTED, Char, Op, Word, scan,
                                              substitution_end)

Token = tuple[str, int]  # a word and the line it is written on

_ASSIGNING = frozenset({"export", "declare", "typeset", "local", "readonly", "env"})  # NAME=V words follow
_SETTING = _ASSIGNING - {"env"}  # their NAME=V sets the script's variable (env's: its command's environment)
_KEYWORDS = frozenset({"if", "then", "elif", "else", "do", "while", "until", "!", "{", "time"})  # a command follows
_ASSIGNMENT = re.compile(r"([A-Za-z_]\w*)(\+?)=")
# $NAME, ${NAME}, ${NAME:-word} / ${NAME-word}, ${NAME:=word}, ${NAME:+word}, ${NAME:?word} (and without the colon):
# bash parameter expansion
_REFERENCE = re.compile(r"\$(?:([A-Za-z_]\w*)|\{([A-Za-z_]\w*)(?:(:?)([-=+?])([^}]*))?\})")
# A name in a bash arithmetic expression, or a reference to one
_ARITHMETIC_NAME = re.compile(r"\$?\{?([A-Za-z_]\w*)\}?")
_NAMED = re.compile(r"\$\{?([A-Za-z_]\w*)")  # a reference's name: $NAME, ${NAME...}, ${NAME[@]}
_MAX_DEPTH = 8  # nested bash -c scripts read
_BLANKS = " \t\n\r"

Lookup = Callable[[str], "list[Char] | None"]  # a variable's value (its characters), None where unset
Setter = Callable[[str, "list[Char]"], None]  # ${NAME:=word} sets NAME


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


def _reference(chars: list[Char], text: str, i: int, lookup: Lookup,
               assign: Setter | None) -> tuple[int, list[Char]] | None:
    """(end, value) of the reference bash expands at ``i``, or None: no reference, quoted by ``'`` or ``\\``, a
    name the script does not set and no default, or ``${NAME:?msg}`` of an unset NAME (left as written)."""
    how = chars[i][2]
    if chars[i][0] != "$" or how not in (PLAIN, DOUBLE):
        return None
    m = _REFERENCE.match(text, i)
    if m is None or any(h != how for _, _, h in chars[i:m.end()]):
        return None
    name, op = m[1] or m[2], m[4]
    value = lookup(name)
    missing = value is None or (bool(m[3]) and not value)  # unset, or (with ':') empty
    if op == "+":  # the word where NAME is set (non-empty with ':'), else nothing
        return m.end(), ([] if missing else _expand(chars[m.start(5):m.end(5)], lookup, assign))
    if op in ("-", "=") and missing:  # the word, itself expanded; ':=' / '=' also sets NAME
        word = _expand(chars[m.start(5):m.end(5)], lookup, assign)
        if op == "=" and assign is not None:
            assign(name, word)
        return m.end(), word
    return None if value is None else (m.end(), value)


def _arithmetic(expression: str, lookup: Lookup) -> int | None:
    """The value of a bash arithmetic expression of integers, set variables holding integers, ``+ - * / %`` and
    parentheses (bash's integer division and remainder, truncated toward zero); None for anything else."""
    tokens = re.findall(r"\s*(\d+|\$?\{?[A-Za-z_]\w*\}?|[-+*/%()]|\S)", expression)
    pos = 0

    def peek() -> str | None:
        return tokens[pos] if pos < len(tokens) else None

    def take() -> str:
        nonlocal pos
        pos += 1
        return tokens[pos - 1]

    def atom() -> int:
        token = take() if peek() is not None else ""
        if token in ("+", "-"):
            value = atom()
            return -value if token == "-" else value
        if token == "(":
            value = sum_()
            if peek() != ")":
                raise ValueError(expression)
            take()
            return value
        if token.isdigit():
            return int(token, 8) if len(token) > 1 and token.startswith("0") else int(token)
        name = _ARITHMETIC_NAME.fullmatch(token)
        held = lookup(name[1]) if name else None
        if held is None or not _text(held).strip().lstrip("-").isdigit():
            raise ValueError(expression)
        return int(_text(held).strip())

    def product() -> int:
        value = atom()
        while peek() in ("*", "/", "%"):
            op, right = take(), atom()
            if op == "*":
                value *= right
            else:
                quotient = abs(value) // abs(right) * (1 if (value >= 0) == (right >= 0) else -1)
                value = quotient if op == "/" else value - quotient * right
        return value

    def sum_() -> int:
        value = product()
        while peek() in ("+", "-"):
            value = value + product() if take() == "+" else value - product()
        return value

    try:
        value = sum_()
    except (ValueError, ZeroDivisionError):
        return None
    return value if pos == len(tokens) else None


def _arithmetic_end(chars: list[Char], text: str, i: int) -> int | None:
    """End of the ``$((...))`` (kept whole by the scanner) that starts at ``i``, or None."""
    if not text.startswith("$((", i) or chars[i][2] != SUBSTITUTED:
        return None
    end = substitution_end(text, i + 2, ")")
    if end < 0 or text[end - 1] != ")" or substitution_end(text, i + 3, ")") != end - 1:
        return None
    return end + 1


def _expand(chars: list[Char], lookup: Lookup, assign: Setter | None = None) -> list[Char]:
    """``chars`` with each reference replaced by its value, whose characters keep the lines they are written on
    and are marked to split (unquoted: :data:`EXPANDED`) or not (in double quotes); a ``$((...))`` of integers
    and set variables replaced by its value. ``assign``: how ``${NAME:=word}`` sets NAME."""
    text, out, i = _text(chars), [], 0
    while i < len(chars):
        end = _arithmetic_end(chars, text, i)
        result = None if end is None else _arithmetic(text[i + 3:end - 2], lookup)
        if end is not None and result is not None:
            out.extend((c, chars[i][1], DOUBLE) for c in str(result))
            i = end
            continue
        found = _reference(chars, text, i, lookup, assign)
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


def _names(chars: list[Char]) -> set[str]:
    """The names that the unquoted or double-quoted references among ``chars`` name, as written."""
    text = _text(chars)
    return {m[1] for m in _NAMED.finditer(text) if chars[m.start()][2] in (PLAIN, DOUBLE)}


@dataclass
class _Uses:
    """Which variables' and arrays' values are Megatron-LM's arguments: those a launch's arguments (or a launched
    shell's script) reference, directly or through another variable or array that is; shared by a script and the
    ``bash -c`` scripts it runs."""

    values: list[tuple[list[Token], str]] = field(default_factory=list)  # a value's list, the name it sets
    references: dict[str, set[str]] = field(default_factory=dict)  # a name -> the names its values reference
    launched: set[str] = field(default_factory=set)  # referenced by a launch
    launches: bool = False  # the script has a launch

    def assigned(self, name: str, words: list[Token], chars: list[Char]) -> None:
        self.values.append((words, name))
        self.references.setdefault(name, set()).update(_names(chars))

    def unused(self) -> list[list[Token]]:
        """The value lists no launch uses (none where the script has no launch: a file of variables of flags)."""
        if not self.launches:
            return []
        used, todo = set[str](), list(self.launched)
        while todo:
            name = todo.pop()
            if name not in used:
                used.add(name)
                todo.extend(self.references.get(name, ()))
        return [words for words, name in self.values if name not in used]


class _Grouper:
    """Walks the scanner's words and operators in file order: commands, arrays and assignments into
    :class:`ShellWords`, the script's variables as they are set."""

    def __init__(self, out: ShellWords, variables: dict[str, list[Char]], origin: str, depth: int = 0,
                 uses: _Uses | None = None) -> None:
        self.out, self.variables, self.origin, self.depth = out, variables, origin, depth
        self.uses = _Uses() if uses is None else uses
        self.current: list[Word] = []  # the command's words, expanded
        self.named: dict[int, set[str]] = {}  # id of a word of the command -> the names its word as written references
        self.prefix: list[tuple[Assignment, list[Char]]] = []  # NAME=V of the command: its environment, or the
        # script's variables where no command word follows
        self.command_start = True  # the next word may be an assignment or a command name
        self.assigning: str | None = None  # export/declare/env: its options skipped, NAME=V words assignments
        self.opening: str | None = None  # "NAME=" glued to the "(" that follows: the array's name
        self.array: list[Token] = []  # the open array's items
        self.array_name = ""
        self.array_chars: list[Char] = []  # the open array's items as written
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
                    self.uses.assigned(self.array_name, self.array, self.array_chars)
                self.array_chars = []
                self.array, self.array_line = [], None
            return  # newlines (and bash's syntax errors) inside an array
        if op.text == "(" and self.opening is not None:  # NAME=(...): an array, not the scalar NAME=""
            self.array_line, self.array_name, self.opening = op.line, self.opening, None
            return
        if defines and len(self.current) == 1 and not self.prefix:  # NAME () { ...; }: a function, not a command
            self.functions.define(self.current.pop().text)
        self._finish()

    def word(self, word: Word, opens_array: bool = False) -> None:
        if self.array_line is not None:
            self.array.extend(_tokens(self._expanded(word)))
            self.array_chars.extend(word.chars)
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
            expanded = self._expanded(word)
            self.current.extend(expanded)
            self.named.update((id(w), _names(word.chars)) for w in expanded)

    def _expanded(self, word: Word) -> list[Word]:
        return _fields(word, _expand(word.chars, self.variables.get, self.variables.__setitem__))

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

        value = _expand(word.chars[start:], lookup, self.variables.__setitem__)
        whole = [*(lookup(name) or []), *value] if append else value
        assignment = Assignment(name, _text(whole), word.line)
        if words := _split(value):
            self.out.lists.append(words)
            self.uses.assigned(name, words, word.chars[start:])
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
        words, prefix, named = self.current, self.prefix, self.named
        self.current, self.prefix, self.named = [], [], {}
        self.command_start, self.assigning, self.opening = True, None, None
        if not words:
            for assignment, value in prefix:
                self._set(assignment, value)
            return
        launch = self._command(words)
        if launch.launches:
            self.functions.launched()
            self.uses.launches = True
            for word in launch.args:  # a shell's script is read as a script: its launch's references count
                self.uses.launched.update(named.get(id(word), ()))
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
            inner = _Grouper(self.out, dict(self.variables), self.origin, self.depth + 1, self.uses)
            inner.feed(scan(script.text, self.origin, [line for _, line, _ in script.chars]))
            inner.end()


def shell_words(text: str, origin: str) -> ShellWords:
    """The argument lists and assignments of a launch script (or of a bare argument list)."""
    grouper = _Grouper(ShellWords(), {}, origin)
    grouper.feed(scan(text.replace("\r\n", "\n"), origin))
    grouper.end()
    if not grouper.bare:  # a bare argument list is read whole
        unused = {id(words) for words in grouper.uses.unused()}
        grouper.out.lists = [words for words in grouper.out.lists if id(words) not in unused]
    return grouper.out
