"""Reader of Megatron Bridge Hydra overrides (``model.context_parallel_size=8``, ``+key=value``, ``~key``), one
or several per line, as written for a shell or in a file."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable

from moeplan.base.errors import one_line
from moeplan.base.fields import INT_RE
from moeplan.megatron.read.bridge import classify_bridge
from moeplan.megatron.read.collect import Collector, ParsedRun, fail
_OVERRIDE = re.compile(r"(\+\+|\+|~)?([A-Za-z_][\w\-]*(?:\.[\w\-]+)*)(?:=(.*))?", re.DOTALL)
_FLOAT = re.compile(r"[+-]?(\d+\.\d*|\.\d+|\d+)([eE][+-]?\d+)?|[+-]?(inf|nan)", re.IGNORECASE)


def _split_tokens(line: str) -> tuple[list[str], str | None]:
    """Whitespace-separated tokens outside quotes and brackets, '#' comments dropped.
    Returns (tokens, error)."""
    tokens: list[str] = []
    buf: list[str] = []
    quote: str | None = None
    depth = 0
    for i, ch in enumerate(line):
        if quote:
            buf.append(ch)
            if ch == quote and line[i - 1] != "\\":
                quote = None
            continue
        if ch == "#" and not buf and depth == 0:
            break
        if ch.isspace() and depth == 0:
            if buf:
                tokens.append("".join(buf))
                buf = []
            continue
        if ch in "'\"":
            quote = ch
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
            if depth < 0:
                return tokens, "unbalanced brackets"
        buf.append(ch)
    if quote:
        return tokens, "unclosed quote"
    if depth:
        return tokens, "unbalanced brackets (lists must fit on one line)"
    if buf:
        tokens.append("".join(buf))
    return tokens, None


def _unquote(text: str) -> str | None:
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return re.sub(r"\\(.)", r"\1", text[1:-1])
    return None


def _split_list(inner: str) -> list[str]:
    parts: list[str] = []
    buf: list[str] = []
    quote: str | None = None
    depth = 0
    for i, ch in enumerate(inner):
        if quote:
            quote = None if ch == quote and inner[i - 1] != "\\" else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append("".join(buf).strip())
            buf = []
            continue
        buf.append(ch)
    last = "".join(buf).strip()
    if last or parts:
        parts.append(last)
    return parts


def parse_override_value(text: str) -> object:
    """A Hydra override value: null, true/false, int, float, quoted or bare string, [list] (raw text for {dict})."""
    text = text.strip()
    quoted = _unquote(text)
    if quoted is not None:
        return quoted
    if text.startswith("[") and text.endswith("]"):
        return [parse_override_value(p) for p in _split_list(text[1:-1])]
    low = text.lower()
    if low == "null":
        return None
    if low in ("true", "false"):
        return low == "true"
    try:
        if INT_RE.fullmatch(text):
            return int(text)
        if _FLOAT.fullmatch(text):
            return float(text)
    except ValueError:  # more digits than int() accepts
        pass
    return text


def _override_tokens(text: str, origin: str) -> Iterable[tuple[str, int]]:
    for number, raw in enumerate(text.splitlines(), start=1):
        tokens, error = _split_tokens(raw)
        if error:
            raise fail(origin, number, f"bad override line: {error}")
        for token in tokens:
            if token == "\\":
                continue
            yield _shell_word(token), number


def _shell_word(token: str) -> str:
    """A token written for a shell ('key=value', 'key='"'"'a|b'"'"'') as the word the shell passes on."""
    if token[0] not in "'\"":
        return token
    try:
        words = shlex.split(token)
    except ValueError:
        return token
    return words[0] if len(words) == 1 else token


def parse_overrides(text: str, origin: str) -> ParsedRun:
    col = Collector(origin, "overrides")
    for token, line in _override_tokens(text, origin):
        m = _OVERRIDE.fullmatch(token)
        if token.startswith("-"):
            col.unknown.append((token, line))
            continue
        if m is None or (m.group(3) is None and m.group(1) != "~"):
            raise fail(origin, line, f"bad override '{one_line(token)[:80]}': expected key=value, +key=value or ~key")
        prefix, path, raw = m.groups()
        if prefix == "~":
            col.drop(path)
            col.ignored.append((token, line))
            continue
        classify_bridge(col, path, parse_override_value(raw), line)
    return col.result()
