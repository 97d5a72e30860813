"""Published Megatron runs as moeplan inputs (shared by the tests and benchmarks/published_ranks.py).

Three sources, one shape:
- ../shared/reference/published_runs.csv, with the settings it leaves blank filled from the recipe that
  produced each run (tests/data/published_runs_recipes.csv), never from the published result;
- tests/data/bridge_perf_runs.csv, the newest Megatron Bridge perf-summary MoE rows with their recipes'
  settings (out of sample: no constant was set from them);
- tests/data/out_of_fit_runs.csv, measured runs of models with a feature no fitted run has (their MTP layers
  and pipeline layout too), which set only those models' band below the estimate.
"""

from __future__ import annotations

import csv
import os
import subprocess
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def shared_dir() -> Path:
    """The reference data folder: $MOEPLAN_SHARED, else ``shared/`` next to the project root, else next to
    the repository this checkout was cloned from (a clean clone made elsewhere, as CI makes one)."""
    env = os.environ.get("MOEPLAN_SHARED")
    if env:
        return Path(env)
    candidates = [ROOT.parent / "shared"]
    try:
        origin = subprocess.run(["git", "-C", str(ROOT), "config", "--get", "remote.origin.url"],
                                capture_output=True, text=True, timeout=10, check=False).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        origin = ""
    if origin and Path(origin).is_dir():
        candidates.append(Path(origin).resolve().parent / "shared")
    return next((c for c in candidates if (c / "models").is_dir()), candidates[0])
DATA = ROOT / "tests" / "data"
LAYOUT_KEYS = ("tp", "pp", "vpp", "cp", "ep")


def _read(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(line for line in fh if not line.startswith("#")))


def published_runs(reference_dir: Path) -> list[dict[str, str]]:
    """Rows of published_runs.csv, each merged with its recipe's settings (blank CSV cells only)."""
    recipes = {(r["model"], r["system"], r["gpus"], r["seq_len"]): r for r in _read(DATA / "published_runs_recipes.csv")}
    out = []
    for row in _read(reference_dir / "published_runs.csv"):
        rec = recipes.get((row["model"], row["system"], row["gpus"], row["seq_len"]), {})
        run = {k: v for k, v in rec.items() if k not in row or not row[k]} | {k: v for k, v in row.items() if v}
        run.setdefault("etp", "1")
        out.append(run)
    return out


def bridge_runs() -> list[dict[str, str]]:
    return _read(DATA / "bridge_perf_runs.csv")


def out_of_fit_runs() -> list[dict[str, str]]:
    """tests/data/out_of_fit_runs.csv: measured runs of models with a feature no fitted run has, each with its
    recipe's settings and its published step time (``measured_step_time_s``)."""
    return _read(DATA / "out_of_fit_runs.csv")


def label(run: dict[str, str]) -> str:
    return f"{run['model']}-{run['system']}-{run['gpus']}-{run['seq_len']}"


# Megatron Bridge's FP8 recipe names (scripts/performance argument_parser.py --fp8_recipe: ds delayed, cs current,
# mx MXFP8, ss sub-channel = blockwise) as moeplan precisions: a recipe's ``fp8_recipe`` names the scaling where the
# published CSV says only "fp8" (whose moeplan reading is blockwise on Hopper).
FP8_RECIPE_PRECISION = {"ds": "fp8-ds", "cs": "fp8-cs", "mx": "mxfp8", "ss": "fp8"}


def run_precision(run: dict[str, str]) -> str:
    """The run's moeplan precision: the CSV's, or, where it says only "fp8", the recipe's ``fp8_recipe``."""
    recipe = run.get("fp8_recipe") or ""
    return FP8_RECIPE_PRECISION[recipe] if run["precision"] == "fp8" and recipe else run["precision"]


def plan_kwargs(run: dict[str, str]) -> dict[str, Any]:
    """What the planner is given: model, cluster, sequence, GBS and the run's numerics and release."""
    return dict(gpu=run["system"], gpus=int(run["gpus"]), seq_len=int(run["seq_len"]), gbs=int(run["gbs"]),
                precision=run_precision(run), grad_fp32=run.get("grad_fp32", "1") != "0",
                bf16_moments=run.get("bf16_moments") == "1", mcore_version=run.get("mcore") or "0.16",
                fp8_attention=run.get("fp8_attention") == "1")


def layout(run: dict[str, str]) -> dict[str, int]:
    return {k: int(run[k]) for k in LAYOUT_KEYS} | {"etp": int(run.get("etp") or 1), "mbs": int(run["mbs"])}


def estimate_kwargs(run: dict[str, str]) -> dict[str, Any]:
    """The run as published: layout, dispatcher, overlap, graphs, recompute, numerics."""
    recompute = run.get("recompute", "")
    return plan_kwargs(run) | layout(run) | dict(
        dispatcher=run.get("dispatcher") or "auto",
        recompute=recompute if recompute.startswith("full") else f"selective:{recompute}" if recompute else "none",
        ep_overlap=run.get("ep_overlap") == "1", cuda_graphs=run.get("cuda_graph_scopes") or None,
        delay_wgrad={"0": False, "1": True}.get(run.get("delay_wgrad") or ""),  # blank: Bridge's pairing
        rank_capacity_factor=float(run["rank_capacity_factor"]) if run.get("rank_capacity_factor") else None,
        dp_overlap=run.get("dp_overlap", "1") != "0",
    ) | ({"mtp_layers": int(run["mtp_layers"])} if run.get("mtp_layers") else {}) | (
        {"cp_comm_type": run["cp_comm_type"]} if run.get("cp_comm_type") else {}) | (
        {"pipeline_layout": run["pipeline_layout"]} if run.get("pipeline_layout") else {})


def bridge_pr_runs() -> list[dict[str, str]]:
    """tests/data/bridge_pr_runs.csv: runs Megatron Bridge's engineers measured in a pull request, with its recipe."""
    return _read(DATA / "bridge_pr_runs.csv")
