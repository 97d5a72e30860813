"""Bounds on sizes: architecture counts in a config.json and the sizes the CLI and the API take.

A number far beyond any real model or run is a typo or a hostile file, and the work of an answer grows with it
(a billion layers took minutes before any check). Each bound is the next power of two at or above ten times the
largest value in published use, so no real input comes near it; the message names the bound and why.
"""

from __future__ import annotations

import math

from moeplan.base.errors import MoeplanError

HEADROOM_FACTOR = 10  # a bound is at least this many times the largest published value


def bound_of(largest: int) -> int:
    """The next power of two at or above HEADROOM_FACTOR x ``largest``."""
    return 1 << math.ceil(math.log2(HEADROOM_FACTOR * largest))


# config.json key -> (largest published value, the model that has it). Public config.json files / model cards.
_DEEPEST = (126, "Llama 3.1 405B")
_WIDEST = (18432, "Nemotron-4 340B")
_HEADS = (128, "DeepSeek-V3 and Llama 3.1 405B")
_HEAD_DIM = (256, "Gemma 2 and Qwen3-Next")
_EXPERTS = (512, "Qwen3-Next")
ARCH_LARGEST: dict[str, tuple[int, str]] = {
    "num_hidden_layers": _DEEPEST,
    "hidden_size": _WIDEST,
    "intermediate_size": (73728, "Nemotron-4 340B"),
    "moe_intermediate_size": (32768, "Grok-1"),
    "shared_expert_intermediate_size": (20480, "Qwen2-57B-A14B"),
    "vocab_size": (262144, "Gemma 3"),
    "num_attention_heads": _HEADS,
    "num_key_value_heads": _HEADS,
    "linear_num_key_heads": _HEADS,
    "linear_num_value_heads": _HEADS,
    "head_dim": _HEAD_DIM,
    "v_head_dim": _HEAD_DIM,
    "qk_nope_head_dim": _HEAD_DIM,
    "qk_rope_head_dim": _HEAD_DIM,
    "linear_key_head_dim": _HEAD_DIM,
    "linear_value_head_dim": _HEAD_DIM,
    "kv_lora_rank": (512, "DeepSeek-V3"),
    "q_lora_rank": (1536, "DeepSeek-V3"),
    "num_experts": _EXPERTS,
    "n_routed_experts": _EXPERTS,
    "num_local_experts": _EXPERTS,
    "n_shared_experts": (2, "DeepSeek-V2"),
    "num_nextn_predict_layers": (1, "DeepSeek-V3 and GLM-4.5"),
    "mtp_num_hidden_layers": (1, "Qwen3-Next"),
}  # top-k has no bound of its own: the model readers refuse one above the experts (a more precise message)


def arch_bound(key: str) -> int | None:
    """The largest value a config.json's ``key`` may take (None: the key has no bound of its own)."""
    largest = ARCH_LARGEST.get(key)
    return None if largest is None else bound_of(largest[0])


def arch_problem(key: str, value: int) -> str | None:
    """Why ``value`` of ``key`` is refused ('exceeds B: ...'), or None where it is within the bound."""
    bound = arch_bound(key)
    if bound is None or value <= bound:
        return None
    largest, who = ARCH_LARGEST[key]
    return (f"{value} exceeds {bound}: no published model is within {HEADROOM_FACTOR}x of it (the largest, "
            f"{who}, has {largest})")


# run sizes: name -> (bound, why). The API's arguments and the CLI's flags share them.
SEQ_LEN_LARGEST = (10 * 2**20, "Llama 4 Scout's 10M-token context")
GPUS_LARGEST = (100_000, "the largest announced training clusters, about 100K GPUs")
GBS_LARGEST = (15360, "DeepSeek-V3's 15360 sequences")
GBS_TOKENS_LARGEST = (63 * 10**6, "DeepSeek-V3's 63M tokens a batch")
RUN_LARGEST: dict[str, tuple[int, str]] = {
    "seq_len": SEQ_LEN_LARGEST,
    "gbs_tokens": GBS_TOKENS_LARGEST,
    "gpus": GPUS_LARGEST,
    "gbs": GBS_LARGEST,
    "mbs": GBS_LARGEST,
    # a parallel size is at most the GPU count
    **{k: GPUS_LARGEST for k in ("tp", "pp", "vpp", "cp", "ep", "etp", "dp")},
    "mtp_layers": (1, "DeepSeek-V3's MTP depth"),
}
SWEEP_LENGTHS_MAX = 64  # lengths in one sweep: each is a plan search of its own (about a second)
SWEEP_LENGTHS_WHY = "each length is a plan search of its own; sweep them in parts"
TOP_MAX = 100  # plans in one answer: the search fully re-estimates 2 x top layouts, so time grows with it
TOP_WHY = "the search fully re-estimates two layouts per plan listed, so its time grows with --top"


def run_bound(name: str) -> int | None:
    """The largest value the run size ``name`` may take (None: no bound)."""
    if name == "top":
        return TOP_MAX
    largest = RUN_LARGEST.get(name)
    return None if largest is None else bound_of(largest[0])


def run_problem(name: str, value: int) -> str | None:
    """Why ``value`` of the run size ``name`` is refused ('exceeds B: ...'), or None where it is within bound."""
    bound = run_bound(name)
    if bound is None or value <= bound:
        return None
    if name == "top":
        return f"{value} exceeds {TOP_MAX}: {TOP_WHY}"
    largest, who = RUN_LARGEST[name]
    return f"{value} exceeds {bound}: over {HEADROOM_FACTOR}x {who}"


def sweep_lengths_problem(count: int) -> str | None:
    """Why ``count`` lengths are too many for one sweep ('N lengths exceed ...'), or None."""
    if count <= SWEEP_LENGTHS_MAX:
        return None
    return f"{count} lengths exceed {SWEEP_LENGTHS_MAX}: {SWEEP_LENGTHS_WHY}"


def check_run(name: str, value: int) -> int:
    """``value`` within its bound, else a one-line :class:`MoeplanError` naming ``name``."""
    problem = run_problem(name, value)
    if problem:
        raise MoeplanError(f"{name} {problem}")
    return value


def check_gbs_tokens(seq_lens: list[int], gbs_tokens: int, name: str = "--gbs-tokens") -> None:
    """A token budget (``name``, as the user gave it) must hold a whole number of sequences at every length: else
    one MoeplanError that suggests the nearest budgets that do (multiples of the lengths' least common multiple)."""
    longest, step = max(seq_lens), math.lcm(*seq_lens)
    most = run_bound("gbs_tokens")
    if step > most and (gbs_tokens < longest or any(gbs_tokens % s for s in seq_lens)):
        # a common multiple past any real batch (40 odd lengths: 2e22 tokens) is no advice: say none is reasonable
        raise MoeplanError(f"{name} {gbs_tokens:,} does not hold whole sequences at every length, and no budget up to "
                           f"{most:,} tokens does (the lengths' least common multiple is {step:.3g}); sweep lengths "
                           "that divide one another (e.g. 16k,32k,64k) or fewer of them")
    if gbs_tokens < longest:
        raise MoeplanError(f"{name} {gbs_tokens:,} is less than one sequence of {longest:,} tokens; use {step:,} or a "
                           "multiple" + ("" if len(seq_lens) == 1 else " (whole sequences at every length)"))
    bad = [s for s in seq_lens if gbs_tokens % s]
    if not bad:
        return
    lo, hi = max(step, gbs_tokens // step * step), (gbs_tokens // step + 1) * step
    use = " or ".join(dict.fromkeys(f"{n:,}" + (f" (GBS {n // seq_lens[0]})" if len(seq_lens) == 1 else "")
                                    for n in (lo, hi)))
    every = "" if len(seq_lens) == 1 else (f" at every length (multiples of {step:,}, the least common multiple of "
                                           f"{', '.join(f'{s:,}' for s in seq_lens)})")
    raise MoeplanError(f"{name} {gbs_tokens:,} is not a whole number of {bad[0]:,}-token sequences "
                       f"({gbs_tokens / bad[0]:,.2f}); use {use}{every}")


__all__ = ["ARCH_LARGEST", "HEADROOM_FACTOR", "RUN_LARGEST", "TOP_MAX", "arch_bound", "arch_problem", "bound_of",
           "check_gbs_tokens", "check_run", "run_bound", "run_problem", "sweep_lengths_problem"]
