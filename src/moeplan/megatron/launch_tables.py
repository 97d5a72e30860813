"""Megatron Bridge's launchers as data: their flag tables and the recipes they launch, read at one commit.

Read from NVIDIA-NeMo/Megatron-Bridge tag v0.6.0 (commit 51885cf132b2814188b6855c25a8588254274c2a):

* ``scripts/training/train.sh`` runs ``scripts/training/setup_experiment.py`` (the Slurm / local head flags,
  ``parse_known_args``), which forwards every other argument to ``scripts/training/run_recipe.py`` (recipe
  selection, convenience flags for common ConfigContainer fields, trailing ``KEY=VALUE`` overrides).
* ``scripts/performance/setup_experiment.py`` parses ``scripts/performance/argument_parser.py``'s flags
  (``parse_known_args``) and forwards the arguments to ``bootstrap.py`` on each rank, whose unknown arguments
  are applied as Hydra overrides (``run_recipe.py`` ``_apply_hydra_overrides``).

Each flag: its option strings and how many values it takes (argparse: ``0`` a switch, ``1`` one value,
``?`` an optional one, ``*`` / ``+`` a list). The recipe table lists the pretraining recipe functions of
``src/megatron/bridge/recipes`` and ``src/megatron/bridge/perf_recipes`` for the catalog's models. Facts only;
no code is taken from the repository.
"""

from __future__ import annotations

LAUNCHER_REPO = "NVIDIA-NeMo/Megatron-Bridge"
LAUNCHER_TAG = "v0.6.0"
LAUNCHER_COMMIT = "51885cf132b2814188b6855c25a8588254274c2a"
LAUNCHER_MCORE = "0.19"  # the Megatron-Core release Bridge v0.6 pins (fields._VERSION_TABLE bridge_release)

Flag = tuple[tuple[str, ...], str]  # (option strings, arity)


def _table(text: str) -> tuple[Flag, ...]:
    """Rows 'ARITY -a --long ...' -> flags."""
    rows = []
    for line in text.strip().splitlines():
        arity, *names = line.split()
        rows.append((tuple(names), arity))
    return tuple(rows)


# scripts/training/setup_experiment.py _build_parser (v0.6.0)
TRAIN_LAUNCHER_FLAGS = _table("""
1 --nodes
1 --gpus-per-node --gpus_per_node
1 --account
1 --partition
1 --time
1 --gres
1 --additional-slurm-params --additional_slurm_params
0 --no-gpu-resource-request
1 --container-image
1 --mount
1 --env
1 --srun-arg
1 -lmc --peak-mem-clk --peak_mem_clk
1 --experiment-name
0 --submission-dry-run --dry-run
0 --wait
""")

# scripts/training/run_recipe.py _build_parser (v0.6.0); the forwarded (training) arguments
TRAIN_RECIPE_FLAGS = _table("""
1 --model
1 --recipe
1 --mode
1 --step-func --step_func
1 --dataset
1 -ms --max_steps
1 -gb --global_batch_size
1 -mb --micro_batch_size
1 -sl --seq_length
1 -tp --tensor_model_parallel_size
1 -pp --pipeline_model_parallel_size
1 -cp --context_parallel_size
1 -vp --virtual_pipeline_model_parallel_size
1 -ep --expert_model_parallel_size
1 -etp --expert_tensor_parallel_size
1 --lr
1 --min_lr
1 --warmup_iters
1 --pretrained_checkpoint
1 --save_dir
1 --load_dir
1 --save_interval
0 --dry-run --dry_run
0 --deterministic
0 --dump-env --dump_env
""")

# run_recipe.py COMMON_OVERRIDE_FIELDS: the ConfigContainer field each convenience flag sets (its module doc)
TRAIN_FLAG_FIELDS = {
    "-gb": "train.global_batch_size", "-mb": "train.micro_batch_size", "-sl": "dataset.seq_length",
    "-tp": "model.tensor_model_parallel_size", "-pp": "model.pipeline_model_parallel_size",
    "-cp": "model.context_parallel_size", "-vp": "model.virtual_pipeline_model_parallel_size",
    "-ep": "model.expert_model_parallel_size", "-etp": "model.expert_tensor_parallel_size",
}

# scripts/performance/argument_parser.py parse_cli_args (v0.6.0)
PERF_FLAGS = _table("""
1 --domain
1 -m --model_family_name
1 -mr --model_recipe_name
0 --use_recipes
1 -nh --nemo_home
1 --detach
1 --max_retries
1 -ng --num_gpus
1 --hidden_size
1 --num_layers
1 --num_moe_experts
1 --pipeline_model_parallel_layout
1 --first_k_dense_replace
0 -d --dryrun
1 --task
1 -ms --max_steps
1 -gb --global_batch_size
1 -mb --micro_batch_size
1 -sl --seq_length
1 --distributed_timeout_minutes
1 --lr
1 --min_lr
1 --warmup_iters
1 --pretrained_checkpoint
1 --save_dir
1 --load_dir
1 --save_interval
1 --most_recent_k
1 --data
1 --c4_root
+ --c4_train_shards
* --dataset_paths
1 --dataset_root
1 --index_mapping_dir
1 --dataset_name
0 --packed_sequence
0 --head_only
1 --diffusion_dataset_path
1 --tokenizer_type
1 --tokenizer_model
1 --vocab_size
1 -hf --hf_token
0 --offline
1 -tp --tensor_model_parallel_size
1 -pp --pipeline_model_parallel_size
1 -cp --context_parallel_size
1 -vp --virtual_pipeline_model_parallel_size
1 -ep --expert_model_parallel_size
? -et --expert_tensor_parallel_size
1 -a --account
1 -p --partition
1 -t --time_limit
1 --preempt_time
1 -gn --gpus_per_node
1 -i --container_image
1 -cm --custom_mounts
1 -ce --custom_env_vars
1 -E --env
1 -cs --custom_srun_args
* -cb --custom_bash_cmds
1 --gres
1 --additional_slurm_params
1 --packager
1 --enable_pct_binding
1 --kubeflow_namespace
1 --csp
1 -g --gpu
1 -c --compute_dtype
1 --optimizer_type
1 -vb --enable_vboost
1 -lgc --lock_gpu_freq
1 -lmc --peak_mem_clk
0 -en --enable_nsys
0 --export_nsys_sqlite
1 -pyp --pytorch_profiler
1 --profiling_start_step
1 --profiling_stop_step
1 -mh --record_memory_history
0 --profiling_gpu_metrics
1 --profiling_ranks
1 --nsys_trace
1 --nsys_extra_args
1 --use_tokendrop
1 --use_megatron_fsdp
1 --nccl_ub
1 --cuda_graph_impl
1 --cuda_graph_scope
1 --moe_a2a_overlap
1 -rl --recompute_num_layers
1 -ol --activation_offload_layers
1 --recompute_modules
1 --moe_flex_dispatcher_backend
0 --deterministic
1 -wdk --wandb_key
1 -wdp --wandb_project_name
1 -wde --wandb_entity_name
1 -wdj --wandb_experiment_name
1 -wds --wandb_save_dir
1 -l --log_dir
1 --save_config_filepath
0 --dump_env
1 -cv --config_variant
0 --list_config_variants
""")

# argument_parser.py: the values its validators accept, and the GPUs per node it infers from --gpu
PERF_CUDA_GRAPH_IMPLS = ("none", "local", "transformer_engine")
PERF_CUDA_GRAPH_SCOPES = ("full_iteration", "attn", "mlp", "moe", "moe_router", "moe_preprocess", "mamba")
PERF_DISPATCHER_BACKENDS = ("deepep", "hybridep")
GPUS_PER_NODE = {"h100": 8, "b200": 8, "b300": 8, "gb200": 4, "gb300": 4, "vr200": 4, "r100": 1}

# moeplan precision -> the recipe-name tag and performance --compute_dtype (argument_parser.py choices bf16,
# fp8_cs, fp8_mx, fp8_sc, nvfp4; recipe names ..._bf16_ / _fp8cs_ / _fp8mx_ / _fp8sc_ / _nvfp4_). Delayed
# scaling (fp8-ds) has neither.
PRECISION_TAGS = {"bf16": "bf16", "fp8-cs": "fp8cs", "mxfp8": "fp8mx", "fp8": "fp8sc"}
PERF_COMPUTE_DTYPES = {"bf16": "bf16", "fp8-cs": "fp8_cs", "mxfp8": "fp8_mx", "fp8": "fp8_sc"}

# moeplan model -> (recipe-name stem, performance --model_family_name, --model_recipe_name)
RECIPE_MODELS = {
    "deepseek-v3": ("deepseek_v3", "deepseek", "deepseek_v3"),
    "qwen3-235b-a22b": ("qwen3_235b_a22b", "qwen", "qwen3_235b_a22b"),
    "qwen3-30b-a3b": ("qwen3_30b_a3b", "qwen", "qwen3_30b_a3b"),
    "qwen3-next-80b-a3b": ("qwen3_next_80b_a3b", "qwen", "qwen3_next_80b_a3b"),
}

# Pretraining recipes at the tag: "<stem> <gpu> <precision tag>: GPU counts" for
# <stem>_pretrain_<N>gpu_<gpu>_<tag>_config (the nvfp4 recipes left out: no moeplan precision yet).
_RECIPE_ROWS = """
deepseek_v3 h100 bf16: 64 1024
deepseek_v3 h100 fp8cs: 64 1024
deepseek_v3 h100 fp8sc: 1024
deepseek_v3 b200 bf16: 256
deepseek_v3 b200 fp8cs: 256
deepseek_v3 b200 fp8mx: 256
deepseek_v3 b300 bf16: 256
deepseek_v3 b300 fp8cs: 256
deepseek_v3 b300 fp8mx: 256
deepseek_v3 gb200 bf16: 256
deepseek_v3 gb200 fp8cs: 256
deepseek_v3 gb200 fp8mx: 256
deepseek_v3 gb300 bf16: 256
deepseek_v3 gb300 fp8cs: 256
deepseek_v3 gb300 fp8mx: 256
deepseek_v3 vr200 bf16: 128 256
deepseek_v3 vr200 fp8cs: 128 256
deepseek_v3 vr200 fp8mx: 128 256
qwen3_235b_a22b h100 bf16: 256
qwen3_235b_a22b h100 fp8cs: 256
qwen3_235b_a22b b200 bf16: 64 256
qwen3_235b_a22b b200 fp8cs: 64 256
qwen3_235b_a22b b200 fp8mx: 64 256
qwen3_235b_a22b b300 bf16: 64 256
qwen3_235b_a22b b300 fp8cs: 64 256
qwen3_235b_a22b b300 fp8mx: 64 256
qwen3_235b_a22b gb200 bf16: 64 256
qwen3_235b_a22b gb200 fp8cs: 64 256
qwen3_235b_a22b gb200 fp8mx: 64 256
qwen3_235b_a22b gb300 bf16: 64 256
qwen3_235b_a22b gb300 fp8cs: 64 256
qwen3_235b_a22b gb300 fp8mx: 64 256
qwen3_235b_a22b vr200 bf16: 256
qwen3_235b_a22b vr200 fp8mx: 256
qwen3_30b_a3b h100 bf16: 8 16 64
qwen3_30b_a3b h100 fp8cs: 16 64
qwen3_30b_a3b b200 bf16: 8 64
qwen3_30b_a3b b200 fp8cs: 8 64
qwen3_30b_a3b b200 fp8mx: 8
qwen3_30b_a3b b300 bf16: 8
qwen3_30b_a3b b300 fp8cs: 8
qwen3_30b_a3b b300 fp8mx: 8
qwen3_30b_a3b gb200 bf16: 8 32
qwen3_30b_a3b gb200 fp8cs: 8 32
qwen3_30b_a3b gb200 fp8mx: 8
qwen3_30b_a3b gb300 bf16: 8 32
qwen3_30b_a3b gb300 fp8cs: 8 32
qwen3_30b_a3b gb300 fp8mx: 8
qwen3_30b_a3b vr200 bf16: 8
qwen3_30b_a3b vr200 fp8mx: 8
qwen3_next_80b_a3b h100 bf16: 32 128
qwen3_next_80b_a3b h100 fp8cs: 128
qwen3_next_80b_a3b b200 bf16: 64
qwen3_next_80b_a3b b200 fp8mx: 64
qwen3_next_80b_a3b b300 bf16: 64
qwen3_next_80b_a3b b300 fp8mx: 64
qwen3_next_80b_a3b gb200 bf16: 64
qwen3_next_80b_a3b gb200 fp8mx: 64
qwen3_next_80b_a3b gb300 bf16: 64
qwen3_next_80b_a3b gb300 fp8mx: 64
"""


def _recipes() -> dict[tuple[str, str, str], tuple[int, ...]]:
    out = {}
    for line in _RECIPE_ROWS.strip().splitlines():
        key, counts = line.split(":")
        stem, gpu, tag = key.split()
        out[(stem, gpu, tag)] = tuple(int(n) for n in counts.split())
    return out


RECIPES: dict[tuple[str, str, str], tuple[int, ...]] = _recipes()  # (stem, gpu, tag) -> GPU counts
