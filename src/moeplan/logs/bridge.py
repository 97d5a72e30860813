"""Megatron Bridge's printed configuration, in its two shapes.

- Since Bridge commit b273cd371 (2026-02), ``setup.py`` ``maybe_log_and_save_config`` calls
  ``ConfigContainer.log_non_default_values`` (src/megatron/bridge/training/config.py)::

    ======================================================================
    Configuration Summary (Non-Default Values vs Megatron Core)
    ======================================================================

    [model] Non-default values (vs Mcore TransformerConfig):
      expert_model_parallel_size: 16  (Mcore default: 1)
    ...
    ----------------------------------------------------------------------
    Other Configuration Values:
    ----------------------------------------------------------------------

    [train]:
      global_batch_size: 1024

  ``[optimizer]``, ``[ddp]`` and ``[model]`` list only the fields that differ from Megatron-Core's
  dataclass defaults (so a field absent there HAS Megatron-Core's default); the other sections list
  every field that is not None. Values are Python reprs.
- Before that, the full ConfigContainer YAML between ``------- Task Configuration -------`` and a line
  of dashes (``cfg.print_yaml()``), which moeplan's Bridge YAML reader parses.
"""

from __future__ import annotations

import re

import yaml

from moeplan.base import safeyaml
from moeplan.logs.megatron_lm import value

SUMMARY = "Configuration Summary (Non-Default Values vs Megatron Core)"
TASK = "------- Task Configuration -------"
_SECTION = re.compile(r"^(?:\S+:)?\s*\[(\w+)\](?: Non-default values \(vs Mcore (\w+)\))?:\s*$")
_ITEM = re.compile(r"^(?:\S+:)?\s+(\w+): (.*?)(?:\s{2}\(Mcore default: .*\))?\s*$")
_RULE = re.compile(r"^(?:\S+:)?\s*={20,}\s*$")

# Megatron-Core defaults of the fields the summary leaves out when they are at default and moeplan's
# run reader assumes otherwise (megatron/core/distributed/distributed_data_parallel_config.py:
# grad_reduce_in_fp32 False, overlap_grad_reduce False, overlap_param_gather False,
# use_distributed_optimizer False).
SUMMARY_DEFAULTS = {"ddp.grad_reduce_in_fp32": False, "ddp.overlap_grad_reduce": False,
                    "ddp.overlap_param_gather": False, "ddp.use_distributed_optimizer": False}


def find(text: str) -> str | None:
    """Which Bridge config print the log holds: "summary", "yaml" or None."""
    if SUMMARY in text:
        return "summary"
    if TASK in text:
        return "yaml"
    return None


def starts(text: str) -> list[tuple[int, str]]:
    """(offset, "summary" or "yaml") of every configuration print (one per start-up: a restarted job appended to
    the same log prints another)."""
    found = [(m.start(), "summary") for m in re.finditer(re.escape(SUMMARY), text)]
    found += [(m.start(), "yaml") for m in re.finditer(re.escape(TASK), text)]
    return sorted(found)


def parse_summary(text: str) -> tuple[dict[str, object], int | None]:
    """(``section.field`` -> value, line of the summary) of the non-default summary."""
    start = text.find(SUMMARY)
    if start < 0:
        return {}, None
    line_no = text.count("\n", 0, start) + 1
    out: dict[str, object] = dict(SUMMARY_DEFAULTS)
    section = None
    rules = 0
    for line in text[start + len(SUMMARY):].splitlines():
        if _RULE.match(line):
            rules += 1
            if rules >= 2:  # the closing rule
                break
            continue
        m = _SECTION.match(line)
        if m:
            section = m.group(1)
            continue
        m = _ITEM.match(line)
        if m and section:
            out[f"{section}.{m.group(1)}"] = value(m.group(2))
    return out, line_no


def task_yaml(text: str) -> tuple[str, int] | None:
    """The YAML between the Task Configuration banners and its first line number, or None."""
    start = text.find(TASK)
    if start < 0:
        return None
    body_start = text.find("\n", start) + 1
    lines = []
    for line in text[body_start:].splitlines():
        if re.fullmatch(r"\s*-{20,}\s*", line):
            break
        lines.append(line)
    return "\n".join(lines) + "\n", text.count("\n", 0, body_start) + 1


def flatten_yaml(text: str) -> dict[str, object]:
    """``section.field`` -> value of the Task Configuration YAML (empty when it does not load: the run
    reader then reports the YAML error with its line)."""
    try:
        doc = safeyaml.load(text, refuse_duplicates=False)  # the run reader reports them
    except yaml.YAMLError:
        return {}
    if not isinstance(doc, dict):
        return {}
    return {f"{sec}.{k}": v for sec, body in doc.items() if isinstance(body, dict) for k, v in body.items()}


__all__ = ["SUMMARY", "flatten_yaml", "SUMMARY_DEFAULTS", "TASK", "find", "parse_summary", "starts", "task_yaml"]
