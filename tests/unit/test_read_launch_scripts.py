"""Megatron-LM launch scripts read as bash splits them (an exploratory tester's F11 and F8): a bash array on one
line (``ARGS=(--a 1 --b)``, ``ARGS+=(...)``) kept its first flag glued to ``ARGS=(`` and its last to ``)``; a
quoted string of flags (``GPT_ARGS="`` newline ``--num-layers 48 \\`` ... ``"``, Megatron-LM's example style) was
refused ("No closing quotation"); ``export NVTE_GROUPED_LINEAR_USE_FUSED_GROUPED_GEMM=1`` (or ``NAME=1 torchrun``)
was not read. Every flag keeps the line it stands on."""

from __future__ import annotations

import shlex

import pytest

from moeplan import api
from moeplan.lint import checker
from moeplan.cli import main
from moeplan.base.errors import MoeplanError
from moeplan.megatron import export
from moeplan.megatron.read import parse_run_text, read_run_file
from moeplan.megatron.read.shell import shell_words
from moeplan.base.te_release import GROUPED_TENSOR_ENV

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
    words = shell_words("export A=1 B='x y'\nARGS=(--a 1\n  --b)\ncmd --c; python x.py --d; --e\n"
                        'python y.py "${ARGS[@]}" $B\n', "w.sh")
    # A's value is no launch's argument: not a list (review 2 F4)
    assert words.lists == [[("x", 1), ("y", 1)], [("--a", 2), ("1", 2), ("--b", 3)], [("--d", 4)], [("--e", 4)],
                           [("${ARGS[@]}", 5), ("x", 1), ("y", 1)]]
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


# ---- review finding 5: redirections are not flag values

LAUNCH = f"torchrun pretrain_gpt.py {RUN} --recompute-granularity selective --recompute-modules core_attn moe_act"
REDIRECTIONS = ["> out.log", ">> out.log", "2>&1", "&> all.log", "&>> all.log", "< in.txt", "2> err.log",
                ">out.log 2>&1", "2>/dev/null", "1>&2", ">| out.log", "2> >(tee err.log)", "<<< 'some text'",
                "> out.log 2>&1 | tee -a log.txt", "2>&1 | tee log"]


@pytest.mark.parametrize("redirect", REDIRECTIONS)
def test_a_redirection_and_its_target_are_dropped(redirect):
    """``--recompute-modules core_attn moe_act > out.log 2>&1`` aborted check ("recompute module(s) >, out.log,
    2> unknown"): the operator and the word it redirects to are not the flag's values."""
    run = parse_run_text(f"{LAUNCH} {redirect}\n", "r.sh")
    assert run.settings == parse_run_text(f"{LAUNCH}\n", "r.sh").settings
    assert run.settings["recompute_modules"] == ["core_attn", "moe_act"] and run.unknown == []


@pytest.mark.parametrize("redirect", ["> out.log 2>&1", "2>&1 | tee log", "&> log", "<in"])
def test_a_redirection_after_a_bool_or_scope_flag_is_dropped(redirect):
    run = parse_run_text(f"torchrun pretrain_gpt.py {RUN} --cuda-graph-scope attn {redirect}\n"
                         f"torchrun pretrain_gpt.py --bf16 {redirect}\n", "r.sh")
    assert run.settings["cuda_graph_scope"] == parse_run_text("--cuda-graph-scope attn\n").settings["cuda_graph_scope"]
    assert run.unknown == [] and ("--bf16", 2) in run.ignored


def test_a_check_of_a_script_ending_in_a_redirection_has_no_false_error(tmp_path):
    """``--cuda-graph-scope attn 2>&1 | tee log`` gave "cuda_graph_scope: 2> not accepted by Megatron-Core"."""
    path = _write(tmp_path, "run.sh", f"torchrun pretrain_gpt.py --tensor-model-parallel-size 2 {QWEN_ARCH} {RUN} "
                  "--bf16 --cuda-graph-impl transformer_engine --cuda-graph-scope attn 2>&1 | tee log\n")
    result = checker.check(path, gpus=16, gpu="h100")
    assert [f for f in result.findings if f.rule in ("mcore-version", "unknown-key")] == []


def test_a_redirection_glued_to_a_word_ends_it():
    """bash ends a word at an unquoted ``>``: ``--bf16>log`` is the flag and a redirection (``4096>log``, digits
    before it, would redirect file descriptor 4096); a quoted or escaped ``>`` is part of the word."""
    text = "torchrun pretrain_gpt.py --seq-length 4096 --data-path /d>log --bf16>>log\n"
    assert shell_words(text, "w.sh").lists == [[("--seq-length", 1), ("4096", 1), ("--data-path", 1), ("/d", 1),
                                                ("--bf16", 1)]]
    assert parse_run_text(text).settings == {"seq_length": 4096}
    words = shell_words("python x.py --a 'x>y' \"1>2\" a\\>b\n", "w.sh")
    assert words.lists == [[("--a", 1), ("x>y", 1), ("1>2", 1), ("a>b", 1)]]


# ---- review finding 6: heredoc bodies are data

HEREDOCS = [("<<EOF", "EOF"), ("<<-EOF", "\t\tEOF"), ("<<'EOF'", "EOF"), ('<<"EOF"', "EOF"), ("<< EOF", "EOF"),
            ("<<\\EOF", "EOF")]


@pytest.mark.parametrize(("opener", "closer"), HEREDOCS)
def test_a_heredoc_body_is_skipped_and_later_lines_keep_their_numbers(opener, closer):
    """An apostrophe in a heredoc body aborted check ("no closing quotation"); flags and exports in the body are
    the text a command reads, not the launch's."""
    text = (f"cat > hostfile {opener}\n"
            "\tit's a heredoc, with an \"odd quote and (\n"
            "\t--tensor-model-parallel-size 8\n"
            f"\texport {GROUPED_TENSOR_ENV}=1\n"
            f"{closer}\n"
            f"torchrun pretrain_gpt.py --tensor-model-parallel-size 2 {RUN}\n")
    run = parse_run_text(text, "h.sh")
    assert run.settings["tensor_model_parallel_size"] == 2 and run.lines["tensor_model_parallel_size"] == 6
    assert run.env == {} and run.unknown == []


def test_a_heredoc_ends_only_at_its_own_delimiter_line_and_the_command_line_goes_on():
    text = ("python - <<END | tee out.txt\n"
            "EOF\n"
            "  END\n"
            "print('x')\n"
            "END\n"
            "torchrun pretrain_gpt.py --seq-length 4096\n")
    run = parse_run_text(text, "h.sh")
    assert run.settings == {"seq_length": 4096} and run.lines["seq_length"] == 6 and run.unknown == []


def test_a_heredoc_inside_a_command_substitution_is_skipped():
    text = "NOTE=$(cat <<EOF\nit's here\nEOF\n)\ntorchrun pretrain_gpt.py --seq-length 4096\n"
    run = parse_run_text(text, "h.sh")
    assert run.settings == {"seq_length": 4096} and run.lines["seq_length"] == 5


def test_an_unclosed_heredoc_names_the_line_it_opens_on(tmp_path):
    path = _write(tmp_path, "h.sh", "#!/bin/bash\ncat > f <<EOF\nbody\ntorchrun pretrain_gpt.py --seq-length 4096\n")
    with pytest.raises(MoeplanError, match=f"^{path}:2: .*EOF"):
        read_run_file(path)


# ---- review finding 7: variables substituted as bash expands them

def test_a_variable_of_several_words_splits_into_them():
    """``ALL="$A $B"`` and ``ARGS="$ARGS --global-batch-size 256"`` gave "unknown key '--seq-length 4096'"."""
    text = ('A="--seq-length 4096"\nB="--tensor-model-parallel-size 2"\nALL="$A $B"\n'
            'ARGS="--micro-batch-size 1"\nARGS="$ARGS --global-batch-size 256"\n'
            "MODS='core_attn moe_act'\n"
            "torchrun pretrain_gpt.py $ALL $ARGS --recompute-granularity selective --recompute-modules $MODS\n")
    run = parse_run_text(text, "v.sh")
    assert run.unknown == []
    assert run.settings == {"seq_length": 4096, "tensor_model_parallel_size": 2, "micro_batch_size": 1,
                            "global_batch_size": 256, "recompute_granularity": "selective",
                            "recompute_modules": ["core_attn", "moe_act"]}
    assert run.lines["seq_length"] == 1 and run.lines["global_batch_size"] == 5  # where each flag is written


def test_a_value_after_an_equals_sign_is_substituted():
    run = parse_run_text("TP=2\nPP=4\ntorchrun pretrain_gpt.py --tensor-model-parallel-size=$TP "
                         "--pipeline-model-parallel-size=${PP} --context-parallel-size=${CP:-1}\n")
    assert [run.settings[k] for k in ("tensor_model_parallel_size", "pipeline_model_parallel_size",
                                      "context_parallel_size")] == [2, 4, 1]


@pytest.mark.parametrize("written", ["'$TP'", "\\$TP", "'${TP}'", "=\\$TP"])
def test_a_single_quoted_or_escaped_reference_is_not_substituted(tmp_path, written):
    """bash does not expand ``'$TP'``: Megatron would read the text ``$TP`` and refuse it."""
    flag = "--tensor-model-parallel-size" + ("" if written.startswith("=") else " ")
    path = _write(tmp_path, "q.sh", f"TP=2\ntorchrun pretrain_gpt.py \\\n  {flag}{written}\n")
    with pytest.raises(MoeplanError, match=f"^{path}:3: .*expected an integer, got '\\$"):
        read_run_file(path)


def test_an_inline_assignment_sets_the_name_only_for_its_command():
    """``TP=4 cmd`` sets TP in cmd's environment only; ``TP=4`` alone and ``export TP=4`` set it for what follows."""
    text = ("TP=2\nTP=4 echo tp\nPP=8 CP=2\nexport EP=16\n"
            "torchrun pretrain_gpt.py --tensor-model-parallel-size $TP --pipeline-model-parallel-size $PP "
            "--context-parallel-size $CP --expert-model-parallel-size $EP\n")
    run = parse_run_text(text)
    assert [run.settings[k] for k in ("tensor_model_parallel_size", "pipeline_model_parallel_size",
                                      "context_parallel_size", "expert_model_parallel_size")] == [2, 8, 2, 16]


def test_a_variable_set_earlier_on_the_same_line_is_substituted():
    run = parse_run_text("TP=2; torchrun pretrain_gpt.py --tensor-model-parallel-size $TP\n")
    assert run.settings == {"tensor_model_parallel_size": 2}


def test_unquoted_references_split_and_quoted_ones_do_not():
    words = shell_words('A="1  2"\nE=\npython x.py $A "$A" x$A $E "" "$E" \'$A\'\n', "w.sh")
    assert words.lists[-1] == [("1", 1), ("2", 1), ("1  2", 1), ("x1", 3), ("2", 1), ("", 3), ("", 3), ("$A", 3)]
    defaults = shell_words('D=4\npython x.py ${TP:-$D} "${X:-a b}" ${X:-c d} "${Y:-it\'s}" ${D}x\n', "w.sh")
    assert defaults.lists[-1] == [("4", 1), ("a b", 2), ("c", 2), ("d", 2), ("it's", 2), ("4x", 1)]


# ---- review finding 15: flags are read from launches, arrays and values, not from every command

def test_other_commands_dashes_are_not_flags():
    """``set -euo pipefail`` gave "unknown key '-euo'"; ``mkdir -p``, ``tee -a``, ``python -c`` the same."""
    text = ("#!/bin/bash\nset -euo pipefail\nmkdir -p logs --mode 755\n"
            "python -c 'import torch; print(torch.__version__)' --version\n"
            "python3 - --x <<EOF\nprint(1)\nEOF\n"
            f"torchrun --nproc_per_node 8 pretrain_gpt.py {RUN} 2>&1 | tee -a logs/run.log\n"
            "echo --done\n")
    run = parse_run_text(text, "s.sh")
    assert run.unknown == [] and run.settings["seq_length"] == 4096


@pytest.mark.parametrize("launch", [
    "python pretrain_gpt.py", "python3.11 -u pretrain_gpt.py", "/usr/bin/python3 -W ignore pretrain_gpt.py",
    "python -m torch.distributed.run --nproc_per_node 8 pretrain_gpt.py",
    "torchrun --nproc-per-node=8 /opt/megatron/pretrain_gpt.py", "deepspeed --num_gpus 8 pretrain_gpt.py",
    "accelerate launch --num_processes 8 pretrain_gpt.py", "./pretrain_gpt.py",
    "srun --ntasks-per-node=8 --container-image nvcr.io/nvidia/pytorch python pretrain_gpt.py",
    "mpirun -np 8 -x NCCL_DEBUG=INFO python pretrain_gpt.py", "env -u FOO torchrun pretrain_gpt.py",
    "time nohup numactl --interleave=all python pretrain_gpt.py", "$LAUNCHER pretrain_gpt.py",
    'LAUNCH="torchrun --nproc_per_node 8"; $LAUNCH pretrain_gpt.py'])
def test_a_launcher_and_its_options_before_the_script_are_not_megatron_flags(launch):
    run = parse_run_text(f"{launch} {RUN} --bf16\n", "l.sh")
    assert run.unknown == [] and run.settings["expert_model_parallel_size"] == 8


@pytest.mark.parametrize("shell", ['srun bash -c "{}"', "sh -c '{}'", 'bash -lc "{}"', 'srun -N2 bash -ex -c "{}"'])
def test_the_script_of_a_shell_dash_c_is_read(shell):
    """Flags inside ``srun bash -c "python pretrain_gpt.py ..."`` were lost: the quoted string was one word."""
    script = "cd /w && \\\n  python pretrain_gpt.py --seq-length 4096 \\\n  --tensor-model-parallel-size 2 $EXTRA"
    run = parse_run_text("EXTRA=--bf16\n" + shell.format(script) + "\n", "c.sh")
    assert run.settings == {"seq_length": 4096, "tensor_model_parallel_size": 2}
    assert run.lines == {"seq_length": 3, "tensor_model_parallel_size": 4}
    assert run.unknown == [] and ("--bf16", 1) in run.ignored


def test_an_unclosed_quote_in_a_shell_dash_c_script_names_its_line(tmp_path):
    path = _write(tmp_path, "c.sh", "#!/bin/bash\nbash -c \"\n  python pretrain_gpt.py --data-path 'x\n\"\n")
    with pytest.raises(MoeplanError, match=f"^{path}:3: bad argument line: no closing quotation"):
        read_run_file(path)


def test_a_bare_argument_list_is_read_whole():
    """moeplan's own export (`moeplan plan ... --format megatron-lm`): lines of flags, no command."""
    run = parse_run_text(f"# moeplan: model={MODEL} gpu=h100 gpus=16\n{RUN} \\\n  --tensor-model-parallel-size 2\n"
                         "--bf16\n")
    assert run.settings["tensor_model_parallel_size"] == 2 and run.lines["seq_length"] == 2
    assert run.unknown == [] and ("--bf16", 4) in run.ignored
    pasted = parse_run_text("--seq-length 4096 --pipeline-model-parallel-layout Et|(tt|)*2L --global-batch-size 64\n")
    assert pasted.settings["global_batch_size"] == 64  # an unquoted layout's | and ( do not end the list's reading


# ---- review finding 14: the environment's line; finding 20: an array is not a scalar assignment

@pytest.mark.parametrize(("text", "env_line"), [
    (f"export CUDA_DEVICE_MAX_CONNECTIONS=1 \\\n  {GROUPED_TENSOR_ENV}=1\ntorchrun pretrain_gpt.py {RUN}\n", 2),
    (f"cat <<EOF\nit's\nEOF\nexport {GROUPED_TENSOR_ENV}=1\ntorchrun pretrain_gpt.py {RUN}\n", 4),
    (f"#!/bin/bash\n{GROUPED_TENSOR_ENV}=1 srun bash -c \"torchrun pretrain_gpt.py {RUN}\"\n", 2),
    (f"srun bash -c \"\n  export {GROUPED_TENSOR_ENV}=1\n  torchrun pretrain_gpt.py {RUN}\"\n", 2),
    (f"ON=1\nexport {GROUPED_TENSOR_ENV}=$ON\ntorchrun pretrain_gpt.py {RUN}\n", 2),
])
def test_the_environment_keeps_the_line_of_its_assignment(text, env_line):
    run = parse_run_text(text, "e.sh")
    assert run.env == {GROUPED_TENSOR_ENV: "1"} and run.env_lines == {GROUPED_TENSOR_ENV: env_line}


def test_an_inline_variable_of_a_command_that_launches_nothing_is_not_the_jobs():
    run = parse_run_text(f"{GROUPED_TENSOR_ENV}=1 mkdir -p out\ntorchrun pretrain_gpt.py {RUN}\n")
    assert run.env == {} and run.env_lines == {}


def test_an_array_assignment_sets_no_scalar():
    words = shell_words("A=1\ndeclare -a ARGS=(--a 1)\nB= (subshell)\nC+=(--c)\n", "w.sh")
    assert [(a.name, a.value, a.line) for a in words.assignments] == [("A", "1", 1), ("B", "", 3)]
    assert words.lists == [[("1", 1)], [("--a", 2), ("1", 2)], [("--c", 4)]]


@pytest.mark.parametrize("define", ['run() {\n  torchrun pretrain_gpt.py "$@"\n}',
                                    'function run {\n  if true; then { srun python pretrain_gpt.py "$@"; }; fi\n}',
                                    'run ()\n{\n  bash -c "torchrun pretrain_gpt.py $*"\n}'])
def test_a_call_to_a_function_that_launches_is_read(define):
    """A wrapper function (``run() { torchrun pretrain_gpt.py "$@"; }`` then ``run --seq-length 4096``) passes the
    call's words to the launch; a function that launches nothing does not (``log --done``)."""
    run = parse_run_text(f'log() {{ echo "$@"; }}\n{define}\nlog --done\nrun {RUN} --bf16\n', "f.sh")
    assert run.settings["seq_length"] == 4096 and run.unknown == []


def test_the_grouped_tensor_finding_has_the_line_that_sets_the_variable(tmp_path):
    """check reported te-grouped-tensor with no line though ParsedRun.env_lines had it (review 14)."""
    cfg = _grouped_run()
    script = tmp_path / "run.sh"
    script.write_text("#!/bin/bash\nset -e\nexport NVTE_GROUPED_LINEAR_USE_FUSED_GROUPED_GEMM=1\n"
                      "torchrun pretrain_gpt.py " + shlex.join(export.to_megatron_lm_args(cfg)) + "\n")
    found = [f for f in checker.check(str(script), model="deepseek-v3", gpu="b200", gpus=256, te_version="2.14").findings
             if f.rule == "te-grouped-tensor"]  # TE 2.14 has no grouped-tensor path: the variable changes nothing
    assert found and all(f.line == 3 for f in found), [(f.severity, f.line, f.message) for f in found]


# ---- review 2: parameter expansions, arithmetic, comments in $( ), values no launch uses


@pytest.mark.parametrize(("text", "tp"), [
    (": ${TP:=2}\n", 2),  # ':' expands its arguments: ${TP:=2} sets TP
    ("TP=\nX=${TP:=3}\n", 3),  # ':=' also replaces an empty value
    ("TP=\nX=${TP=3}\nTP=${TP:-6}\n", 6),  # '=' keeps an empty value
    ("X=${TP=4}\n", 4),
    ("TP=2\nX=${TP:=4}\n", 2),  # set: kept
    ("TP=${TP:-5}\n", 5),
])
def test_an_assigning_default_sets_the_variable(text, tp):
    run = parse_run_text(text + "torchrun pretrain_gpt.py --seq-length 4096 --tensor-model-parallel-size $TP "
                         "--micro-batch-size 1\n", "a.sh")
    assert run.settings.get("tensor_model_parallel_size") == tp
    assert run.settings["micro_batch_size"] == 1


@pytest.mark.parametrize(("text", "expected"), [
    ("EP=2\nP=${EP:+--expert-model-parallel-size 8}\n", 8),  # set: the word
    ("EP=\nP=${EP+--expert-model-parallel-size 4}\n", 4),  # '+' without ':': set, even empty
    ("EP=\nP=${EP:+--expert-model-parallel-size 8}\n", None),  # ':+' of an empty value: nothing
    ("P=${EP+--expert-model-parallel-size 8}\n", None),  # unset: nothing
])
def test_an_alternative_value_expands_only_where_the_variable_is_set(text, expected):
    run = parse_run_text(text + "torchrun pretrain_gpt.py $P --seq-length 4096\n", "a.sh")
    assert run.settings.get("expert_model_parallel_size") == expected
    assert run.unknown == []


def test_an_error_if_unset_reference_reads_the_value_or_stays_as_written(tmp_path):
    run = parse_run_text("TP=2\ntorchrun pretrain_gpt.py --tensor-model-parallel-size ${TP:?set TP}\n")
    assert run.settings["tensor_model_parallel_size"] == 2
    path = _write(tmp_path, "u.sh", "torchrun pretrain_gpt.py \\\n  --tensor-model-parallel-size ${TP:?set TP}\n")
    with pytest.raises(MoeplanError, match=r"u.sh:2: .*\$\{TP:\?set TP\}"):
        read_run_file(path)


@pytest.mark.parametrize(("text", "gbs"), [
    ("GBS=$((16 * 16))\n", 256),
    ("N=4\nGBS=$(( (N + 4) * 32 / 2 - 2 % 3 ))\n", 126),
    ("N=7\nGBS=\"$(( -N / 2 * -64 + -7 % 2 ))\"\n", 191),  # toward zero, as bash: -7 / 2 = -3, -7 % 2 = -1
    ("TP=2\nPP=4\nGBS=$(( 2048 / (${TP} * $PP) ))\n", 256),
])
def test_integer_arithmetic_is_evaluated(text, gbs):
    run = parse_run_text(text + "torchrun pretrain_gpt.py --global-batch-size $GBS --micro-batch-size $((1))\n")
    assert run.lines["global_batch_size"] == text.count("\n") + 1
    assert run.settings["global_batch_size"] == gbs
    assert run.settings["micro_batch_size"] == 1


@pytest.mark.parametrize("expression", ["$((16 << 2))", "$((UNSET * 2))", "$((8 / 0))", "$((X ? 1 : 2))"])
def test_other_arithmetic_stays_as_written_with_its_line(tmp_path, expression):
    path = _write(tmp_path, "g.sh", f"X=a\nGBS={expression}\ntorchrun pretrain_gpt.py --seq-length 4096 \\\n"
                  "  --global-batch-size $GBS\n")
    with pytest.raises(MoeplanError) as info:
        read_run_file(path)
    assert "g.sh:4: --global-batch-size: expected an integer" in str(info.value) and expression in str(info.value)


def test_a_comment_inside_a_command_substitution_is_skipped():
    run = parse_run_text("NODES=$(\n  # don't use scontrol here (see :)\n  echo 2  # it's \"two\"\n)\n"
                         "HOST=$(hostname)#not-a-comment\n"
                         "torchrun pretrain_gpt.py --seq-length 4096\n", "c.sh")
    assert run.settings == {"seq_length": 4096} and run.lines["seq_length"] == 6


LAUNCHER_VARIABLES = (
    'SRUN_ARGS="--nodes 2 --ntasks-per-node 8 --container-image nvcr.io/x:1 --container-mounts /d:/d"\n'
    'DISTRIBUTED_ARGS="--nproc_per_node 8 --nnodes 2 --rdzv_backend c10d --rdzv_endpoint $HOST:29500 '
    '--rdzv_id 42 --max_restarts 0"\n'
    "LAUNCH=(--monitor_interval 5 --redirects 3)\n")


@pytest.mark.parametrize("launch", [
    "srun $SRUN_ARGS torchrun $DISTRIBUTED_ARGS ${LAUNCH[@]} pretrain_gpt.py $GPT_ARGS\n",
    'srun $SRUN_ARGS bash -c "torchrun $DISTRIBUTED_ARGS pretrain_gpt.py $GPT_ARGS"\n',
    "srun $SRUN_ARGS bash -c 'torchrun $DISTRIBUTED_ARGS pretrain_gpt.py $ALL'\n",
    "run() { torchrun $DISTRIBUTED_ARGS pretrain_gpt.py $ALL; }\nrun\n",
])
def test_variables_no_launch_passes_to_megatron_give_no_unknown_key(launch):
    """The values of variables (and arrays) that only srun or torchrun read are not Megatron-LM's arguments; the
    flags of one a launch uses (directly, or through another variable) are read, with their lines."""
    text = (LAUNCHER_VARIABLES + 'GPT_ARGS="--seq-length 4096 --tensor-model-paralel-size 2"\n'
            'ALL="$GPT_ARGS --micro-batch-size 1"\n' + launch)
    run = parse_run_text(text, "s7.sh")
    assert run.settings["seq_length"] == 4096 and run.lines["seq_length"] == 4
    assert {flag for flag, _ in run.unknown} == {"--tensor-model-paralel-size"}


def test_a_script_without_a_launch_reads_every_value():
    run = parse_run_text('SRUN_ARGS="--nodes 2"\nGPT_ARGS="--seq-length 4096"\n', "v.sh")
    assert run.settings == {"seq_length": 4096} and run.unknown == [("--nodes", 1)]
