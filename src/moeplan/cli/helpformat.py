"""``--help`` text that fits the terminal: argparse's RawDescriptionHelpFormatter keeps descriptions and epilogs
as written, so a 700-character description came out as one 700-column line. This formatter refills prose
(unindented lines, joined up to a blank line or an indented line) at the help width, and keeps indented lines
(examples) as written, breaking one that is too long at a space with a shell line continuation, so that it still
pastes as one command."""

from __future__ import annotations

import argparse
import textwrap

_CONTINUATION = " \\"


def _example_lines(line: str, width: int) -> list[str]:
    """An indented line within ``width``: broken before an option (a flag stays with its value), each part but
    the last ending in ' \\' and the parts after the first indented two more columns (a part longer than the
    width stays whole)."""
    if len(line) <= width:
        return [line]
    indent = line[: len(line) - len(line.lstrip())]
    more = indent + "  "
    out: list[str] = []
    current = ""
    words: list[str] = []
    for word in line.split():  # '--gbs 1024' is one unit
        if words and not word.startswith("-") and words[-1].startswith("-") and " " not in words[-1]:
            words[-1] += " " + word
        else:
            words.append(word)
    for word in words:
        lead = indent if not out else more
        candidate = f"{current} {word}" if current else lead + word
        if current and len(candidate) + len(_CONTINUATION) > width:
            out.append(current + _CONTINUATION)
            current = more + word
        else:
            current = candidate
    out.append(current)
    return out


class WrappingHelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Prose refilled at the terminal width, indented (example) lines kept; argument help wraps as argparse's."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        out: list[str] = []
        prose: list[str] = []

        def flush() -> None:
            if prose:
                out.extend(textwrap.wrap(" ".join(prose), width, initial_indent=indent, subsequent_indent=indent,
                                         break_long_words=False, break_on_hyphens=False))
                prose.clear()

        for line in text.splitlines():
            if not line.strip():
                flush()
                out.append("")
            elif line[0].isspace():
                flush()
                out.extend(_example_lines(indent + line, width))
            else:
                prose.append(line.strip())
        flush()
        return "\n".join(out)
