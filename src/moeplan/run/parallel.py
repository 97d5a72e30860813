"""The parallel layout (TP, PP, VPP, CP, EP, ETP, DP; MBS, GBS) and its validity rules.

Megatron-Core's MoE parallel folding (megatron/core/parallel_state.py ``initialize_model_parallel``;
Liu et al., "MoE Parallel Folding", arXiv 2504.14960): attention and dense layers use
``world = TP x CP x PP x DP`` while expert layers use ``world = ETP x EP x EDP x PP``. Both must equal
the GPU count; EP may span the CP and DP groups of the attention layout.

Pipeline stages follow ``pipeline_model_parallel_layout`` (megatron/core/transformer/
pipeline_parallel_layer_layout.py): ``E`` embedding, ``t`` decoder layer, ``m`` MTP module, ``L``
loss, ``|`` between stages, ``x*n`` and ``(...)*n`` repeat. There are PP x VPP stages; stage i lives on
pipeline rank ``i % PP`` as virtual chunk ``i // PP``.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field, replace
from functools import cached_property, lru_cache
from typing import TYPE_CHECKING

from moeplan.base.errors import InvalidLayout, MoeplanError
from moeplan.base.fields import version_key
from moeplan.base.te_release import te_label
from moeplan.models.spec import Attention, GatedDeltaNet, Layer, Mamba2, ModelSpec
from moeplan.run.attention_backend import SINK_CP_COMM_TYPE, TE_WIDE_HEAD_FIX, heads_split, unfused_attention
from moeplan.run.dsa_rules import version_problem as dsa_version_problem
from moeplan.run.hybrid import MAMBA_CP_SINCE
from moeplan.run.hybrid import pipeline_problems as hybrid_pipeline_problems
from moeplan.run.hybrid import tp_cp_problems as mamba_tp_cp_problems

if TYPE_CHECKING:
    from moeplan.hardware.spec import GPUSpec


@dataclass(frozen=True)
class Stage:
    """One virtual pipeline stage: which decoder layers (indices) and extras it holds."""

    layers: tuple[int, ...]
    embedding: bool = False
    mtp: int = 0
    loss: bool = False

    def token(self) -> str:
        return ("E" if self.embedding else "") + "t" * len(self.layers) + "m" * self.mtp + ("L" if self.loss else "")


# Stage weights for the default balanced split, in decoder-layer equivalents. Megatron Bridge's
# ``account_for_embedding_in_pipeline_split`` / ``account_for_loss_in_pipeline_split`` count the
# embedding and the loss as one layer each; DeepSeek-V3 recipes give an MTP module about two layers
# (layout "Et|(tt|)*30mL" for PP8 x VPP4; Bridge perf_recipes/deepseek).
EMBEDDING_LAYER_WEIGHT = 1.0
LOSS_LAYER_WEIGHT = 1.0
MTP_LAYER_WEIGHT = 2.0


def balanced_stages(num_layers: int, mtp: int, n_stages: int) -> tuple[Stage, ...]:
    """Split layers over ``n_stages`` so that each stage's load (layers + embedding/loss/MTP weight)
    is as even as possible (largest-remainder rounding); embedding first, MTP and loss last."""
    if n_stages == 1:
        return (Stage(tuple(range(num_layers)), True, mtp, True),)
    overhead = [0.0] * n_stages
    overhead[0] += EMBEDDING_LAYER_WEIGHT
    overhead[-1] += LOSS_LAYER_WEIGHT + MTP_LAYER_WEIGHT * mtp
    target = (num_layers + sum(overhead)) / n_stages
    want = [max(0.0, target - o) for o in overhead]
    scale = num_layers / sum(want) if sum(want) > 0 else 0.0
    want = [w * scale for w in want]
    counts = [math.floor(w) for w in want]
    order = sorted(range(n_stages), key=lambda i: (-(want[i] - counts[i]), i))
    for i in order[: num_layers - sum(counts)]:
        counts[i] += 1
    return stages_from_counts(counts, mtp)


def stages_from_counts(counts: list[int], mtp: int) -> tuple[Stage, ...]:
    """Consecutive decoder layers per stage; embedding on the first stage, MTP and loss on the last."""
    stages, start, last = [], 0, len(counts) - 1
    for i, c in enumerate(counts):
        stages.append(Stage(tuple(range(start, start + c)), i == 0, mtp if i == last else 0, i == last))
        start += c
    return tuple(stages)


def even_stages(num_layers: int, mtp: int, n_stages: int) -> tuple[Stage, ...] | None:
    """Megatron's default split (no layout string): equal layer counts, or None when uneven."""
    if num_layers % n_stages:
        return None
    return stages_from_counts([num_layers // n_stages] * n_stages, mtp)


_REPEAT_GROUP = re.compile(r"\(([^()]*)\)\*(\d+)")
_REPEAT_CHAR = re.compile(r"([EtmL])\*(\d+)")


def unroll_layout(layout: str, limit: int = 1_000_000) -> str:
    """Expand ``(...)*n`` and ``x*n`` of a layout string (nested groups too); MoeplanError when the
    expansion would exceed ``limit`` characters or other characters appear."""
    text = layout.replace(" ", "").replace(",", "")

    def unroll(m: re.Match[str]) -> str:
        if len(m.group(1)) * int(m.group(2)) > limit:
            raise MoeplanError(f"pipeline layout '{layout[:60]}': repeat count {m.group(2)} is far too large")
        return m.group(1) * int(m.group(2))

    for _ in range(10):  # unroll nested (...)*n
        new = _REPEAT_GROUP.sub(unroll, text)
        if new == text:
            break
        text = new
        if len(text) > limit:
            raise MoeplanError(f"pipeline layout '{layout[:60]}' expands to more than {limit} characters")
    text = _REPEAT_CHAR.sub(unroll, text)
    if not re.fullmatch(r"[EtmL|]*", text):
        raise MoeplanError(f"pipeline layout '{layout[:60]}': only E, t, m, L, |, (..)*n and x*n are allowed")
    return text


@lru_cache(maxsize=1024)
def parse_layout(layout: str, num_layers: int, mtp: int, n_stages: int) -> tuple[Stage, ...]:
    """Parse a Megatron ``pipeline_model_parallel_layout`` string into stages."""
    # generous limit: stops '(t|)*999999999' from exhausting memory
    text = unroll_layout(layout, 64 * (num_layers + mtp + 2 * n_stages + 2))
    parts = text.split("|")
    if parts and parts[-1] == "":
        parts = parts[:-1]
    if len(parts) != n_stages:
        raise MoeplanError(f"pipeline layout '{layout}' has {len(parts)} stages but PP x VPP = {n_stages}")
    stages, start = [], 0
    for p in parts:
        n = p.count("t")
        stages.append(Stage(tuple(range(start, start + n)), "E" in p, p.count("m"), "L" in p))
        start += n
    if start != num_layers:
        raise MoeplanError(f"pipeline layout '{layout}' places {start} decoder layers; the model has {num_layers}")
    if sum(s.mtp for s in stages) != mtp:
        raise MoeplanError(f"pipeline layout '{layout}' places {sum(s.mtp for s in stages)} MTP modules; the model has {mtp}")
    if not stages[0].embedding or not stages[-1].loss:
        raise MoeplanError(f"pipeline layout '{layout}': E must be in the first stage and L in the last")
    return tuple(stages)


def format_layout(stages: tuple[Stage, ...]) -> str:
    """Compact layout string with run-length groups, e.g. 'Et|(tt|)*30mL'."""
    tokens = [s.token() for s in stages]
    out: list[str] = []
    i = 0
    while i < len(tokens):
        j = i
        while j + 1 < len(tokens) and tokens[j + 1] == tokens[i]:
            j += 1
        run = j - i + 1
        tok = tokens[i]
        short = re.sub(r"t{3,}", lambda m: f"t*{len(m.group(0))}", tok)
        if run >= 2 and i > 0 and j < len(tokens) - 1:
            out.append(f"({short}|)*{run}")
        else:
            out.extend(f"{short}|" for _ in range(run))
        i = j + 1
    text = "".join(out)
    return text[:-1] if text.endswith("|") else text


@dataclass(frozen=True)
class Parallel:
    """A parallel layout on ``gpus`` GPUs. DP and EDP are derived (folding)."""

    gpus: int
    tp: int = 1
    pp: int = 1
    vpp: int = 1
    cp: int = 1
    ep: int = 1
    etp: int = 1
    pipeline_layout: str | None = None

    @property
    def dp(self) -> int:
        return self.gpus // (self.tp * self.cp * self.pp)

    @property
    def edp(self) -> int:
        return self.gpus // (self.etp * self.ep * self.pp)

    @property
    def sequence_parallel(self) -> bool:
        """Megatron Bridge turns sequence parallel on with TP > 1 for MoE (required with EP and TP)."""
        return self.tp > 1

    def as_dict(self) -> dict[str, int]:
        return {"tp": self.tp, "pp": self.pp, "vpp": self.vpp, "cp": self.cp, "ep": self.ep, "etp": self.etp,
                "dp": self.dp, "edp": self.edp}

    def short(self) -> str:
        s = f"TP{self.tp} PP{self.pp}"
        if self.vpp > 1:
            s += f" VPP{self.vpp}"
        s += f" CP{self.cp} EP{self.ep}"
        if self.etp > 1:
            s += f" ETP{self.etp}"
        return s + f" DP{self.dp}"


@dataclass(frozen=True)
class Batch:
    seq_len: int
    gbs: int  # global batch size, sequences
    mbs: int = 1  # micro-batch size, sequences

    def microbatches(self, dp: int) -> int:
        """Gradient-accumulation steps per iteration: GBS / (MBS x DP)."""
        return self.gbs // (self.mbs * dp)


@dataclass(frozen=True)
class LayoutCheck:
    rule: str
    reason: str


# Megatron-Core 0.16 and 0.17 assert "Gated delta net does not support context parallel"; 0.18 lifts it
# (megatron/core/ssm/gated_delta_net.py).
GDN_CP_SINCE = (0, 18)


def check_layout(spec: ModelSpec, par: Parallel, batch: Batch | None = None,
                 mcore_version: str | None = None, gpu: GPUSpec | None = None,
                 te_version: str | None = None) -> list[LayoutCheck]:
    """Every rule the layout breaks, each with a one-line reason (empty list = valid).
    ``mcore_version`` adds the rules of that Megatron-Core release; ``gpu`` those of the attention backend
    Transformer Engine ``te_version`` (None: the recipes' TE) runs on it (moeplan.run.attention_backend).
    The rules come in groups that read only some sizes (mixer_rules: TP, CP; expert_rules: EP, ETP;
    pipeline_rules: PP, VPP and the layout string; sequence_rules: TP, CP and the length), so that a search
    can check each group once per value of the sizes it reads; this function runs them all, in this order."""
    bad: list[LayoutCheck] = []

    def fail(rule: str, reason: str) -> None:
        bad.append(LayoutCheck(rule, reason))

    if min(par.tp, par.pp, par.vpp, par.cp, par.ep, par.etp) < 1:  # (one comparison on the planner's valid path)
        for name in ("tp", "pp", "vpp", "cp", "ep", "etp"):
            if getattr(par, name) < 1:
                fail("positive", f"{name.upper()} must be >= 1, got {getattr(par, name)}")
        return bad
    attn_fold = par.tp * par.cp * par.pp
    if par.gpus % attn_fold:
        fail("attention-folding", f"TP x CP x PP = {par.tp}x{par.cp}x{par.pp} = {attn_fold} does not divide {par.gpus} GPUs "
             "(attention folding needs TP x CP x PP x DP = GPUs)")
    exp_fold = par.etp * par.ep * par.pp
    if spec.moe_layers and par.gpus % exp_fold:
        fail("expert-folding", f"ETP x EP x PP = {par.etp}x{par.ep}x{par.pp} = {exp_fold} does not divide {par.gpus} GPUs "
             "(expert folding needs ETP x EP x EDP x PP = GPUs)")
    bad += mixer_rules(spec, par.tp, par.cp, mcore_version, gpu, te_version)
    bad += expert_rules(spec, par.ep, par.etp)
    bad += pipeline_rules(spec, par.pp, par.vpp, par.pipeline_layout, mcore_version)
    if batch is not None:
        if not batch_positive(batch):
            fail("batch", "sequence length, GBS and MBS must be positive")
            return bad
        bad += sequence_rules(par.tp, par.cp, batch.seq_len)
        dp = par.dp
        if dp >= 1 and not bad and batch.gbs % (batch.mbs * dp):
            fail("gbs", f"GBS {batch.gbs} is not divisible by MBS x DP = {batch.mbs}x{dp} = {batch.mbs * dp}")
        elif dp >= 1 and not bad:
            problem = interleaving_problem(par.pp, par.vpp, batch.microbatches(dp))
            if problem:
                fail("vpp-microbatches", problem)
    return bad


def mixer_rules(spec: ModelSpec, tp: int, cp: int, mcore_version: str | None = None, gpu: GPUSpec | None = None,
                te_version: str | None = None) -> list[LayoutCheck]:
    """check_layout's rules on the token mixers (attention heads, Gated DeltaNet heads, the CP backend)."""
    bad: list[LayoutCheck] = []

    def fail(rule: str, reason: str) -> None:
        bad.append(LayoutCheck(rule, reason))

    for layer in spec.distinct_mixers:
        if isinstance(layer, Attention):
            if layer.num_heads % tp:
                fail("heads-tp", f"{layer.num_heads} attention heads are not divisible by TP {tp}")
            if not layer.is_mla and layer.num_kv_heads % tp:
                fail("query-groups-tp", f"{layer.num_kv_heads} query groups (KV heads) are not divisible by TP {tp}")
            if cp > 1 and gpu is not None and unfused_attention(layer, gpu, te_version):
                # TE get_attention_backend (pytorch/attention/dot_product_attention/utils.py): "Disabling
                # UnfusedDotProductAttention as it does not support context parallelism"; with FlashAttention and
                # FusedAttention already out for the head shape, DotProductAttention raises "No dot product
                # attention backend is available for the provided inputs"
                why = ("attention sinks rule FlashAttention out and TE PR #3056's d = 256 kernel is vanilla-softmax only"
                       if layer.sink_logits else TE_WIDE_HEAD_FIX)
                fail("unfused-attention-cp", f"Transformer Engine {te_label(te_version)} trains head dim {layer.head_dim} "
                     f"attention{' with sinks' if layer.sink_logits else ''} on {gpu.name} (sm{gpu.sm_arch}) only with "
                     f"UnfusedDotProductAttention, which does not support context parallelism (CP {cp}): no "
                     f"attention backend runs; use CP 1 ({why})")
            dsa = dsa_version_problem(layer, _version(mcore_version), mcore_version) if mcore_version else None
            if dsa:  # DeepSeek sparse attention's releases (moeplan.run.dsa_rules)
                fail("dsa-version", dsa)
            if cp > 1 and layer.sink_logits and not heads_split(layer, tp, cp):
                # sinks run under CP only as a2a (attention_backend.sink_cp_comm_ok), whose heads must split over CP
                kv = layer.num_heads if layer.is_mla else layer.num_kv_heads
                fail("sink-attention-cp", f"attention sinks run under context parallelism only with cp_comm_type "
                     f"{SINK_CP_COMM_TYPE} (Transformer Engine FusedAttention), which splits the heads: {layer.num_heads} "
                     f"heads / {kv} KV heads over TP {tp} cannot be divided among CP {cp}; use a CP that divides them")
        elif isinstance(layer, Mamba2):
            if cp > 1 and mcore_version and _version(mcore_version) < MAMBA_CP_SINCE:
                fail("mamba-cp-version", f"Megatron-Core {mcore_version} has no context parallel for Mamba layers "
                     f"(CP {cp}); it needs 0.13 or newer (ssm/mamba_context_parallel.py)")
            for rule, why in mamba_tp_cp_problems(layer, tp, cp):
                fail(rule, why)
        elif isinstance(layer, GatedDeltaNet):
            if layer.num_key_heads % tp or layer.num_value_heads % tp:
                fail("gdn-heads-tp", f"Gated DeltaNet heads ({layer.num_key_heads} key, {layer.num_value_heads} value) "
                     f"are not divisible by TP {tp}")
            elif cp > 1 and mcore_version and _version(mcore_version) < GDN_CP_SINCE:
                fail("gdn-cp-version", f"Megatron-Core {mcore_version} does not support context parallel for Gated "
                     f"DeltaNet (CP {cp}); it needs 0.18 or newer")
            elif (layer.num_key_heads // tp) % cp or (layer.num_value_heads // tp) % cp:
                fail("gdn-heads-cp", f"Gated DeltaNet runs head-parallel inside the CP group: {layer.num_key_heads} key / "
                     f"{layer.num_value_heads} value heads over TP {tp} are not divisible by CP {cp}")
    return bad


def expert_rules(spec: ModelSpec, ep: int, etp: int) -> list[LayoutCheck]:
    """check_layout's rules on the expert layout (EP over the experts, ETP over the expert FFN width)."""
    bad: list[LayoutCheck] = []
    moe = spec.first_moe
    if moe is None and ep > 1:
        bad.append(LayoutCheck("experts-ep", f"EP {ep} needs an MoE model"))
    if moe is not None and moe.num_experts % ep:
        bad.append(LayoutCheck("experts-ep", f"{moe.num_experts} experts are not divisible by EP {ep}"))
    if moe is not None and moe.expert_ffn_hidden % etp:
        bad.append(LayoutCheck("experts-etp", f"expert FFN width {moe.expert_ffn_hidden} is not divisible by ETP {etp}"))
    return bad


def pipeline_rules(spec: ModelSpec, pp: int, vpp: int, pipeline_layout: str | None,
                   mcore_version: str | None = None) -> list[LayoutCheck]:
    """check_layout's rules on the pipeline split (VPP needs PP; the layout string or an even split; a hybrid
    model's pattern split as ``mcore_version`` allows: moeplan.run.hybrid.pipeline_problems)."""
    bad: list[LayoutCheck] = []

    def fail(rule: str, reason: str) -> None:
        bad.append(LayoutCheck(rule, reason))

    if vpp > 1 and pp == 1:
        fail("vpp-needs-pp", f"VPP {vpp} needs PP > 1")
    n_stages = pp * vpp
    n_layers = spec.num_layers
    if pipeline_layout:
        try:
            parse_layout(pipeline_layout, n_layers, spec.mtp_layers, n_stages)
        except MoeplanError as exc:
            fail("pipeline-layout", str(exc))
    elif n_stages > n_layers:
        fail("layers-pp", f"{spec.num_layers} layers cannot fill PP x VPP = {n_stages} stages")
    elif n_layers % n_stages:
        fail("layers-pp", f"{spec.num_layers} decoder layers do not split evenly over PP x VPP = "
             f"{pp}x{vpp} = {n_stages} stages and no pipeline_model_parallel_layout is set")
    if spec.hybrid_pattern and not bad and pp >= 1 and vpp >= 1:
        stages = _pipeline(spec, pp, vpp, pipeline_layout).stages
        for rule, why in hybrid_pipeline_problems(spec, pp, vpp, [len(s.layers) for s in stages],
                                                  [i for i, s in enumerate(stages) if s.mtp],
                                                  _version(mcore_version) if mcore_version else None):
            fail(rule, why)
    return bad


def batch_positive(batch: Batch) -> bool:
    """check_layout's batch rule: sequence length, GBS and MBS positive."""
    return not (batch.seq_len <= 0 or batch.gbs <= 0 or batch.mbs <= 0)


def sequence_rules(tp: int, cp: int, seq_len: int) -> list[LayoutCheck]:
    """check_layout's rules on the sequence split (load-balanced causal CP, sequence parallel)."""
    if cp > 1 and seq_len % (2 * cp * tp):
        return [LayoutCheck("seq-cp", f"seq_len {seq_len} is not divisible by 2 x CP x TP = {2 * cp * tp} "
                            "(load-balanced causal context parallel)")]
    if tp > 1 and seq_len % tp:
        return [LayoutCheck("seq-tp", f"seq_len {seq_len} is not divisible by TP {tp} (sequence parallel)")]
    return []


def warmup_count(pp: int, vpp: int, rank: int, microbatches: int, extra_warmup: bool = False) -> int:
    """Forwards pipeline rank ``rank`` runs before its first backward (megatron/core/pipeline_parallel/
    schedules.py get_pp_rank_microbatches: PP - rank - 1 for 1F1B; (PP - rank - 1) x 2 + (VPP - 1) x PP
    interleaved, one more with EP A2A overlap), at most every forward of the step. The timeline's order
    and the memory estimate's micro-batches in flight (warm-up + 1) both come from it."""
    total = microbatches * vpp
    if pp <= 1:
        return 0
    if vpp == 1:
        return min(pp - rank - 1, total)
    return min((pp - rank - 1) * 2 + (vpp - 1) * pp + (1 if extra_warmup else 0), total)


def interleaving_problem(pp: int, vpp: int, microbatches: int, group: int | None = None) -> str | None:
    """Why Megatron-Core refuses this interleaved 1F1B schedule (None when it runs it).
    megatron/core/pipeline_parallel/schedules.py (forward_backward_pipelining_with_interleaving): the
    micro-batch group size (microbatch_group_size_per_vp_stage, default PP) must lie in [PP, M], and the
    last group must be empty or at least PP long ("Otherwise, it introduces dependency bubbles")."""
    if vpp <= 1 or pp <= 1:
        return None
    g = group or pp
    if g > microbatches or g < pp:
        return (f"the interleaved schedule (VPP {vpp}) needs at least PP = {pp} micro-batches; this run has "
                f"{microbatches} (GBS / (MBS x DP))")
    rest = microbatches % g
    if 0 < rest < pp:
        return (f"the interleaved schedule (VPP {vpp}) needs the micro-batches ({microbatches} = GBS / (MBS x DP)) "
                f"to be a multiple of PP = {pp}; Megatron-Core raises otherwise (the last group of {rest} would "
                "add dependency bubbles)")
    return None


def _version(v: str) -> tuple[int, int]:
    return version_key(v)  # the one version parser


def validate(spec: ModelSpec, par: Parallel, batch: Batch | None = None, mcore_version: str | None = None,
             gpu: GPUSpec | None = None, te_version: str | None = None) -> None:
    """Raise :class:`MoeplanError` naming the first broken rule."""
    bad = check_layout(spec, par, batch, mcore_version, gpu, te_version)
    if bad:
        raise InvalidLayout(f"invalid layout{' ' + par.short() if par.dp else ''}: {bad[0].reason}")


@dataclass(frozen=True, eq=False)
class Pipeline:
    """Stages of a layout and what each pipeline rank holds (compared by identity: a cache key)."""

    stages: tuple[Stage, ...]
    pp: int
    vpp: int
    explicit: bool = field(default=False)  # whether a layout string must be exported

    @cached_property
    def rank_stages(self) -> tuple[tuple[Stage, ...], ...]:
        """Virtual stages held by each pipeline rank (stage i -> rank i % PP)."""
        return tuple(tuple(self.stages[v * self.pp + r] for v in range(self.vpp)) for r in range(self.pp))

    def layout_string(self) -> str:
        return format_layout(self.stages)


def build_pipeline(spec: ModelSpec, par: Parallel) -> Pipeline:
    """Stages from the layout string, else Megatron-Core's default: the decoder layers split evenly
    over PP x VPP stages, MTP modules and the loss on the last stage (check_layout rejects an
    uneven split without a layout string, as Megatron-Core does). One object per split: layouts that
    differ in TP, CP, EP or DP share it, and with it every cache keyed by it."""
    return _pipeline(spec, par.pp, par.vpp, par.pipeline_layout)


@lru_cache(maxsize=4096)
def _pipeline(spec: ModelSpec, pp: int, vpp: int, layout: str | None) -> Pipeline:
    n = pp * vpp
    if layout:
        return Pipeline(parse_layout(layout, spec.num_layers, spec.mtp_layers, n), pp, vpp, True)
    even = even_stages(spec.num_layers, spec.mtp_layers, n)
    if even is None:
        raise MoeplanError(f"{spec.num_layers} layers do not split evenly over PP x VPP = {n} stages; "
                           "give a pipeline layout")
    return Pipeline(even, pp, vpp, False)


@lru_cache(maxsize=4096)
def stage_groups(spec: ModelSpec, stage: Stage) -> tuple[tuple[Layer, int], ...]:
    """The distinct layers of a stage with how many times each occurs (memory and timing cost each kind once)."""
    return tuple(Counter(spec.layers[i] for i in stage.layers).items())


@lru_cache(maxsize=1024)
def balanced_layout(spec: ModelSpec, pp: int, vpp: int) -> str | None:
    """moeplan's balanced layout string where Megatron's default split is uneven or puts MTP on top
    of a full last stage (embedding and loss weigh one layer, an MTP module two); None where the
    default even split is already balanced (no MTP, layers divisible by PP x VPP) or PP x VPP = 1."""
    n = pp * vpp
    if n == 1 or (spec.mtp_layers == 0 and spec.num_layers % n == 0):
        return None
    return format_layout(balanced_stages(spec.num_layers, spec.mtp_layers, n))


def with_balanced_layout(spec: ModelSpec, par: Parallel) -> Parallel:
    """The layout with moeplan's balanced pipeline layout string filled in when none is given."""
    if par.pipeline_layout:
        return par
    layout = balanced_layout(spec, par.pp, par.vpp)
    if layout is None:
        return par
    return replace(par, pipeline_layout=layout)


def replace_parallel(par: Parallel, **changes: int) -> Parallel | None:
    """The layout with some sizes changed, or None if it no longer folds onto the GPUs."""
    new = replace(par, **changes)  # type: ignore[arg-type]
    if par.gpus % (new.tp * new.cp * new.pp) or par.gpus % (new.etp * new.ep * new.pp):
        return None
    return new


def layout_from_split_options(spec: ModelSpec, pp: int, vpp: int, *, account_for_embedding: bool = False,
                              account_for_loss: bool = False, first: int | None = None,
                              last: int | None = None) -> str | None:
    """The layout string of Megatron-Core's uneven-split options (transformer_config.py
    account_for_embedding_in_pipeline_split / account_for_loss_in_pipeline_split: the embedding / loss
    count as one layer in the even split; num_layers_in_first/last_pipeline_stage: the first / last
    pipeline rank holds that many layers, the rest split evenly). None when no option is set.
    Raises MoeplanError when the options do not divide the layers."""
    n = pp * vpp
    if not (account_for_embedding or account_for_loss or first or last) or n == 1:
        return None
    layers = spec.num_layers
    if first or last:
        if vpp > 1:
            raise MoeplanError("num_layers_in_first/last_pipeline_stage with VPP > 1 is not modelled; give a layout")
        a, b = first or 0, last or 0
        middle = pp - (1 if first else 0) - (1 if last else 0)
        rest = layers - a - b
        if middle < 0 or rest < 0 or (middle and rest % middle) or (not middle and rest):
            raise MoeplanError(f"num_layers_in_first/last_pipeline_stage ({a}, {b}) do not split {layers} layers over PP {pp}")
        counts = ([a] if first else []) + [rest // middle if middle else 0] * middle + ([b] if last else [])
    else:
        slots = layers + int(account_for_embedding) + int(account_for_loss)
        if slots % n:
            raise MoeplanError(f"{layers} layers + embedding/loss slots ({slots}) do not split evenly over PP x VPP = {n}")
        per = slots // n
        counts = [per] * n
        counts[0] -= int(account_for_embedding)
        counts[-1] -= int(account_for_loss)
    return format_layout(stages_from_counts(counts, spec.mtp_layers))


def cp_ranks_per_domain(tp: int, cp: int, nvlink_domain: int) -> int:
    """CP ranks that share one NVLink domain (CP is laid out right after TP in rank order)."""
    return max(1, min(cp, nvlink_domain // tp))


def hierarchical_cp_inner(tp: int, cp: int, nvlink_domain: int) -> int:
    """a2a group of hierarchical CP (cp_comm_type a2a+p2p; Megatron hierarchical_context_parallel_sizes
    [inner, cp / inner]): the largest divisor of CP inside one NVLink domain."""
    inner = cp_ranks_per_domain(tp, cp, nvlink_domain)
    while cp % inner:
        inner -= 1
    return inner
