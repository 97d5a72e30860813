"""Bash's word splitting of a launch script, for :mod:`.shell`: the text cut into words and operators
(``( ) ; | & newline``), quotes removed, each character remembering its line and how it was written
(:data:`PLAIN`, :data:`LITERAL`, :data:`DOUBLE`, :data:`SUBSTITUTED`). As bash does, a redirection (``> out.log``,
``>> f``, ``2>&1``, ``&> f``, ``< in``, ``2> err``, ``<<< text``) is dropped with the word it redirects to, and a
heredoc (``<<WORD``, ``<<-WORD``, ``<<'WORD'``, ``<<"WORD"``) with its body, up to the delimiter line. ``$(...)``,
backquotes, ``<(...)`` / ``>(...)`` and ``(( ... ))`` stay whole inside their word. A backslash at the end of a line
continues it (blanks after it tolerated) and ends the word before it; quotes may span lines."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from moeplan.base.errors import MoeplanError
from moeplan.megatron.read.collect import fail

# How a word's character was written: decides whether bash expands a $NAME in it and splits what it expands to.
PLAIN = ""  # unquoted: expanded, and what it expands to split at blanks
LITERAL = "literal"  # single-quoted or backslash-escaped: never expanded
DOUBLE = "double"  # inside double quotes: expanded, not split
SUBSTITUTED = "substituted"  # $(...), `...`, <(...): its output, unknown here, kept as one word
EXPANDED = "expanded"  # what an unquoted $NAME expanded to (:mod:`.shell`): split at blanks, not expanded again

Char = tuple[str, int, str]  # a character, the line it is written on, how it was written

_OPERATORS = "();|&\n"  # bash metacharacters that end a word
_REDIRECTION = re.compile(r"&>>?|<<<|<<-?|<>|<&|>>|>&|>\||<|>")  # longest first
# A heredoc's delimiter: WORD, 'WORD', "WORD" or \WORD (quoted: the body is not expanded; skipped either way)
_HEREDOC = re.compile(r"<<(-?)[ \t]*(?:'([^'\n]*)'|\"([^\"\n]*)\"|\\?([^\s;|&<>()'\"]+))")
_CONTINUATION = re.compile(r"\\[ \t]*(\n|$)")
_SUBSTITUTIONS = ("$(", "`", "<(", ">(")


@dataclass
class Word:
    """A word: the line it starts on and its characters (an empty quoted word, ``""``, has none)."""

    line: int
    chars: list[Char] = field(default_factory=list)
    quoted: bool = False  # a quote opened in it: bash keeps it even when it expands to nothing

    @property
    def text(self) -> str:
        return "".join(c for c, _, _ in self.chars)


@dataclass(frozen=True)
class Op:
    """An operator: one of ``( ) ; | &`` or a newline."""

    text: str
    line: int
    glued: bool  # right after a word, no blank between ("ARGS=(")


@dataclass(frozen=True)
class _Heredoc:
    delimiter: str
    strip_tabs: bool  # <<-: the body's and the delimiter line's leading tabs are removed
    line: int  # where it opens


def line_table(text: str, first: int = 1) -> list[int]:
    """The line of each character of ``text`` (and of its end), counting from ``first``."""
    lines: list[int] = []
    line = first
    for ch in text:
        lines.append(line)
        line += ch == "\n"
    return [*lines, line]


def heredoc_end(text: str, start: int, delimiter: str, strip_tabs: bool) -> int:
    """Index just past the line that closes a heredoc whose body starts at ``start``; -1 where no line does."""
    pos = start
    while pos < len(text):
        end = text.find("\n", pos)
        stop = len(text) if end < 0 else end
        line = text[pos:stop]
        if (line.lstrip("\t") if strip_tabs else line) == delimiter:
            return min(stop + 1, len(text))
        pos = stop + 1
    return -1


def _delimiter(m: re.Match[str]) -> str:
    return next(g for g in (m[2], m[3], m[4]) if g is not None)


class _Scanner:
    """Splits the text into words and operators, quotes removed, each character remembering its line."""

    def __init__(self, text: str, origin: str, lines: list[int]) -> None:
        self.text, self.origin, self.lines = text, origin, lines
        self.pos = 0
        self.items: list[Word | Op] = []
        self.word: Word | None = None
        self.dropping = False  # the next word is a redirection's target
        self.heredocs: list[_Heredoc] = []  # opened on this line: their bodies follow its newline

    @property
    def line(self) -> int:
        return self.lines[min(self.pos, len(self.lines) - 1)]

    def scan(self) -> list[Word | Op]:
        while self.pos < len(self.text):
            self._step(self.text[self.pos])
        self._end_word()
        self._skip_heredocs()
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
        elif self._at_substitution():
            self._substitution()
        elif self.text.startswith("${", self.pos):
            self._parameter(PLAIN)
        elif ch in "<>" or self.text.startswith("&>", self.pos):
            self._redirection()
        elif ch in _OPERATORS:
            self._operator(ch)
        else:
            self._add(self.pos, self.pos + 1, PLAIN)
            self.pos += 1

    def _at_substitution(self) -> bool:
        """At ``$(``, a backquote, ``<(`` / ``>(``, or an arithmetic command's ``((`` (a word's start)."""
        return self.text.startswith(_SUBSTITUTIONS, self.pos) or (
            self.word is None and self.text.startswith("((", self.pos))

    def _add(self, start: int, end: int, how: str) -> None:
        """The text from ``start`` to ``end``, each character with its line, onto the current word."""
        if self.word is None:
            self.word = Word(self.lines[start])
        self.word.chars.extend((self.text[i], self.lines[i], how) for i in range(start, end))

    def _end_word(self) -> None:
        word, self.word = self.word, None
        if word is None:
            return
        dropped, self.dropping = self.dropping, False
        if not dropped:
            self.items.append(word)

    def _backslash(self) -> None:
        continued = _CONTINUATION.match(self.text, self.pos)
        if continued:  # a continued line ends the word before it, as the line-by-line reader always did
            self._end_word()
            self.pos = continued.end()
            return
        self._add(self.pos + 1, self.pos + 2, LITERAL)
        self.pos += 2

    def _unclosed(self, line: int, what: str) -> MoeplanError:
        return fail(self.origin, line, f"bad argument line: no closing {what} for the one opened here")

    def _open(self) -> None:
        """An opening quote starts a word even when nothing follows it ("" is a word)."""
        if self.word is None:
            self.word = Word(self.line)
        self.word.quoted = True

    def _single_quoted(self) -> None:
        end = self.text.find("'", self.pos + 1)
        if end < 0:
            raise self._unclosed(self.line, "quotation (')")
        self._open()
        self._add(self.pos + 1, end, LITERAL)
        self.pos = end + 1

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
            elif ch == "\\" and nxt and nxt in '$`"\\':
                self._add(self.pos + 1, self.pos + 2, LITERAL)
                self.pos += 2
            elif self.text.startswith(("$(", "`"), self.pos):
                self._substitution()
            elif self.text.startswith("${", self.pos):
                self._parameter(DOUBLE)
            else:
                self._add(self.pos, self.pos + 1, DOUBLE)
                self.pos += 1

    def _substitution(self) -> None:
        """``$(...)`` (nested, ``$((...))`` too), a backquoted command, ``<(...)`` / ``>(...)`` or an arithmetic
        ``(( ... ))``, kept whole inside the word."""
        start, closing = self.line, ("`" if self.text[self.pos] == "`" else ")")
        end = substitution_end(self.text, self.pos + (1 if closing == "`" else 2), closing)
        if end < 0:
            raise self._unclosed(start, f"'{closing}'")
        self._add(self.pos, end + 1, SUBSTITUTED)
        self.pos = end + 1

    def _parameter(self, how: str) -> None:
        """``${...}`` kept whole in the word, blanks and all (``${X:-a b}``), for :mod:`.shell` to expand."""
        end = substitution_end(self.text, self.pos + 2, "}")
        if end < 0:
            raise self._unclosed(self.line, "'}'")
        self._add(self.pos, end + 1, how)
        self.pos = end + 1

    def _redirection(self) -> None:
        """A redirection operator, dropped with its target (the next word); a word of digits before it is the file
        descriptor (``2>``), dropped too. ``<<`` / ``<<-``: a heredoc, whose body is skipped after this line."""
        if self.word is not None and self.word.text.isdigit() and all(h == PLAIN for _, _, h in self.word.chars):
            self.word = None
        self._end_word()
        op = _REDIRECTION.match(self.text, self.pos)[0]  # type: ignore[index]  # at < or > or &>
        if op in ("<<", "<<-"):
            self._heredoc()
            return
        self.pos += len(op)
        self.dropping = True

    def _heredoc(self) -> None:
        m = _HEREDOC.match(self.text, self.pos)
        if m is None:
            raise fail(self.origin, self.line, "bad argument line: a heredoc ('<<') without its delimiter word")
        self.heredocs.append(_Heredoc(_delimiter(m), bool(m[1]), self.line))
        self.pos = m.end()

    def _operator(self, ch: str) -> None:
        glued = self.word is not None
        self._end_word()
        self.dropping = False  # a redirection with no word after it: bash's syntax error, nothing to drop
        self.items.append(Op(ch, self.line, glued))
        self.pos += 1
        if ch == "\n":
            self._skip_heredocs()

    def _skip_heredocs(self) -> None:
        """Past the bodies of the heredocs the line just ended opened, each up to its delimiter line."""
        for doc in self.heredocs:
            end = heredoc_end(self.text, self.pos, doc.delimiter, doc.strip_tabs)
            if end < 0:
                raise fail(self.origin, doc.line, f"bad argument line: the heredoc opened here has no closing "
                           f"'{doc.delimiter}' line (bash reads the rest of the file as its text)")
            self.pos = end
        self.heredocs = []


def substitution_end(text: str, i: int, closing: str) -> int:
    """Index of the ``closing`` (``)``, ``}`` or a backquote) that ends a substitution whose text starts at ``i``
    (-1: none); nested brackets, and the quotes, ``#`` comments and the bodies of heredocs inside a ``$(...)``, are
    skipped."""
    depth, heredocs, start = 0, list[re.Match[str]](), i
    while i < len(text):
        ch = text[i]
        if ch == "\\":
            i += 1
        elif ch == "#" and closing == ")" and (i == start or text[i - 1] in " \t\n(;|&"):  # a comment: to its line's end
            end = text.find("\n", i)
            if end < 0:
                return -1
            i = end - 1
        elif ch in "'\"" and closing == ")":
            i = text.find(ch, i + 1)
            if i < 0:
                return -1
        elif closing == ")" and text.startswith("<<", i) and not text.startswith("<<<", i) and (
                m := _HEREDOC.match(text, i)):
            heredocs.append(m)
            i = m.end() - 1
        elif ch == "\n" and heredocs:
            for m in heredocs:
                i = heredoc_end(text, i + 1, _delimiter(m), bool(m[1])) - 1
                if i < 0:
                    return -1
            heredocs = []
        elif ch == closing and depth == 0:
            return i
        elif closing != "`":
            opening = "(" if closing == ")" else "{"
            depth += (ch == opening) - (ch == closing)
        i += 1
    return -1


def scan(text: str, origin: str, lines: list[int] | None = None) -> list[Word | Op]:
    """The words and operators of ``text``; ``lines``: the line of each of its characters (default: counted
    from 1), as for the script of a ``bash -c`` whose characters keep the lines they are written on."""
    table = line_table(text) if lines is None else [*lines, lines[-1] if lines else 1]
    return _Scanner(text, origin, table).scan()
