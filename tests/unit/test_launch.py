"""--format bridge-launch / perf-launch: the commands parse with Megatron Bridge's launcher flag tables, and flags
plus overrides say exactly what the export says."""

from __future__ import annotations

import subprocess
import sys

import pytest

from moeplan.api import build_config
from moeplan.base.errors import MoeplanError
from moeplan.megatron import export, launch
from moeplan.megatron import launch_tables as T
from moeplan.megatron.read.overrides import parse_override_value

PLANS = {
    "deepseek-v3": dict(gpus=1024, seq_len=4096, gbs=8192, tp=2, pp=8, vpp=4, ep=64,
                        recompute="selective:mla_up_proj,layernorm", dispatcher="deepep",
                        cuda_graphs="attn,moe_router", offload_modules="expert_fc1"),
    "qwen3-235b-a22b": dict(gpus=256, seq_len=4096, gbs=2048, tp=2, pp=8, vpp=4, ep=32, dispatcher="alltoall",
                            recompute="full:uniform:1"),
    "qwen3-30b-a3b": dict(gpus=16, seq_len=4096, gbs=512, ep=8, dispatcher="alltoall", precision="fp8-cs"),
    "qwen3-next-80b-a3b": dict(gpus=32, seq_len=4096, gbs=512, ep=32, dispatcher="hybridep",
                               cuda_graphs="full_iteration"),
}


def plan(model: str, **changes: object):  # noqa: ANN201
    cfg, _ = build_config(model, gpu="h100", mcore_version="0.19", **{**PLANS[model], **changes})  # type: ignore
    return cfg


def _as_settings(cmd: launch.LaunchCommand, flag_fields: dict[str, str]) -> dict[str, object]:
    """Bridge path -> value from a parsed command: its flags through the launcher's field table, then the
    overrides (applied after the flags, so they win)."""
    out: dict[str, object] = {}
    for name, values in cmd.flags.items():
        if name in flag_fields:
            word = values[0] if values else "null"
            out[flag_fields[name]] = parse_override_value(word if word != "None" else "null")
    for o in cmd.overrides:
        path, _, value = o.partition("=")
        out[path.lstrip("+")] = parse_override_value(value)
    return out


def _long(short: str, table: tuple[T.Flag, ...]) -> str:
    return next(max(names, key=len) for names, _ in table if short in names)


TRAIN_FIELDS = {_long(k, T.TRAIN_RECIPE_FLAGS): v for k, v in T.TRAIN_FLAG_FIELDS.items()}
PERF_FIELDS = {"--tensor_model_parallel_size": "model.tensor_model_parallel_size",
               "--pipeline_model_parallel_size": "model.pipeline_model_parallel_size",
               "--context_parallel_size": "model.context_parallel_size",
               "--virtual_pipeline_model_parallel_size": "model.virtual_pipeline_model_parallel_size",
               "--expert_model_parallel_size": "model.expert_model_parallel_size",
               "--expert_tensor_parallel_size": "model.expert_tensor_parallel_size",
               "--micro_batch_size": "train.micro_batch_size", "--global_batch_size": "train.global_batch_size",
               "--seq_length": "model.seq_length", "--cuda_graph_impl": "model.cuda_graph_impl",
               "--recompute_num_layers": "model.recompute_num_layers",
               "--moe_flex_dispatcher_backend": "model.moe_flex_dispatcher_backend"}


def _exported(cfg) -> dict[str, object]:  # noqa: ANN001
    return {o.partition("=")[0].lstrip("+"): parse_override_value(o.partition("=")[2])
            for o in export.to_overrides(cfg)}


@pytest.mark.parametrize("model", list(PLANS))
def test_bridge_launch_parses_and_says_what_the_export_says(model: str) -> None:
    cfg = plan(model)
    text = launch.bridge_launch(cfg)
    cmd = launch.parse_launch(text)
    assert cmd.program == "scripts/training/train.sh"
    per_node = min(T.GPUS_PER_NODE["h100"], cfg.parallel.gpus)
    assert cmd.flags["--nodes"] == [str(cfg.parallel.gpus // per_node)]
    assert cmd.flags["--gpus-per-node"] == [str(per_node)]
    assert cmd.flags["--account"] == ["$ACCOUNT"] and cmd.flags["--container-image"] == ["$CONTAINER_IMAGE"]
    (recipe,) = cmd.flags["--recipe"]
    assert recipe.startswith(T.RECIPE_MODELS[model][0] + "_pretrain_") and "_h100_" in recipe
    said = _as_settings(cmd, TRAIN_FIELDS)
    want = _exported(cfg)
    want.pop("model.seq_length")  # run_recipe.py sets it from the dataset's (-sl)
    said.pop("model.seq_length", None)
    assert said == want
    # no path twice: a flag's field is not repeated as an override
    paths = [o.partition("=")[0].lstrip("+") for o in cmd.overrides]
    assert len(paths) == len(set(paths)) and not set(paths) & {TRAIN_FIELDS[f] for f in cmd.flags if f in TRAIN_FIELDS}
    assert cmd.flags.get("--env", []) == [f"{k}={v}" for k, v in export.env_settings(cfg).items()]


@pytest.mark.parametrize("model", list(PLANS))
def test_perf_launch_parses_and_says_what_the_export_says(model: str) -> None:
    cfg = plan(model)
    cmd = launch.parse_launch(launch.perf_launch(cfg))
    assert cmd.program == "scripts/performance/setup_experiment.py"
    family, recipe = T.RECIPE_MODELS[model][1:]
    assert cmd.flags["--model_family_name"] == [family] and cmd.flags["--model_recipe_name"] == [recipe]
    assert cmd.flags["--compute_dtype"] == [T.PERF_COMPUTE_DTYPES[cfg.precision]]
    assert cmd.flags["--num_gpus"] == [str(cfg.parallel.gpus)]
    said = _as_settings(cmd, PERF_FIELDS)
    want = _exported(cfg)
    field = "model.cuda_graph_modules"
    if "--cuda_graph_scope" in cmd.flags:
        said[field] = cmd.flags["--cuda_graph_scope"][0].split(",")
    if "--recompute_modules" in cmd.flags:
        said["model.recompute_modules"] = cmd.flags["--recompute_modules"][0].split(",")
    want.pop("dataset.seq_length")  # -sl sets both
    assert said == want


def test_full_iteration_graph_is_an_override_in_perf_launch() -> None:
    """The performance launcher's --cuda_graph_impl accepts none / local / transformer_engine only: Megatron-Core
    0.19's full_iteration implementation stays an override."""
    cmd = launch.parse_launch(launch.perf_launch(plan("qwen3-next-80b-a3b")))
    assert "--cuda_graph_impl" not in cmd.flags
    assert "model.cuda_graph_impl=full_iteration" in cmd.overrides
    assert "rerun_state_machine.check_for_nan_in_loss=false" in cmd.overrides


def test_recipe_table() -> None:
    assert launch.recipe_for("deepseek-v3", "h100", "bf16", 1024) == ("deepseek_v3_pretrain_1024gpu_h100_bf16_config",
                                                                      None)
    assert launch.recipe_for("deepseek-v3", "h100", "bf16", 64)[0] == "deepseek_v3_pretrain_64gpu_h100_bf16_config"
    assert launch.recipe_for("qwen3-30b-a3b", "gb200", "mxfp8", 8)[0] == "qwen3_30b_a3b_pretrain_8gpu_gb200_fp8mx_config"
    name, note = launch.recipe_for("qwen3-next-80b-a3b", "h100", "mxfp8", 32)
    assert name == "qwen3_next_80b_a3b_pretrain_32gpu_h100_bf16_config" and note and "mxfp8" in note
    with pytest.raises(MoeplanError, match="mixtral"):
        launch.recipe_for("mixtral-8x7b", "h100", "bf16", 16)


def test_launch_needs_the_launchers_megatron_core() -> None:
    cfg, _ = build_config("qwen3-30b-a3b", gpu="h100", mcore_version="0.16", **PLANS["qwen3-30b-a3b"])  # type: ignore
    with pytest.raises(MoeplanError, match="0.19"):
        launch.bridge_launch(cfg)


def test_parse_launch_uses_the_flag_tables() -> None:
    text = launch.bridge_launch(plan("qwen3-30b-a3b"))
    with pytest.raises(MoeplanError, match="--no-such-flag"):
        launch.parse_launch(text.replace("--mode pretrain", "--mode pretrain --no-such-flag 1"))
    with pytest.raises(MoeplanError, match="neither a flag nor"):
        launch.parse_launch(text.replace("--mode pretrain", "--mode pretrain stray"))
    # perf flags are not the training launcher's
    with pytest.raises(MoeplanError, match="-mr"):
        launch.parse_launch(text.replace("--mode pretrain", "--mode pretrain -mr qwen3_30b_a3b"))


def test_cli_plan_format_bridge_launch() -> None:
    args = [sys.executable, "-m", "moeplan", "plan", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--seq-len",
            "4096", "--gbs", "512", "--mcore-version", "0.19", "--tp", "1", "--pp", "1", "--ep", "8"]
    out = subprocess.run([*args, "--format", "bridge-launch"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    cmd = launch.parse_launch(out.stdout)
    assert cmd.flags["--recipe"] == ["qwen3_30b_a3b_pretrain_16gpu_h100_bf16_config"]
    perf = subprocess.run([*args, "--format", "perf-launch"], capture_output=True, text=True)
    assert perf.returncode == 0 and launch.parse_launch(perf.stdout).program.endswith("setup_experiment.py")
    bad = subprocess.run([*args[:-8], "--format", "bridge-launch", "--tp", "1", "--pp", "1", "--ep", "8"],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr and "0.19" in bad.stderr


def test_cli_launch_version_is_refused_before_the_search(monkeypatch: pytest.MonkeyPatch, capsys) -> None:  # noqa: ANN001
    """A launch format with another Megatron-Core is refused before the plan search runs (no search's wait)."""
    import moeplan.api
    from moeplan.cli import main

    def search(*a: object, **k: object) -> None:
        raise AssertionError("the plan search ran before the launch format's version check")

    monkeypatch.setattr(moeplan.api, "search_plans", search)
    for fmt in ("bridge-launch", "perf-launch"):
        rc = main(["plan", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--seq-len", "4096", "--gbs", "512",
                   "--mcore-version", "0.16", "--format", fmt])
        err = capsys.readouterr().err
        assert rc == 2 and "--mcore-version 0.19" in err and "Traceback" not in err
