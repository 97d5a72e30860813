"""The Jinja2 templates the HTML report (:mod:`moeplan.report`) and the web page (:mod:`moeplan.web`) share.

``templates/parts.html.j2`` holds one macro per piece of a page (summary, plans table, memory, step time,
timeline, sweep, a figure); :mod:`moeplan.report` computes each piece's rows in Python and renders them
with these macros, and the web page's templates import the same macros, so both show one markup. Imported
lazily (Jinja2 is not loaded by ``moeplan --help``).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jinja2 import Environment
    from markupsafe import Markup

TEMPLATES_DIR = Path(__file__).parent / "templates"


@lru_cache(maxsize=None)
def environment(*extra_dirs: str) -> Environment:
    """A Jinja2 environment over ``extra_dirs`` (searched first) and the shared templates: HTML
    autoescaping on, block tags leave no blank lines."""
    from jinja2 import Environment, FileSystemLoader, StrictUndefined

    env = Environment(loader=FileSystemLoader([*extra_dirs, str(TEMPLATES_DIR)]), autoescape=True,
                      trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True, undefined=StrictUndefined)
    return env


def render(name: str, **context: Any) -> str:
    """The shared template ``name`` rendered with ``context``."""
    return environment().get_template(name).render(**context)


def macro(name: str, **context: Any) -> Markup:
    """One macro of ``parts.html.j2`` called with ``context`` (what a report section is rendered with)."""
    from markupsafe import Markup

    module = environment().get_template("parts.html.j2").module
    return Markup(getattr(module, name)(**context))
