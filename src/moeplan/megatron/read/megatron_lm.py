"""Reader of a Megatron-LM argument list (``pretrain_gpt.py`` flags, one or several per line) or launch script (the
arguments of its Python launches, its arrays and string variables of flags, references expanded: :mod:`.shell`; its
environment of :data:`KNOWN_ENV`)."""

from __future__ import annotations

from moeplan.base.fields import DTYPE_FROM_MLM, KNOB_BY_FIELD, KNOBS, Knob
from moeplan.base.te_release import GROUPED_TENSOR_ENV
from moeplan.megatron.read.bridge import ARCHITECTURE_FIELDS, RECOGNISED
from moeplan.megatron.read.collect import Collector, ParsedRun, fail
from moeplan.megatron.read.overrides import parse_override_value
from moeplan.megatron.read.shell import Assignment, Token, shell_words

# The job environment moeplan models (export.env_settings), read from a launch script's `export NAME=V`,
# `NAME=V torchrun ...` or `NAME=V`: Transformer Engine reads each as int(os.getenv(NAME, "0")).
KNOWN_ENV = frozenset({GROUPED_TENSOR_ENV})

# Megatron-LM flags whose name is not --<field> of a recognised field, and launcher options (torchrun).
_MLM_ARCH_FLAGS = {"--num-experts": "num_moe_experts", "--group-query-attention": None, "--swiglu": None,
                   "--disable-bias-linear": None, "--untie-embeddings-and-output-weights": None}
_MLM_RECOGNISED_EXTRA = frozenset((
    "--bf16 --fp16 --use-mcore-models --transformer-impl --attention-backend --lr --min-lr --lr-decay-style "
    "--lr-warmup-iters --lr-warmup-fraction --lr-decay-iters --lr-decay-samples --lr-warmup-samples --train-iters "
    "--train-samples --data-path --split --mock-data --tokenizer-type --tokenizer-model --vocab-file --merge-file "
    "--save --load --save-interval --eval-interval --eval-iters --log-interval --tensorboard-dir --wandb-project "
    "--wandb-exp-name --seed --distributed-backend --distributed-timeout-minutes --overlap-grad-reduce "
    "--overlap-param-gather --clip-grad --weight-decay --adam-beta1 --adam-beta2 --init-method-std "
    "--hidden-dropout --attention-dropout --no-masked-softmax-fusion --no-bias-swiglu-fusion "
    "--no-rope-fusion --no-load-optim --no-load-rng --exit-interval --num-workers --dataloader-type "
    "--log-throughput --timing-log-level --manual-gc --manual-gc-interval --use-flash-attn --no-create-attention-mask-in-dataloader "
    "--recompute-activations --main-grads-dtype --main-params-dtype --moe-aux-loss-coeff --moe-z-loss-coeff "
    "--moe-router-dtype --moe-router-bias-update-rate --moe-router-enable-expert-bias --moe-router-score-function "
    "--moe-router-topk-scaling-factor --moe-router-num-groups --moe-router-group-topk --moe-router-pre-softmax "
    "--moe-router-fusion --moe-shared-expert-overlap --moe-layer-recompute --fp8-param-gather --fp8-amax-history-len "
    "--fp8-amax-compute-algo --fp8-margin --first-last-layers-bf16 --overlap-cpu-optimizer-d2h-h2d "
    "--use-torch-optimizer-for-cpu-offload --tp-comm-overlap --overlap-p2p-communication "
    "--no-overlap-p2p-communication --decoder-first-pipeline-num-layers --decoder-last-pipeline-num-layers "
    "--nproc-per-node --nproc_per_node --nnodes --node-rank --node_rank --master-addr --master_addr "
    "--master-port --master_port --rdzv-backend --rdzv-endpoint --rdzv-id --standalone").split())


def _mlm_flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _mlm_recognised() -> dict[str, str | None]:
    """Recognised-but-unused flag -> architecture field it carries (or None)."""
    out: dict[str, str | None] = {f: None for f in _MLM_RECOGNISED_EXTRA}
    for names in RECOGNISED.values():
        out.update({_mlm_flag(n): None for n in names if n != "_target_"})
    out.update({_mlm_flag(n): n for n in ARCHITECTURE_FIELDS})
    out.update(_MLM_ARCH_FLAGS)
    return out


_MLM_RECOGNISED = _mlm_recognised()
_MLM_KNOBS: dict[str, tuple[Knob, bool]] = {}  # flag -> (knob, value it sets for a bool flag)
for _knob in KNOBS:
    if _knob.architecture:
        continue  # read as an architecture field (ARCHITECTURE_FIELDS, _MLM_ARCH_FLAGS)
    if _knob.mlm:
        _MLM_KNOBS[_knob.mlm] = (_knob, True)
    if _knob.mlm_false:
        _MLM_KNOBS[_knob.mlm_false] = (_knob, False)
# --recompute-activations: Megatron-LM's megatron/training/arguments.py validate_args does
#   if args.recompute_activations: args.recompute_granularity = 'selective'
# after parsing, so it wins over any --recompute-granularity, wherever either stands. A leftover
# --recompute-method then trips validate_args' own "recompute method is not yet supported for selective recomputing
# granularity" assertion (moeplan.megatron.asserts recompute-method-selective), and a leftover --recompute-num-layers
# TransformerConfig.__post_init__'s ValueError "When using recompute_granularity: selective recompute_num_layers must
# be None" (megatron/core/transformer/transformer_config.py, core_v0.16; it accepts a method with selective), which
# `moeplan check` reports as mcore-recompute-num-layers.
_MLM_RECOMPUTE_ACTIVATIONS = "--recompute-activations"
_RECOMPUTE_ACTIVATIONS_WHY = ("Megatron-LM's validate_args sets recompute_granularity='selective' whenever "
                              "--recompute-activations is given")


def known_flags() -> tuple[str, ...]:
    """Every Megatron-LM flag the reader knows."""
    return tuple(sorted({*_MLM_KNOBS, *_MLM_RECOGNISED, _MLM_RECOMPUTE_ACTIVATIONS}))


def _env_value(assignment: Assignment, origin: str) -> str:
    """The value of a known environment variable, refused where Transformer Engine's int() would raise."""
    try:
        int(assignment.value)
    except ValueError:
        raise fail(origin, assignment.line, f"{assignment.name}={assignment.value!r}: Transformer Engine reads an "
                   "integer (0 off, non-zero on)") from None
    return assignment.value.strip()


def _is_flag(token: str) -> bool:
    return token.startswith("--") and len(token) > 2


def _take_values(tokens: list[Token], i: int) -> list[str]:
    """Tokens after position i up to the next --flag."""
    out: list[str] = []
    while i + 1 + len(out) < len(tokens) and not _is_flag(tokens[i + 1 + len(out)][0]):
        out.append(tokens[i + 1 + len(out)][0])
    return out


_MLM_MULTI = ("list", "int_list", "str_or_list", "scope")


def _mlm_value(knob: Knob, flag: str, sets: bool, inline: str | None, following: list[str],
               origin: str, line: int) -> tuple[object, int]:
    """(raw value, tokens consumed after the flag) of a known flag."""
    if knob.kind == "bool":
        if inline is not None:
            raise fail(origin, line, f"{flag} takes no value")
        return sets, 0
    if inline is not None:
        return ([inline] if knob.kind in _MLM_MULTI and knob.kind != "str_or_list" else inline), 0
    if not following:
        raise fail(origin, line, f"{flag} is missing its value")
    if knob.kind in _MLM_MULTI:
        single = knob.kind == "str_or_list" and len(following) == 1
        return (following[0] if single else following), len(following)
    return following[0], 1


def parse_megatron_lm(text: str, origin: str) -> ParsedRun:
    col = Collector(origin, "megatron-lm")
    words = shell_words(text, origin)
    for tokens in words.lists:  # a launch, an array, a variable's value: a flag's values stay in its list
        _read_flags(col, tokens, origin)
    for assignment in words.assignments:
        if assignment.name in KNOWN_ENV:
            col.environment(assignment.name, _env_value(assignment, origin), assignment.line)
    return col.result()


def _read_flags(col: Collector, tokens: list[Token], origin: str) -> None:
    """The flags of one argument list, each with the values that follow it in that list."""
    i = 0
    seen: dict[str, int] = {}  # flag -> line, in this list: argparse keeps the last of a repeated flag
    while i < len(tokens):
        token, line = tokens[i]
        if _is_flag(token):
            name = token.partition("=")[0]
            if name in seen and (name in _MLM_KNOBS or _MLM_RECOGNISED.get(name)):  # a setting moeplan reads
                col.repeated(name, seen[name], line, "Megatron-LM's argparse")
            seen.setdefault(name, line)
        if not _is_flag(token):
            (col.unknown if token.startswith("-") else col.ignored).append((token, line))
            i += 1
            continue
        flag, eq, inline_text = token.partition("=")
        inline = inline_text if eq else None
        following = [] if eq else _take_values(tokens, i)
        if flag in _MLM_KNOBS:
            knob, sets = _MLM_KNOBS[flag]
            raw, used = _mlm_value(knob, flag, sets, inline, following, origin, line)
            if knob.kind == "dtype":
                raw = DTYPE_FROM_MLM.get(str(raw), raw)
            col.knob(flag, knob, 0, raw, line)
            i += 1 + used
            continue
        if flag == _MLM_RECOMPUTE_ACTIVATIONS:
            col.knob(flag, KNOB_BY_FIELD["recompute_granularity"], -1, "selective", line, _RECOMPUTE_ACTIVATIONS_WHY)
        elif flag in _MLM_RECOGNISED:
            arch = _MLM_RECOGNISED[flag]
            if arch is not None:
                value = inline if eq else following[0] if following else None
                col.arch(arch, True if value is None else parse_override_value(value), line)
            col.ignored.append((flag, line))
        else:
            col.unknown.append((flag, line))
        i += 1 + len(following)
