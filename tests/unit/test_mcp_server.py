"""`moeplan mcp` through the MCP SDK's in-process client: every tool listed with its input and output schema,
each called with good and with bad arguments (bad: a tool error carrying moeplan's one-line message), and the
structured results equal to what the CLI prints with --json for the same question."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from ..mcp_support import require_mcp

require_mcp()

import anyio  # noqa: E402  (the MCP SDK's dependency: after the skip where the extra is missing)

from mcp import Client  # noqa: E402

from moeplan.assistant.mcp_server import build_server  # noqa: E402
from moeplan.cli import main  # noqa: E402

from ..conftest import MODELS_DIR  # noqa: E402
from ..log_fixtures import QWEN3_30B_EP16, mlm_log, step_times  # noqa: E402

TOOLS = {"list_models", "list_hardware", "params", "estimate", "plan", "sweep", "explain", "check_config", "export",
         "calibrate"}

# one small question, asked of the tools and of the CLI
Q = dict(model="qwen3-30b-a3b", gpu="h100", gpus=16, seq_len=32768, gbs=64)
Q_ARGS = ["qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--seq-len", "32k", "--gbs", "64"]


def call(name: str, args: dict[str, Any], progress: list | None = None) -> Any:
    """One tool call on a fresh in-process client (the SDK validates structured content against the tool's output
    schema on the client side)."""

    async def run() -> Any:
        async with Client(build_server()) as client:
            await client.list_tools()  # the output schemas the client checks results against
            cb = None
            if progress is not None:
                async def cb(done: float, total: float | None, message: str | None) -> None:
                    progress.append((done, total, message))
            return await client.call_tool(name, args, progress_callback=cb)

    return anyio.run(run)


def ok(name: str, args: dict[str, Any]) -> dict[str, Any]:
    res = call(name, args)
    assert not res.is_error, res.content[0].text
    assert json.loads(res.content[0].text) == res.structured_content  # the same JSON as text for text-only clients
    return res.structured_content


def error(name: str, args: dict[str, Any]) -> str:
    res = call(name, args)
    assert res.is_error and res.structured_content is None
    text = res.content[0].text
    assert "\n" not in text and "Traceback" not in text
    return text


def cli_json(capsys, *argv: str) -> Any:
    main([*argv, "--json"])
    return json.loads(capsys.readouterr().out)


@pytest.fixture(scope="module")
def tools() -> dict[str, Any]:
    async def run() -> Any:
        async with Client(build_server()) as client:
            return (await client.list_tools()).tools

    return {t.name: t for t in anyio.run(run)}


def test_every_tool_is_listed_with_input_and_output_schemas(tools):
    assert set(tools) == TOOLS
    for t in tools.values():
        assert t.description and t.title
        assert t.input_schema["type"] == "object"
        assert t.output_schema["type"] == "object" and t.output_schema["required"]
        assert t.annotations.read_only_hint and not t.annotations.destructive_hint
    plan = tools["plan"].input_schema
    assert set(plan["required"]) == {"model", "gpus", "seq_len", "gbs"} and "ctx" not in plan["properties"]
    assert "mxfp8" in json.dumps(plan["properties"]["precision"])  # vocabularies are enums
    assert tools["check_config"].input_schema["required"] == ["config"]
    assert tools["calibrate"].input_schema["required"] == ["log"]


# ----------------------------------------------------------------------------------- good arguments = CLI --json


def test_listings_equal_the_cli(capsys):
    assert ok("list_models", {}) == {"models": cli_json(capsys, "models")}
    assert ok("list_hardware", {}) == {"gpus": cli_json(capsys, "hardware")}


def test_list_hardware_reads_a_hardware_text(capsys):
    text = Path(__file__).resolve().parents[2].joinpath("examples", "hardware_h100_200g.yaml").read_text()
    names = {g["name"] for g in ok("list_hardware", {"hardware_yaml": text})["gpus"]}
    assert names > {g["name"] for g in cli_json(capsys, "hardware")}


def test_params_of_a_name_and_of_a_config_text_equal_the_cli(capsys, tmp_path, monkeypatch):
    assert ok("params", {"model": "deepseek-v3", "seq_len": 131072}) == cli_json(capsys, "params", "deepseek-v3",
                                                                                 "--seq-len", "128k")
    # a model given as config.json text is read as the same file would be: the answer names the file, not a path
    shutil.copy(MODELS_DIR / "qwen3-30b-a3b.json", tmp_path / "my-moe.json")
    monkeypatch.chdir(tmp_path)
    text = (tmp_path / "my-moe.json").read_text()
    got = ok("params", {"model": text, "model_name": "my-moe"})
    assert got["model"] == "my-moe" and got == cli_json(capsys, "params", "my-moe.json")


def test_estimate_equals_the_cli(capsys):
    args = dict(Q, ep=16, cp=2, recompute="selective:moe_act", dispatcher="deepep")
    got = ok("estimate", args)
    assert got == cli_json(capsys, "estimate", *Q_ARGS, "--ep", "16", "--cp", "2", "--recompute", "selective:moe_act",
                           "--dispatcher", "deepep")
    lo, hi = got["tflops_range"]
    assert lo < got["tflops_per_gpu"] < hi


def test_plan_equals_the_cli_and_reports_progress(capsys):
    progress: list = []
    res = call("plan", dict(Q, top=3), progress)
    assert not res.is_error
    got = res.structured_content
    assert got["plans"] == cli_json(capsys, "plan", *Q_ARGS, "--top", "3")
    assert got["closest"] is None and got["model"] == "qwen3-30b-a3b"
    # progress: counts that only grow, up to the layouts searched
    done = [p[0] for p in progress]
    assert len(progress) >= 3 and done == sorted(done) and progress[-1][0] == progress[-1][1]
    assert progress[-1][1] >= got["layouts_considered"]


def test_plan_with_nothing_fitting_returns_the_closest_run(capsys):
    args = dict(model="deepseek-v3", gpu="h100", gpus=16, seq_len=131072, gbs=16, keep_gbs=True)
    got = ok("plan", args)
    assert got["plans"] == [] == cli_json(capsys, "plan", "deepseek-v3", "--gpu", "h100", "--gpus", "16", "--seq-len",
                                          "128k", "--gbs", "16", "--keep-gbs")
    assert got["closest"]["misses_by_gib"] > 0


def test_export_text_is_what_plan_format_prints(capsys):
    for fmt in ("overrides", "yaml", "megatron-lm"):
        got = ok("export", dict(Q, format=fmt))
        main(["plan", *Q_ARGS, "--format", fmt])
        assert got["text"] == capsys.readouterr().out and got["format"] == fmt
    assert got["text"].startswith("# moeplan: model=qwen3-30b-a3b")


def test_export_launch_commands_are_what_plan_format_prints(capsys):
    """The two Megatron Bridge v0.6 launch formats: the CLI's text, and the version refused as the CLI refuses it."""
    for fmt, program in (("bridge-launch", "scripts/training/train.sh"),
                         ("perf-launch", "scripts/performance/setup_experiment.py")):
        got = ok("export", dict(Q, format=fmt, mcore_version="0.19"))
        main(["plan", *Q_ARGS, "--mcore-version", "0.19", "--format", fmt])
        assert got["text"] == capsys.readouterr().out and got["format"] == fmt
        assert program in got["text"] and "--recipe" in got["text"] if fmt == "bridge-launch" else program in got["text"]
    message = error("export", dict(Q, format="bridge-launch", mcore_version="0.16"))
    assert "Megatron-Core 0.19" in message and "--mcore-version 0.19" in message


def test_sweep_equals_the_cli(capsys):
    got = ok("sweep", dict(model="qwen3-30b-a3b", gpu="h100", gpus=16, seq_lens=[16384, 32768], gbs_tokens=2**21))
    assert got["rows"] == cli_json(capsys, "sweep", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--seq-len",
                                   "16k,32k", "--gbs-tokens", "2m")


def test_check_config_of_a_text_equals_check_of_the_file(capsys, tmp_path):
    exported = ok("export", dict(Q, format="yaml"))["text"]
    path = tmp_path / "run.yaml"
    path.write_text(exported)
    got = ok("check_config", {"config": exported})
    assert got == cli_json(capsys, "check", str(path))
    assert got["model"] == "qwen3-30b-a3b" and got["errors"] == 0  # the export's '# moeplan:' comment read back
    # a config with errors is an answer, not a tool error
    bad = exported.replace("expert_model_parallel_size: ", "expert_model_parallel_size: 7 #")
    got = ok("check_config", {"config": bad})
    assert got["errors"] >= 1 and got["estimate"] is None


def test_explain_equals_the_cli(capsys):
    args = dict(model="qwen3-30b-a3b", gpu="h100", gpus=16, seq_lens=[16384, 32768], gbs_tokens=2**21)
    got = ok("explain", args)
    assert got == cli_json(capsys, "explain", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--seq-len", "16k,32k",
                           "--gbs-tokens", "2m")
    assert got["reasons"][-1]["topic"] == "fix" and got["no_answer"] is None


def test_explain_of_two_config_texts_equals_explain_of_the_files(capsys, tmp_path):
    a = ok("export", dict(Q, seq_len=16384, gbs=128, format="yaml"))["text"]
    b = ok("export", dict(Q, format="yaml"))["text"]
    (tmp_path / "a.yaml").write_text(a)
    (tmp_path / "b.yaml").write_text(b)
    got = ok("explain", {"config_a": a, "config_b": b, "no_fix": True})
    assert got == cli_json(capsys, "explain", str(tmp_path / "a.yaml"), str(tmp_path / "b.yaml"), "--no-fix")
    assert (got["a"]["seq_len"], got["b"]["seq_len"]) == (16384, 32768)
    # one config and run B's length
    got = ok("explain", {"config_a": a, "seq_lens": [32768], "no_fix": True})
    assert got == cli_json(capsys, "explain", str(tmp_path / "a.yaml"), "--seq-len", "32k", "--no-fix")


def test_calibrate_of_a_log_text_equals_the_cli_and_gives_the_profile(capsys, tmp_path, monkeypatch):
    text = mlm_log(QWEN3_30B_EP16, step_times(20.147, 12), tflops_steady=299.352, peak_alloc_gib=62.166,
                   peak_reserved_gib=66.0)
    (tmp_path / "train.log").write_text(text)
    monkeypatch.chdir(tmp_path)
    got = ok("calibrate", {"log": text, "name": "train.log", "gpu": "h100"})
    profile = got.pop("profile_yaml")
    assert got == cli_json(capsys, "calibrate", "train.log", "--gpu", "h100")
    assert got["runs"][0]["log"] == "train.log"
    main(["calibrate", "train.log", "--gpu", "h100", "--out", "profile.yaml"])
    capsys.readouterr()
    assert profile == (tmp_path / "profile.yaml").read_text()
    # the profile given back: the estimate uses its constants, as --calibration does
    est = ok("estimate", dict(Q, seq_len=4096, gbs=1024, ep=16, calibration_yaml=profile))
    assert est["calibration"] == "calibration.yaml"
    assert est != ok("estimate", dict(Q, seq_len=4096, gbs=1024, ep=16)) | {"calibration": "calibration.yaml"}


# ----------------------------------------------------------------------------------- bad arguments


BAD = {
    "list_hardware": ({"hardware_yaml": "gpus: [unclosed"}, "malformed YAML"),
    "params": ({"model": "no-such-model"}, "unknown model 'no-such-model'"),
    "estimate": (dict(Q, tp=3), "TP"),
    "plan": (dict(Q, gpus=0), "gpus"),
    "sweep": (dict(model="qwen3-30b-a3b", gpus=16, seq_lens=[32768], gbs_tokens=1000), "gbs-tokens"),
    "explain": ({"model": "qwen3-30b-a3b", "seq_lens": [32768]}, "two lengths"),
    "check_config": ({"config": "model:\n  tensor_model_parallel_size: [1\n"}, "run.yaml"),
    "export": (dict(Q, format="toml"), "toml"),
    "calibrate": ({"log": "nothing to read here\n", "gpu": "h100"}, "training.log"),
    "list_models": ({"unexpected": 1}, "unknown argument(s) unexpected; it takes no arguments"),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_arguments_are_a_one_line_tool_error(name):
    args, fragment = BAD[name]
    text = error(name, args)
    assert fragment in text, text
    assert "/tmp" not in text and "moeplan-mcp-" not in text  # the call's scratch folder is not named


def test_schema_violations_are_one_line_too():
    text = error("plan", dict(Q, gpus="many", precision="fp4"))
    assert text.startswith("plan: gpus: ") and "precision" in text and "fp4" in text
    text = error("plan", dict(Q, seq_length=4096))  # a misspelt argument is refused, not ignored
    assert text.startswith("plan: unknown argument(s) seq_length; it takes ") and "seq_len" in text


def test_nothing_is_left_on_disk(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)  # re-read TMPDIR
    ok("check_config", {"config": ok("export", dict(Q, format="overrides"))["text"], "name": "run.txt"})
    error("params", {"model": "{not json", "model_name": "broken"})
    assert list(tmp_path.iterdir()) == []
