"""Megatron-LM's argument dump: every ``args`` attribute, printed by rank 0 at start-up.

Format (megatron/training/arguments.py ``_print_args``)::

    ------------------------ arguments ------------------------
      accumulate_allreduce_grads_in_fp32 .............. True
      tensor_model_parallel_size ...................... 2
      ...
    -------------------- end of arguments ---------------------

one ``  name <dots> value`` line per attribute (48 - len(name) dots, none for long names), sorted, values
as Python prints them (``None``, ``True``, ``['moe_act']``, ``torch.bfloat16``, enum members such as
``<CudaGraphScope.attn: 1>``). Names are argparse destinations, which for the parallel, MoE, recompute,
CUDA graph and optimizer settings are the Megatron-Core field names.
"""

from __future__ import annotations

import ast
import re

BANNER = "------------------------ arguments ------------------------"
_END = re.compile(r"-+ end of arguments -+")
_LINE = re.compile(r"^(?:\S+:)?\s+([A-Za-z_]\w*) (?:\.+ |\s+)(.*?)\s*$")
_ENUM = re.compile(r"<\w+\.(\w+): [^>]*>")

# argparse destinations whose Megatron-Core field has another name (arguments.py; validate_args sets
# accumulate_allreduce_grads_in_fp32 from --bf16 unless --grad-reduce-in-bf16).
RENAMES = {"accumulate_allreduce_grads_in_fp32": "grad_reduce_in_fp32", "num_experts": "num_moe_experts"}


def value(text: str) -> object:
    """A printed Python value: literals as Python reads them, enum members by name, else the text."""
    t = _ENUM.sub(lambda m: repr(m.group(1)), text.strip())
    try:
        return ast.literal_eval(t)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return t


def find(text: str) -> bool:
    return BANNER in text


def starts(text: str) -> list[int]:
    """Offsets of every argument dump (rank 0 prints one per start-up: a restarted job appended to the same log
    prints another)."""
    return [m.start() for m in re.finditer(re.escape(BANNER), text)]


def parse_arguments(text: str) -> tuple[dict[str, object], int | None]:
    """(settings by name, line of the banner) of the first argument dump; ({}, None) when there is none.
    A dump cut short (a truncated log) keeps the lines it has."""
    start = text.find(BANNER)
    if start < 0:
        return {}, None
    line_no = text.count("\n", 0, start) + 1
    body = text[start + len(BANNER):]
    end = _END.search(body)
    body = body[:end.start()] if end else body
    out: dict[str, object] = {}
    for line in body.splitlines():
        m = _LINE.match(line)
        if m:
            name = RENAMES.get(m.group(1), m.group(1))
            out.setdefault(name, value(m.group(2)))
    return out, line_no


__all__ = ["BANNER", "find", "parse_arguments", "starts", "value"]
