"""Megatron-LM launch scripts read as bash splits them (an exploratory tester's F11 and F8): a bash array on one
line (``ARGS=(--a 1 --b)``, ``ARGS+=(...)``) kept its first flag glued to ``ARGS=(`` and its last to ``)``; a
quoted string of flags (``GPT_ARGS="`` newline ``--num-layers 48 \\`` ... ``"``, Megatron-LM's example style) was
refused ("No closing quotation"); ``export NVTE_GROUPED_LINEAR_USE_FUSED_GROUPED_GEMM=1`` (or ``NAME=1 torchrun``)
was not read. Every flag keeps the line it stands on."""

from __future__ import annotations

import shlex

import pytest

from moeplan import api, checker
from moeplan.cli import main
from moeplan.errors import MoeplanError
from moeplan.megatron import export
from moeplan.megatron.read import parse_run_text, read_run_file
from moeplan.megatron.read.shell import shell_words
from moeplan.te_release import GROUPED_TENSOR_ENV

MODEL = "qwen3-30b-a3b"
QWEN_ARCH = ("--num-layers 48 --hidden-size 2048 --num-attention-heads 32 --num-experts 128 --moe-router-topk 8 "
             "--moe-ffn-hidden-size 768")
RUN = "--global-batch-size 1024 --micro-batch-size 1 --seq-length 4096 --expert-model-parallel-size 8"


def _write(tmp_path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


# ---- F11: arrays and string variables of flags


def test_a_one_line_array_keeps_its_first_and_last_flag():
    run = parse_run_text(f"ARGS=(--tensor-model-parallel-size 2 {QWEN_ARCH} {RUN} --bf16)\n"
                         "torchrun pretrain_gpt.py ${ARGS[@]}\n", "f.sh")
    assert run.kind == "megatron-lm"
    assert run.settings["tensor_model_parallel_size"] == 2 and run.lines["tensor_model_parallel_size"] == 1
    assert run.unknown == []
    assert ("--bf16", 1) in run.ignored


def test_an_appended_array_keeps_its_first_flag_and_its_last_value():
    run = parse_run_text(f"ARGS=({RUN})\n"
                         "ARGS+=(--recompute-granularity selective --recompute-modules moe_act layernorm)\n"
                         'torchrun pretrain_gpt.py "${ARGS[@]}"\n')
    assert run.settings["recompute_granularity"] == "selective"
    assert run.settings["recompute_modules"] == ["moe_act", "layernorm"]
    assert run.lines["recompute_granularity"] == run.lines["recompute_modules"] == 2
    assert run.unknown == []


def test_a_multi_line_array_with_comments_and_quoted_parens():
    text = ("declare -a MODEL_ARGS=(\n"
            "    --num-layers 61 --multi-latent-attention\n"
            '    --moe-layer-freq "([0]*3+[1]*58)"   # a quoted ) is an item, not the end\n'
            "    # --tensor-model-parallel-size 8\n"
            "    --pipeline-model-parallel-size 16   # PP\n"
            ")\n"
            f"torchrun pretrain_gpt.py ${{MODEL_ARGS[@]}} {RUN}\n")
    run = parse_run_text(text, "ds.sh")
    assert run.architecture["moe_layer_freq"] == "([0]*3+[1]*58)" and run.architecture_lines["moe_layer_freq"] == 3
    assert run.architecture["multi_latent_attention"] is True
    assert "tensor_model_parallel_size" not in run.settings
    assert run.settings["pipeline_model_parallel_size"] == 16 and run.lines["pipeline_model_parallel_size"] == 5
    assert run.lines["seq_length"] == 7 and run.unknown == []


MSTR = ("#!/bin/bash\n"
        "GPUS_PER_NODE=8\n"
        'GPT_ARGS="\n'
        "    --num-layers 48 \\\n"
        "    --hidden-size 2048 \\\n"
        "    --tensor-model-parallel-size 2 \\\n"
        "    --global-batch-size 1024 --micro-batch-size 1 --seq-length 4096 \\\n"
        "    --bf16\n"
        '"\n'
        "torchrun --nproc_per_node $GPUS_PER_NODE pretrain_gpt.py \\\n"
        "    $GPT_ARGS \\\n"
        "    --expert-model-parallel-size 8 --distributed-backend nccl\n")


def test_a_multi_line_string_of_flags_is_read_with_each_flags_line(tmp_path):
    run = read_run_file(_write(tmp_path, "mstr.sh", MSTR))
    assert run.settings == {"tensor_model_parallel_size": 2, "global_batch_size": 1024, "micro_batch_size": 1,
                            "seq_length": 4096, "expert_model_parallel_size": 8}
    assert run.lines["tensor_model_parallel_size"] == 6 and run.lines["seq_length"] == 7
    assert run.lines["expert_model_parallel_size"] == 12
    assert run.architecture_lines == {"num_layers": 4, "hidden_size": 5} and run.unknown == []


def test_a_one_line_string_of_flags_is_read():
    run = parse_run_text(f'ARGS="--tensor-model-parallel-size 2 {RUN}"\ntorchrun pretrain_gpt.py $ARGS\n')
    assert run.settings["tensor_model_parallel_size"] == 2 and run.settings["seq_length"] == 4096
    single = parse_run_text("ARGS='--seq-length 4096'\n")  # a file whose only flag opens a string
    assert single.kind == "megatron-lm" and single.settings == {"seq_length": 4096}


def test_a_flags_value_does_not_run_on_into_the_next_command():
    """An argument-taking architecture flag at the end of a string / array reads as set (True), not as the next
    command's first word."""
    for text in ('ARGS="--seq-length 4096 --multi-latent-attention"\ntorchrun pretrain_gpt.py $ARGS\n',
                 "ARGS=(--seq-length 4096 --multi-latent-attention)\ntorchrun pretrain_gpt.py ${ARGS[@]}\n"):
        assert parse_run_text(text).architecture == {"multi_latent_attention": True}


def test_an_unknown_flag_in_a_string_has_its_own_line():
    run = parse_run_text('GPT_ARGS="\n  --seq-length 4096 \\\n  --tensor-model-paralel-size 2\n"\n', "s.sh")
    assert run.unknown == [("--tensor-model-paralel-size", 3)]


def test_references_and_substitutions_stay_words():
    """``$(...)``, backquotes and ``${...}`` are not run: their words are ignored, flags beside them read."""
    run = parse_run_text('NODES=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | wc -l)\n'
                         "HOST=`hostname`\n"
                         "torchrun --nnodes $NODES --master-addr ${HOST} pretrain_gpt.py --seq-length 4096 2>&1 | "
                         "tee log.txt\n")
    assert run.settings == {"seq_length": 4096} and run.unknown == []


@pytest.mark.parametrize(("text", "line", "words"), [
    ('ARGS="--seq-length 4096\n--tensor-model-parallel-size 2\n', 1, 'no closing quotation (")'),
    ("torchrun pretrain_gpt.py \\\n  --seq-length 4096 --data-path 'a b\n", 2, "no closing quotation (')"),
    ("ARGS=(\n  --seq-length 4096\n", 1, "no closing ')'"),
])
def test_an_unclosed_quote_or_array_names_the_line_it_opens_on(tmp_path, capsys, text, line, words):
    path = _write(tmp_path, "bad.sh", text)
    with pytest.raises(MoeplanError) as info:
        read_run_file(path)
    assert str(info.value).startswith(f"{path}:{line}: ") and words in str(info.value)
    assert main(["check", path, "--model", MODEL, "--gpus", "16"]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_check_of_a_one_line_array_estimates_the_files_layout(tmp_path):
    path = _write(tmp_path, "f.sh", f"ARGS=(--tensor-model-parallel-size 2 {QWEN_ARCH} {RUN} --bf16)\n"
                  "torchrun pretrain_gpt.py ${ARGS[@]}\n")
    result = checker.check(path, gpus=16, gpu="h100")
    assert result.config.parallel.tp == 2 and result.config.model.name == MODEL
    assert [f for f in result.findings if f.rule == "unknown-key"] == []


def test_shell_words_splits_commands_arrays_and_values():
    words = shell_words("export A=1 B='x y'\nARGS=(--a 1\n  --b)\ncmd --c; other --d\n", "w.sh")
    assert words.lists == [[("export", 1)], [("1", 1)], [("x", 1), ("y", 1)], [("--a", 2), ("1", 2), ("--b", 3)],
                           [("cmd", 4), ("--c", 4)], [("other", 4), ("--d", 4)]]
    assert [(a.name, a.value, a.line) for a in words.assignments] == [("A", "1", 1), ("B", "x y", 1)]


# ---- F8: the job environment a launch script sets

ENV_FORMS = [
    f"export {GROUPED_TENSOR_ENV}=1\ntorchrun pretrain_gpt.py {RUN}\n",
    f"{GROUPED_TENSOR_ENV}=1 torchrun pretrain_gpt.py {RUN}\n",
    f"{GROUPED_TENSOR_ENV}=1\ntorchrun pretrain_gpt.py {RUN}\n",
    f"env -i {GROUPED_TENSOR_ENV}=1 torchrun pretrain_gpt.py {RUN}\n",
    f"export CUDA_DEVICE_MAX_CONNECTIONS=1 {GROUPED_TENSOR_ENV}=\"1\"\ntorchrun pretrain_gpt.py {RUN}\n",
]


@pytest.mark.parametrize("text", ENV_FORMS, ids=["export", "prefix", "own-line", "env", "export-several"])
def test_the_grouped_tensor_variable_is_read_from_the_script(text):
    run = parse_run_text(text, "g.sh")
    assert run.env == {GROUPED_TENSOR_ENV: "1"} and run.env_lines == {GROUPED_TENSOR_ENV: 1}
    assert run.settings["seq_length"] == 4096 and run.unknown == []


def test_only_set_variables_moeplan_models_are_kept_and_the_last_wins():
    run = parse_run_text(f"# export {GROUPED_TENSOR_ENV}=1\nexport CUDA_DEVICE_MAX_CONNECTIONS=1\n"
                         f"export {GROUPED_TENSOR_ENV}=1\nexport {GROUPED_TENSOR_ENV}=0\n"
                         f"torchrun pretrain_gpt.py --data-path {GROUPED_TENSOR_ENV}=1 {RUN}\n")
    assert run.env == {GROUPED_TENSOR_ENV: "0"} and run.env_lines == {GROUPED_TENSOR_ENV: 4}
    assert parse_run_text(f"torchrun pretrain_gpt.py {RUN}\n").env == {}


def test_a_value_te_cannot_read_names_its_line(tmp_path):
    path = _write(tmp_path, "g.sh", f"#!/bin/bash\nexport {GROUPED_TENSOR_ENV}=yes\ntorchrun pretrain_gpt.py {RUN}\n")
    with pytest.raises(MoeplanError, match="^" + path + f":2: {GROUPED_TENSOR_ENV}='yes': Transformer Engine reads"):
        read_run_file(path)


def _grouped_run() -> object:
    cfg, _ = api.build_config("deepseek-v3", gpu="b200", gpus=256, seq_len=4096, gbs=2048, pp=16, ep=8,
                              precision="fp8-cs", dispatcher="deepep", cuda_graphs="attn,moe_router,moe_preprocess",
                              te_version="2.18")
    return cfg


# End to end: checker.load_run reads ParsedRun.env as it reads the '# moeplan:' comment's
# NVTE_GROUPED_LINEAR_USE_FUSED_GROUPED_GEMM (checker._from_provenance), the script's own setting first.
def test_check_uses_the_scripts_variable_as_it_uses_the_comments(tmp_path):
    cfg = _grouped_run()
    args = shlex.join(export.to_megatron_lm_args(cfg))
    comment = export.provenance_comment(cfg.with_(te_grouped_tensor=True))
    said = _write(tmp_path, "said.txt", comment + "\n" + args + "\n")
    script = _write(tmp_path, "run.sh", export.provenance_comment(cfg) + f"\nexport {GROUPED_TENSOR_ENV}=1\n"
                    f"torchrun pretrain_gpt.py {args}\n")
    by_comment, by_script = checker.check(said), checker.check(script)
    assert by_script.config.te_grouped_tensor and by_script.estimate.as_dict() == by_comment.estimate.as_dict()
    assert not any(f"set {GROUPED_TENSOR_ENV}=1" in f.message for f in by_script.findings)


def test_scalar_variables_the_script_sets_are_substituted(tmp_path):
    """`TP=2` then `--tensor-model-parallel-size ${TP}` failed with "expected an integer, got '${TP}'"; the
    script's own scalars (and bash's ${NAME:-default}) are read as bash would expand them."""
    script = tmp_path / "run.sh"
    script.write_text("#!/bin/bash\nTP=2\nPP=${PP:-4}\nexport EP=8\n"
                      "torchrun pretrain_gpt.py --tensor-model-parallel-size ${TP} \\\n"
                      "  --pipeline-model-parallel-size $PP --expert-model-parallel-size \"${EP}\" \\\n"
                      "  --context-parallel-size ${CP:-1} --seq-length 4096\n")
    parsed = read_run_file(str(script))
    assert [parsed.settings[k] for k in ("tensor_model_parallel_size", "pipeline_model_parallel_size",
                                         "expert_model_parallel_size", "context_parallel_size")] == [2, 4, 8, 1]
    assert parsed.lines["tensor_model_parallel_size"] == 5


def test_an_unset_variable_is_a_bad_value_with_its_line(tmp_path):
    script = tmp_path / "run.sh"
    script.write_text("torchrun pretrain_gpt.py \\\n  --tensor-model-parallel-size ${TP}\n")
    with pytest.raises(MoeplanError, match=r"run.sh:2: .*\$\{TP\}"):
        read_run_file(str(script))
