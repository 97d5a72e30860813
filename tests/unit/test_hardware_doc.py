"""The `--hardware FILE.yaml` format has a docs page with an example file, linked from `--help` (issue 11):
the page names every field, its example is the shipped example file, and that file loads and plans."""

from __future__ import annotations

import re
from dataclasses import fields
from pathlib import Path

from moeplan.cli import main
from moeplan.hardware import GPUSpec, load_gpu, load_user_hardware

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "hardware.md"
EXAMPLE = ROOT / "examples" / "hardware_h100_200g.yaml"


def test_doc_names_every_field_and_embeds_the_example():
    text = DOC.read_text()
    table_keys = set(re.findall(r"^\| `([a-z0-9_]+)` \|", text, flags=re.M))
    spec_keys = {f.name for f in fields(GPUSpec)} - {"name", "hardware_file"}  # hardware_file: set by the loader
    assert spec_keys | {"base", "aliases"} == table_keys
    block = re.search(r"```yaml\n(.*?)```", text, flags=re.S)
    assert block and block.group(1).strip() == EXAMPLE.read_text().strip()


def test_example_file_loads_and_plans(capsys):
    gpus = load_user_hardware(EXAMPLE)
    assert set(gpus) == {"h100-200g", "my-accel"}
    h100 = load_gpu("h100")
    slow = gpus["h100-200g"]
    assert slow.scaleout_bw_bytes_per_s == 25e9 and slow.hbm_bytes == h100.hbm_bytes
    # the inherited measured scale-out figure keeps its efficiency
    assert slow.scaleout_busbw_bytes_per_s / slow.scaleout_bw_bytes_per_s == \
        h100.scaleout_busbw_bytes_per_s / h100.scaleout_bw_bytes_per_s
    assert main(["plan", "qwen3-30b-a3b", "--gpu", "my-accel", "--gpus", "16", "--seq-len", "32k", "--gbs", "16",
                 "--top", "1", "--hardware", str(EXAMPLE), "--json"]) == 0
    capsys.readouterr()


def test_every_hardware_option_links_the_doc(capsys):
    for command in ("hardware", "estimate", "plan", "sweep", "explain", "check", "report", "calibrate"):
        try:
            main([command, "--help"])
        except SystemExit:
            pass
        out = capsys.readouterr().out
        if "--hardware" in out:
            assert "docs/hardware.md" in " ".join(out.split()), command
