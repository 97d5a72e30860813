"""The page's questions: query and form fields (the CLI's flag names, ``_`` for ``-``) read into the API's
keywords, each bad field with moeplan's one line beside it.

A model is a catalog name or an uploaded config.json (``upload:<id>``), a hardware file only an uploaded
YAML: the page never reads a path on the server. Counts, lengths and the lengths of a sweep are bounded as the CLI
and the API bound them (moeplan.base.limits, with their messages) and every field is at most
:data:`MAX_FIELD_CHARS` long, so no question makes the server work for long.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from moeplan.base import argcheck
from moeplan.base.argcheck import token_count
from moeplan.base.errors import MoeplanError
from moeplan.base.limits import run_problem, sweep_lengths_problem

MAX_FIELD_CHARS = 200  # a field longer than this is refused (no name, number or list is this long)
MAX_UPLOAD_BYTES = 1 << 20  # an uploaded or pasted file, and any request body: 1 MiB
UPLOAD_PREFIX = "upload:"
_UPLOAD_ID = re.compile(r"[0-9a-f]{16}")

# The fields each view reads; their order is the form's. Pins are the plan's optional fixed knobs.
PLAN_PINS = ("tp", "pp", "vpp", "cp", "ep", "etp")


@dataclass
class Form:
    """Raw field values (to show the form again as sent) and the errors found reading them."""

    values: dict[str, str]
    errors: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, params: Mapping[str, Any]) -> Form:
        values = {}
        for k, v in params.items():
            if isinstance(v, str):
                values[str(k)] = v.strip()
        return cls(values)

    def raw(self, name: str) -> str:
        return self.values.get(name, "")

    def fail(self, name: str, message: str) -> None:
        self.errors.setdefault(name, message)

    def _get(self, name: str) -> str | None:
        text = self.raw(name)
        if not text:
            return None
        if len(text) > MAX_FIELD_CHARS:
            self.fail(name, f"{name} is {len(text):,} characters long; at most {MAX_FIELD_CHARS}")
            return None
        return text

    def text(self, name: str, default: str | None = None) -> str | None:
        v = self._get(name)
        return default if v is None else v

    def required(self, name: str) -> str | None:
        v = self._get(name)
        if v is None and name not in self.errors:
            self.fail(name, f"{name} is required")
        return v

    def count(self, name: str, *, required: bool = False, default: int | None = None, minimum: int = 1,
              bound: str | None = None) -> int | None:
        """A whole number >= ``minimum`` within the bound of the run size ``bound`` (default ``name``), as the API
        checks it (moeplan.base.argcheck.count: moeplan.base.limits' bounds and messages)."""
        v = self.required(name) if required else self._get(name)
        if v is None:
            return default
        try:
            n = int(v.replace(",", "").replace("_", ""))
        except ValueError:
            self.fail(name, f"{name} must be a whole number, got '{v}'")
            return None
        try:
            return argcheck.count(name, n, minimum=minimum, bound=bound)
        except MoeplanError as exc:
            self.fail(name, str(exc))
            return None

    def tokens(self, name: str, *, required: bool = False, bound: str | None = None) -> int | None:
        v = self.required(name) if required else self._get(name)
        if v is None:
            return None
        return self._token_item(name, v, bound or name)

    def lengths(self, name: str, *, required: bool = False) -> list[int] | None:
        v = self.required(name) if required else self._get(name)
        if v is None:
            return None
        items = [t.strip() for t in v.split(",")]
        if any(not t for t in items):
            self.fail(name, f"{name}: an empty item in '{v}'; give comma-separated lengths, e.g. 16k,32k,64k")
            return None
        problem = sweep_lengths_problem(len(items))
        if problem:
            self.fail(name, f"{name}: {problem}")
            return None
        out = []
        for t in items:
            n = self._token_item(name, t, "seq_len")
            if n is None:
                return None
            out.append(n)
        if len(set(out)) != len(out):
            self.fail(name, f"{name}: a length appears twice in '{v}'")
            return None
        return out

    def _token_item(self, name: str, text: str, bound: str) -> int | None:
        """One token count ('128k') as the CLI reads it (moeplan.base.argcheck.token_count), within the bound of the
        run size ``bound`` (moeplan.base.limits: seq_len, gbs_tokens), with the CLI's message past it."""
        try:
            n = token_count(text)
        except MoeplanError as exc:
            self.fail(name, f"{name}: {exc}")
            return None
        problem = run_problem(bound, n)
        if problem:
            self.fail(name, f"{name} {problem}")
            return None
        return n

    def choice(self, name: str, choices: tuple[str, ...], default: str | None) -> str | None:
        v = self._get(name)
        if v is None:
            return default
        if v not in choices:
            self.fail(name, f"{name} '{v}' unknown; choose one of {', '.join(choices)}")
            return None
        return v


class Uploads:
    """Uploaded files, kept in one temporary directory while the server runs; each named by its content's hash
    (``upload:<id>``), never by the name the browser sent."""

    KINDS = {"model": ".json", "hardware": ".yaml"}

    def __init__(self, root: Path) -> None:
        self.root = root

    def save(self, kind: str, data: bytes) -> str:
        """Store ``data`` and check it reads as a ``kind`` file (a config.json moeplan reads, a hardware YAML);
        the reference a form names it by. A file that does not read is removed and its error raised."""
        if len(data) > MAX_UPLOAD_BYTES:
            raise MoeplanError(f"the file is {len(data):,} bytes; at most {MAX_UPLOAD_BYTES:,} (1 MiB)")
        if not data.strip():
            raise MoeplanError("the file is empty")
        ref = hashlib.sha256(data).hexdigest()[:16]
        path = self.root / f"{ref}{self.KINDS[kind]}"
        path.write_bytes(data)
        try:
            self.check(kind, path)
        except MoeplanError:
            path.unlink(missing_ok=True)
            raise
        return UPLOAD_PREFIX + ref

    @staticmethod
    def check(kind: str, path: Path) -> None:
        if kind == "model":
            from moeplan.models import load_model

            load_model(str(path))
        else:
            from moeplan.hardware import hardware_names

            hardware_names(path)

    def path(self, kind: str, ref: str) -> Path:
        """The stored file of a reference (``upload:<id>``); a MoeplanError when it is not one or is gone."""
        ident = ref[len(UPLOAD_PREFIX):] if ref.startswith(UPLOAD_PREFIX) else ""
        if not _UPLOAD_ID.fullmatch(ident):
            raise MoeplanError(f"'{ref}' is not an uploaded file (upload:<id>)")
        path = self.root / f"{ident}{self.KINDS[kind]}"
        if not path.is_file():
            raise MoeplanError(f"uploaded file {ref} is not on this server (uploads last while it runs); upload it again")
        return path

    def hide(self, text: str) -> str:
        """A message with this directory's paths said as the references the page shows."""
        return re.sub(re.escape(str(self.root)) + r"/([0-9a-f]{16})\.(?:json|yaml)", UPLOAD_PREFIX + r"\1", text)


def model_arg(form: Form, uploads: Uploads, name: str = "model", required: bool = True) -> str | None:
    """A catalog name, or the path of an uploaded config.json; nothing else (no server path)."""
    v = form.required(name) if required else form.text(name)
    if v is None:
        return None
    if v.startswith(UPLOAD_PREFIX):
        try:
            return str(uploads.path("model", v))
        except MoeplanError as exc:
            form.fail(name, str(exc))
            return None
    from moeplan.models import catalog_names

    if v.lower() not in catalog_names():
        form.fail(name, f"unknown model '{v}': not a catalog name ({', '.join(catalog_names())}); upload a "
                        "config.json for another model")
        return None
    return v.lower()


def hardware_arg(form: Form, uploads: Uploads, name: str = "hardware") -> str | None:
    v = form.text(name)
    if v is None:
        return None
    try:
        return str(uploads.path("hardware", v))
    except MoeplanError as exc:
        form.fail(name, str(exc))
        return None


def gpu_arg(form: Form, hardware: str | None, *, required: bool = True) -> str | None:
    from moeplan.hardware import hardware_names

    v = form.text("gpu", "h100" if required else None)
    if v is None:
        return None
    try:
        names = hardware_names(hardware)
    except MoeplanError:
        return v  # the hardware field says what is wrong
    if v.lower() not in [n.lower() for n in names]:
        form.fail("gpu", f"unknown GPU '{v}'; known: {', '.join(names)}")
        return None
    return v


# Where an API error belongs: the first field whose pattern its message matches (else the form's top line).
_FIELD_OF = (
    (re.compile(r"^unknown model|model '|config\.json|model_type", re.I), "model"),
    (re.compile(r"hardware file|hardware yaml", re.I), "hardware"),
    (re.compile(r"unknown GPU|^GPU |GPU '", re.I), "gpu"),
    (re.compile(r"Megatron-Core version|mcore_version", re.I), "mcore_version"),
    (re.compile(r"^precision|precision '", re.I), "precision"),
    (re.compile(r"^recompute|recompute module", re.I), "recompute"),
    (re.compile(r"^(fixed )?dispatcher", re.I), "dispatcher"),
    (re.compile(r"seq_lens?\b|--seq-len|sequence length", re.I), "seq_len"),
    (re.compile(r"gbs_tokens|--gbs-tokens|token budget", re.I), "gbs_tokens"),
    (re.compile(r"^gpus\b", re.I), "gpus"),
    (re.compile(r"^gbs\b", re.I), "gbs"),
)


def field_of(message: str, fields: tuple[str, ...]) -> str:
    """The field an API error names (one of ``fields``), else '' (the form's own line)."""
    for pattern, name in _FIELD_OF:
        if name in fields and pattern.search(message):
            return name
    for name in fields:
        if re.match(rf"(fixed )?{name}\b", message):
            return name
    return ""
