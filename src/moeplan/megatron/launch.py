"""A plan as a ready Megatron Bridge launch command: ``scripts/training/train.sh`` (``--format bridge-launch``) or
``scripts/performance/setup_experiment.py`` (``--format perf-launch``), the launchers' flags for what they have
one for and the plan's Bridge overrides (:func:`moeplan.megatron.export.to_overrides`) for the rest.

The launchers' flag tables and recipe names are data (:mod:`moeplan.megatron.launch_tables`, read at Megatron
Bridge v0.6.0); :func:`parse_launch` reads an emitted command back with those tables. Account, partition and
container image are left as shell variables the user sets.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

from moeplan.base.errors import MoeplanError
from moeplan.base.fields import fields_for, normalize_version
from moeplan.base.vocab import LAUNCH_FORMATS
from moeplan.megatron import launch_tables as T
from moeplan.megatron.export import bridge_items, env_settings, format_override_value, provenance_comment
from moeplan.run.config import RunConfig

PLACEHOLDERS = {"account": "$ACCOUNT", "partition": "$PARTITION", "container": "$CONTAINER_IMAGE"}
TRAIN_SCRIPT = "scripts/training/train.sh"
PERF_SCRIPT = "scripts/performance/setup_experiment.py"


def check_version(mcore_version: str) -> str:
    """The Megatron-Core version the launch formats need; a one-line error for any other (the CLI calls it before
    the plan search, so a wrong version costs no search)."""
    version = normalize_version(mcore_version)
    if version != T.LAUNCHER_MCORE:
        raise MoeplanError(f"the launch formats write Megatron Bridge {T.LAUNCHER_TAG}'s launchers, which run "
                           f"Megatron-Core {T.LAUNCHER_MCORE}; this plan targets {version} "
                           f"(plan with --mcore-version {T.LAUNCHER_MCORE})")
    return version


def _check_version(cfg: RunConfig) -> str:
    return check_version(cfg.mcore_version)


def launch_command(cfg: RunConfig, fmt: str) -> str:
    """The ``fmt`` launch command (one of LAUNCH_FORMATS) of the run."""
    return bridge_launch(cfg) if fmt == "bridge-launch" else perf_launch(cfg)


def recipe_for(model: str, gpu: str, precision: str, gpus: int) -> tuple[str, str | None]:
    """The Bridge pretraining recipe function to start from, and a note where it is not the exact match
    (model, GPU, precision): another precision on the same GPU, else the model's H100 BF16 recipe (every field
    moeplan plans is set by the overrides after it). GPU count: the recipe's closest to ``gpus``."""
    if model not in T.RECIPE_MODELS:
        raise MoeplanError(f"no Megatron Bridge {T.LAUNCHER_TAG} recipe for model '{model}' in moeplan's table "
                           f"(it has {', '.join(T.RECIPE_MODELS)}); use --format overrides with your recipe")
    stem = T.RECIPE_MODELS[model][0]
    tag = T.PRECISION_TAGS.get(precision)
    note = None
    key = (stem, gpu, tag or "")
    if key not in T.RECIPES:
        same_gpu = [k for k in T.RECIPES if k[:2] == (stem, gpu)]
        key = (stem, gpu, "bf16") if (stem, gpu, "bf16") in T.RECIPES else same_gpu[0] if same_gpu else \
            (stem, "h100", "bf16")
        note = (f"no {gpu} {precision} recipe for {model} at {T.LAUNCHER_TAG}: starting from {key[1]} {key[2]} "
                "(the overrides set the precision, layout and every planned field)")
    counts = T.RECIPES[key]
    n = min(counts, key=lambda c: (abs(c - gpus), -c))
    return f"{stem}_pretrain_{n}gpu_{key[1]}_{key[2]}_config", note


def _nodes(cfg: RunConfig) -> tuple[int, int]:
    gpus = cfg.parallel.gpus
    per_node = min(T.GPUS_PER_NODE.get(cfg.gpu.name, 8), gpus)
    if gpus % per_node:
        raise MoeplanError(f"{gpus} GPUs do not fill whole {cfg.gpu.name} nodes of {per_node}; plan a multiple of "
                           f"{per_node} GPUs for a launch command")
    return gpus // per_node, per_node


def _items(cfg: RunConfig, version: str) -> list[tuple[str, object]]:
    return bridge_items(cfg, version)


def _override(path: str, value: object, version: str) -> str:
    f = fields_for(version)
    prefix = "++" if path.split(".", 1)[0] in f.bridge_instance_sections else ""
    return f"{prefix}{path}={format_override_value(value)}"


def _lines(head: list[str], groups: list[list[str]]) -> str:
    """Comment lines, then one command with one group of words per line (shell-quoted, `\\` continued)."""
    body = [" ".join(shlex.quote(w) if not w.startswith('"$') else w for w in g) for g in groups if g]
    return "\n".join(head + [" \\\n  ".join(body)]) + "\n"


def _value_word(value: object) -> str:
    return ",".join(map(str, value)) if isinstance(value, list) else str(value)


def bridge_launch(cfg: RunConfig) -> str:
    """``scripts/training/train.sh --recipe <recipe> --nodes N --gpus-per-node G ...`` with the overrides after it."""
    version = _check_version(cfg)
    nodes, per_node = _nodes(cfg)
    recipe, note = recipe_for(cfg.model.name, cfg.gpu.name, cfg.precision, cfg.parallel.gpus)
    by_path = {v: k for k, v in T.TRAIN_FLAG_FIELDS.items()}
    flags: list[str] = []
    overrides: list[str] = []
    for path, value in _items(cfg, version):
        flag = by_path.get(path)
        if flag is not None and value is not None:
            flags += [flag, _value_word(value)]
        else:
            overrides.append(_override(path, value, version))
    env = [w for k, v in env_settings(cfg).items() for w in ("--env", f"{k}={v}")]
    head = [provenance_comment(cfg, version),
            f"# Megatron Bridge {T.LAUNCHER_TAG} ({T.LAUNCHER_COMMIT[:7]}) {TRAIN_SCRIPT}: set ACCOUNT, PARTITION and "
            "CONTAINER_IMAGE first"]
    if note:
        head.append(f"# {note}")
    groups = [[TRAIN_SCRIPT],
              ["--nodes", str(nodes), "--gpus-per-node", str(per_node)],
              ["--account", f'"{PLACEHOLDERS["account"]}"', "--partition", f'"{PLACEHOLDERS["partition"]}"',
               "--container-image", f'"{PLACEHOLDERS["container"]}"'],
              env,
              ["--recipe", recipe, "--mode", "pretrain"],
              flags,
              *([o] for o in overrides)]
    return _lines(head, groups)


def perf_launch(cfg: RunConfig) -> str:
    """``python scripts/performance/setup_experiment.py`` with its flags for TP, PP, CP, VP, EP, ET, MBS, GBS,
    sequence length, CUDA graphs, recompute and the dispatcher backend; the rest as overrides (what a flag cannot
    say exactly, e.g. a full-iteration graph's cuda_graph_impl, stays an override)."""
    version = _check_version(cfg)
    nodes, per_node = _nodes(cfg)
    model = cfg.model.name
    if model not in T.RECIPE_MODELS:
        raise MoeplanError(f"no Megatron Bridge {T.LAUNCHER_TAG} performance recipe for model '{model}' in moeplan's "
                           f"table (it has {', '.join(T.RECIPE_MODELS)})")
    if cfg.precision not in T.PERF_COMPUTE_DTYPES:
        raise MoeplanError(f"precision {cfg.precision} has no performance --compute_dtype "
                           f"(it has {', '.join(T.PERF_COMPUTE_DTYPES)})")
    _, family, recipe = T.RECIPE_MODELS[model]
    items = dict(_items(cfg, version))
    flags: list[str] = []
    covered: set[str] = set()

    def flag(name: str, path: str, word: str | None = None) -> None:
        flags.extend([name] if word == "" else [name, word if word is not None else _value_word(items[path])])
        covered.add(path)

    for name, path in (("-tp", "model.tensor_model_parallel_size"), ("-pp", "model.pipeline_model_parallel_size"),
                       ("-cp", "model.context_parallel_size"), ("-ep", "model.expert_model_parallel_size"),
                       ("-mb", "train.micro_batch_size"), ("-gb", "train.global_batch_size")):
        flag(name, path)
    vp = items.get("model.virtual_pipeline_model_parallel_size")
    flag("-vp", "model.virtual_pipeline_model_parallel_size", "None" if vp is None else str(vp))
    et = items.get("model.expert_tensor_parallel_size")
    flag("-et", "model.expert_tensor_parallel_size", "" if et is None else str(et))
    if items.get("model.seq_length") is not None:  # -sl sets the model's and the dataset's (README)
        flag("-sl", "model.seq_length")
        covered.add(fields_for(version).dataset_seq_path)
    impl = items.get("model.cuda_graph_impl")
    if impl in T.PERF_CUDA_GRAPH_IMPLS:
        flag("--cuda_graph_impl", "model.cuda_graph_impl")
    graph_field = fields_for(version).cuda_graph_field
    scopes = items.get(f"model.{graph_field}")
    if isinstance(scopes, list) and scopes and all(s in T.PERF_CUDA_GRAPH_SCOPES for s in scopes) \
            and impl in T.PERF_CUDA_GRAPH_IMPLS:
        flag("--cuda_graph_scope", f"model.{graph_field}")
    if isinstance(items.get("model.recompute_modules"), list) and items["model.recompute_modules"]:
        flag("--recompute_modules", "model.recompute_modules")
    if items.get("model.recompute_num_layers") is not None:
        flag("-rl", "model.recompute_num_layers")
    if items.get("model.moe_flex_dispatcher_backend") in T.PERF_DISPATCHER_BACKENDS:
        flag("--moe_flex_dispatcher_backend", "model.moe_flex_dispatcher_backend")
    overrides = [_override(p, v, version) for p, v in items.items() if p not in covered]
    env = [w for k, v in env_settings(cfg).items() for w in ("-E", f"{k}={v}")]
    head = [provenance_comment(cfg, version),
            f"# Megatron Bridge {T.LAUNCHER_TAG} ({T.LAUNCHER_COMMIT[:7]}) {PERF_SCRIPT}: set ACCOUNT, PARTITION and "
            "CONTAINER_IMAGE first; the overrides after the flags are applied last (Hydra)"]
    groups = [["python", PERF_SCRIPT],
              ["-a", f'"{PLACEHOLDERS["account"]}"', "-p", f'"{PLACEHOLDERS["partition"]}"',
               "-i", f'"{PLACEHOLDERS["container"]}"'],
              ["-m", family, "-mr", recipe, "--task", "pretrain", "-g", cfg.gpu.name,
               "-c", T.PERF_COMPUTE_DTYPES[cfg.precision], "-ng", str(cfg.parallel.gpus), "-gn", str(per_node)],
              env, flags, *([o] for o in overrides)]
    del nodes
    return _lines(head, groups)


# ------------------------------------------------------------------------------------------ reading back


@dataclass
class LaunchCommand:
    """A launcher invocation read with its flag table: flags by their longest option string (values as given,
    a switch -> []), and the trailing KEY=VALUE overrides in order."""

    program: str
    flags: dict[str, list[str]] = field(default_factory=dict)
    overrides: list[str] = field(default_factory=list)


def _flag_index(tables: tuple[tuple[T.Flag, ...], ...]) -> dict[str, tuple[str, str]]:
    index = {}
    for table in tables:
        for names, arity in table:
            canonical = max(names, key=len)
            for name in names:
                index[name] = (canonical, arity)
    return index


def parse_launch(text: str) -> LaunchCommand:
    """A command :func:`bridge_launch` / :func:`perf_launch` wrote (comments, ``\\`` continuations), read as the
    launchers' argparse would with their flag tables: MoeplanError on a flag they do not have, a missing value, or
    a word that is neither a flag nor KEY=VALUE."""
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    words = shlex.split(" ".join(line.rstrip().removesuffix("\\") for line in lines))
    if words[:1] == [TRAIN_SCRIPT]:
        index, rest = _flag_index((T.TRAIN_LAUNCHER_FLAGS, T.TRAIN_RECIPE_FLAGS)), words[1:]
    elif words[:2] == ["python", PERF_SCRIPT]:
        index, rest = _flag_index((T.PERF_FLAGS,)), words[2:]
    else:
        raise MoeplanError(f"not a Megatron Bridge launch command: {' '.join(words[:2])}")
    out = LaunchCommand(program=PERF_SCRIPT if words[0] == "python" else TRAIN_SCRIPT)
    i = 0
    while i < len(rest):
        word = rest[i]
        i += 1
        if word.startswith("-") and not word.startswith("++"):
            name, eq, inline = word.partition("=")
            if name not in index:
                raise MoeplanError(f"{out.program} has no flag {name} (Megatron Bridge {T.LAUNCHER_TAG})")
            canonical, arity = index[name]
            values = [inline] if eq else []
            if not eq and arity == "1" and i < len(rest):  # argparse takes the next word, '=' or not
                values.append(rest[i])
                i += 1
            elif not eq and arity in ("?", "*", "+"):
                while i < len(rest) and not (rest[i].startswith("-") and not rest[i][1:2].isdigit()) \
                        and "=" not in rest[i]:
                    values.append(rest[i])
                    i += 1
                    if arity in ("1", "?"):
                        break
            if arity == "1" and len(values) != 1 or arity == "+" and not values or arity == "0" and values:
                raise MoeplanError(f"{out.program} flag {name} takes {arity} value(s), got {values}")
            out.flags.setdefault(canonical, []).extend(values)
        elif "=" in word:
            out.overrides.append(word)
        else:
            raise MoeplanError(f"{out.program}: '{word}' is neither a flag nor a KEY=VALUE override")
    return out


__all__ = ["LaunchCommand", "bridge_launch", "parse_launch", "perf_launch", "recipe_for"]
