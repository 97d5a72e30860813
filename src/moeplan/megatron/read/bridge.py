"""Megatron Bridge paths (``section.field``): which knob each sets, which sections and fields moeplan
recognises but does not use, and the architecture fields a linter compares with the model. Shared by the
Bridge YAML and the Hydra-overrides readers."""

from __future__ import annotations

from moeplan.base.fields import BRIDGE_RECIPES, DATASET_SEQ, KNOB_BY_FIELD, KNOBS, Knob
from moeplan.megatron.read.collect import Collector

# ConfigContainer sections (src/megatron/bridge/training/config.py, v0.2.0 .. main).
BRIDGE_SECTIONS = frozenset(
    "rng rerun_state_machine train model optimizer ddp scheduler dataset logger tokenizer checkpoint dist ft "
    "straggler nvrx_straggler profiling peft comm_overlap mixed_precision tensor_inspect inprocess_restart "
    "optimizer_config_override_provider validation env_vars".split())
_USED_SECTIONS = frozenset("model train optimizer ddp dataset mixed_precision comm_overlap".split())

# Architecture fields (TransformerConfig / MLATransformerConfig / Bridge model providers): read into
# ParsedRun.architecture so a linter can compare them with the model.
ARCHITECTURE_FIELDS = frozenset(
    "num_layers hidden_size ffn_hidden_size num_attention_heads num_query_groups kv_channels num_moe_experts "
    "moe_router_topk moe_ffn_hidden_size moe_shared_expert_intermediate_size moe_layer_freq vocab_size "
    "multi_latent_attention q_lora_rank kv_lora_rank qk_head_dim qk_pos_emb_head_dim v_head_dim "
    "max_position_embeddings gated_linear_unit add_bias_linear add_qkv_bias qk_layernorm attention_output_gate "
    "experimental_attention_variant linear_attention_freq linear_conv_kernel_dim linear_key_head_dim "
    "linear_value_head_dim linear_num_key_heads linear_num_value_heads moe_shared_expert_gate "
    "share_embeddings_and_output_weights normalization position_embedding_type "
    # not architecture, but read with their values: the linter (CUDA graphs need fixed shapes) and
    # Megatron's uneven pipeline-split options (moeplan.run.parallel.layout_from_split_options)
    "variable_seq_lengths account_for_embedding_in_pipeline_split account_for_loss_in_pipeline_split "
    # layer-wise CPU offloading excludes fine-grained offloading and the paged stash (moeplan.megatron.asserts)
    "cpu_offloading "
    "num_layers_in_first_pipeline_stage num_layers_in_last_pipeline_stage".split())

# Fields moeplan recognises but does not use, by Bridge section (model: TransformerConfig and provider fields;
# train: TrainingConfig; optimizer: OptimizerConfig; ddp: DistributedDataParallelConfig; dataset:
# GPTDatasetConfig; mixed_precision: MixedPrecisionConfig; comm_overlap: CommOverlapConfig).
RECOGNISED: dict[str, frozenset[str]] = {
    "model": frozenset((
        "_target_ hidden_dropout attention_dropout init_method_std layernorm_epsilon bf16 fp16 params_dtype "
        "pipeline_dtype autocast_dtype moe_grouped_gemm moe_permute_fusion moe_router_load_balancing_type "
        "moe_aux_loss_coeff moe_z_loss_coeff moe_router_score_function moe_router_pre_softmax "
        "moe_router_topk_scaling_factor moe_router_num_groups moe_router_group_topk moe_router_enable_expert_bias "
        "moe_router_bias_update_rate moe_router_dtype moe_router_fusion moe_shared_expert_overlap "
        "moe_pad_expert_input_to_capacity moe_token_drop_policy moe_router_force_load_balancing moe_deepep_num_sms "
        "moe_hybridep_num_sms moe_router_padding_for_fp8 moe_router_padding_for_quantization moe_layer_recompute "
        "moe_input_jitter_eps moe_per_layer_logging moe_apply_probs_on_input moe_use_legacy_grouped_gemm "
        "mtp_loss_scaling_factor cross_entropy_loss_fusion "
        "cross_entropy_fusion_impl gradient_accumulation_fusion bias_activation_fusion bias_dropout_fusion "
        "masked_softmax_fusion persist_layer_norm apply_rope_fusion cuda_graph_warmup_steps "
        "cuda_graph_use_single_mempool cuda_graph_retain_backward_graph transformer_layer_spec tp_comm_overlap "
        "deallocate_pipeline_outputs overlap_p2p_comm batch_p2p_comm calculate_per_token_loss "
        "first_last_layers_bf16 fp8_param fp8_margin fp8_amax_history_len "
        "fp8_amax_compute_algo fp8_wgrad fp8_dot_product_attention fp8_multi_head_attention fp8_interval fp4 "
        "fp4_recipe num_layers_at_start_in_bf16 num_layers_at_end_in_bf16 attention_backend "
        "attention_softmax_in_fp32 apply_query_key_layer_scaling rotary_base rotary_percent rope_scaling "
        "rope_scaling_factor seq_len_interpolation_factor rotary_scaling_factor beta_fast beta_slow mscale "
        "mscale_all_dim original_max_position_embeddings rope_type distribute_saved_activations cpu_offloading "
        "cpu_offloading_num_layers cpu_offloading_activations cpu_offloading_weights "
        "cpu_offloading_double_buffering min_offloaded_tensor_size init_model_with_meta_device "
        "use_cpu_initialization perform_initialization make_vocab_size_divisible_by "
        "should_pad_vocab parallel_output fp16_lm_cross_entropy activation_func window_size softmax_type "
        "use_transformer_engine_full_layer_spec "
        "use_transformer_engine_op_fuser generation_config hf_model_id test_mode "
        "tp_comm_overlap_disable_qkv tp_comm_overlap_disable_fc1 wgrad_deferral_limit").split()),
    "train": frozenset((
        "_target_ train_iters train_samples exit_interval exit_duration_in_mins exit_signal_handler "
        "exit_signal_handler_for_dataloader manual_gc manual_gc_interval manual_gc_eval rampup_batch_size "
        "decrease_batch_size_if_needed empty_unused_memory_level check_weight_hash_across_dp_replicas_interval "
        "train_sync_interval eval_iters eval_interval skip_train check_optimizer_step_success").split()),
    "optimizer": frozenset((
        "_target_ lr min_lr weight_decay adam_beta1 adam_beta2 adam_eps sgd_momentum clip_grad bf16 "
        "fp16 params_dtype loss_scale initial_loss_scale min_loss_scale loss_scale_window hysteresis "
        "main_grads_dtype main_params_dtype decoupled_lr decoupled_min_lr overlap_cpu_optimizer_d2h_h2d "
        "use_torch_optimizer_for_cpu_offload pin_cpu_grads pin_cpu_params barrier_with_L1_time timers "
        "log_num_zeros_in_grad config_logger_dir store_param_remainders overlap_param_gather_with_optimizer_step "
        "optimizer_cuda_graph use_megatron_fsdp").split()),
    "ddp": frozenset((
        "_target_ overlap_grad_reduce overlap_param_gather align_param_gather num_distributed_optimizer_instances "
        "check_for_nan_in_grad check_for_large_grads bucket_size pad_buckets_for_high_nccl_busbw "
        "average_in_collective fp8_param_gather use_custom_fsdp "
        "gradient_reduce_div_fusion suggested_communication_unit_size preserve_fp32_weights "
        "keep_fp8_transpose_cache nccl_ub outer_dp_sharding_strategy "
        "disable_symmetric_registration reduce_scatter_with_fp32_accumulation delay_wgrad_compute").split()),
    "dataset": frozenset((
        "_target_ random_seed blend blend_per_split split split_matrix num_dataset_builder_threads path_to_cache "
        "mmap_bin_files mock tokenizer reset_position_ids reset_attention_mask eod_mask_loss "
        "create_attention_mask drop_last_partial_validation_sequence add_extra_token_to_sequence "
        "object_storage_cache_path dataloader_type num_workers data_sharding pin_memory persistent_workers "
        "trust_remote_code skip_getting_attention_mask_from_dataset full_validation").split()),
    "mixed_precision": frozenset((
        "_target_ fp32 fp16 bf16 params_dtype pipeline_dtype autocast_dtype autocast_enabled "
        "first_last_layers_bf16 fp8_margin fp8_amax_history_len fp8_amax_compute_algo fp8_wgrad "
        "fp8_dot_product_attention fp8_multi_head_attention fp8_param fp8_param_gather fp4 fp4_recipe loss_scale "
        "initial_loss_scale min_loss_scale loss_scale_window hysteresis num_layers_at_start_in_bf16 "
        "num_layers_at_end_in_bf16 reuse_grad_buf_for_mxfp8_param_ag").split()),
    "comm_overlap": frozenset((
        "_target_ tp_comm_overlap tp_comm_overlap_cfg tp_comm_bootstrap_backend overlap_p2p_comm batch_p2p_comm "
        "overlap_grad_reduce overlap_param_gather overlap_param_gather_with_optimizer_step align_param_gather "
        "bucket_size defer_embedding_wgrad_compute wgrad_deferral_limit "
        "data_parallel_size").split()),
}

# Bridge path -> (knob, priority): the first export path has priority 0.
_BRIDGE_KNOBS: dict[str, tuple[Knob, int]] = {}
for _knob in KNOBS:
    if _knob.architecture:
        continue  # read as an architecture field (ARCHITECTURE_FIELDS)
    for _i, _path in enumerate((*_knob.bridge, *_knob.bridge_read)):
        if _path != DATASET_SEQ:
            _BRIDGE_KNOBS.setdefault(_path, (_knob, _i))


def known_bridge_paths() -> tuple[str, ...]:
    """Every Bridge path the reader knows (sections, knobs, recognised and architecture fields)."""
    paths = {*_BRIDGE_KNOBS, *BRIDGE_SECTIONS, *(f"model.{n}" for n in ARCHITECTURE_FIELDS)}
    paths |= {f"{sec}.{n}" for sec, names in RECOGNISED.items() for n in names if n != "_target_"}
    return tuple(sorted(paths))


def classify_bridge(col: Collector, path: str, value: object, line: int) -> None:
    """Route one Bridge path (section.field[.sub...]) to a knob, the recognised lists or unknown."""
    hit = _BRIDGE_KNOBS.get(path)
    if hit is not None:
        col.knob(path, hit[0], hit[1], value, line)
        return
    section, _, rest = path.partition(".")
    name = rest.split(".", 1)[0]
    if path == "mixed_precision" and isinstance(value, str) and value.replace("-", "_") in BRIDGE_RECIPES:
        fp8, recipe = BRIDGE_RECIPES[value.replace("-", "_")]
        col.knob("mixed_precision.fp8", KNOB_BY_FIELD["fp8"], 2, fp8, line)
        if recipe is not None:
            col.knob("mixed_precision.fp8_recipe", KNOB_BY_FIELD["fp8_recipe"], 2, recipe, line)
        return
    if section in BRIDGE_SECTIONS and section not in _USED_SECTIONS:
        col.ignored.append((path, line))
    elif section == "model" and name in ARCHITECTURE_FIELDS:
        if name == rest:
            col.arch(name, value, line)
        col.ignored.append((path, line))
    elif section in RECOGNISED and name in RECOGNISED[section]:
        col.ignored.append((path, line))
    else:
        col.unknown.append((path, line))
