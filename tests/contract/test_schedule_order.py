"""Megatron-Core's own pipeline schedule: moeplan's timeline runs every rank's forwards and backwards in
the order megatron.core.pipeline_parallel.schedules builds (get_pp_rank_microbatches, get_schedule_table,
and cuda_graphs.convert_schedule_table_to_order), without a GPU."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from moeplan.engine.timeline import rank_schedule

CASES = [
    # (pp, vpp, microbatches): PP 2-4, VPP 1-3, fewer and more micro-batches than PP
    *[(pp, 1, m) for pp in (2, 3, 4) for m in (1, 2, 3, 5, 8, 12)],
    *[(pp, vpp, m) for pp in (2, 3, 4) for vpp in (2, 3) for m in (pp, 2 * pp, 4 * pp, 7 * pp)],
]


def _mcore():
    schedules = pytest.importorskip("megatron.core.pipeline_parallel.schedules",
                                    reason="schedule check needs megatron-core (the mcore extra)")
    graphs = pytest.importorskip("megatron.core.transformer.cuda_graphs", reason="needs megatron-core")
    return schedules, graphs


def _mcore_order(pp: int, vpp: int, m: int, rank: int, ep_overlap: bool = False) -> list[tuple[int, int]]:
    """(signed chunk, micro-batch) per operation, from Megatron-Core's own schedule helpers: +c+1 is
    the forward of chunk c, -(c+1) its backward (cuda_graphs.convert_schedule_table_to_order)."""
    schedules, graphs = _mcore()
    comm = SimpleNamespace(pp_group=SimpleNamespace(size=lambda: pp, rank=lambda: rank),
                           virtual_pipeline_model_parallel_size=vpp if vpp > 1 else None)
    _, _, warmup, _ = schedules.get_pp_rank_microbatches(m, vpp, pp, overlap_moe_expert_parallel_comm=ep_overlap,
                                                         p2p_communicator=comm)
    table = schedules.get_schedule_table(m, vpp, pp)
    order = graphs.convert_schedule_table_to_order(warmup, vpp, table)
    # micro-batch of each entry: forwards walk the table, backwards walk it again, lagging by the warm-up
    f = b = 0
    out = []
    for c in order:
        if c > 0:
            out.append((c, table[f][0]))
            f += 1
        else:
            out.append((c, table[b][0]))
            b += 1
    return out


@pytest.mark.parametrize(("pp", "vpp", "m"), CASES)
def test_schedule_order_is_megatron_cores(pp, vpp, m):
    for rank in range(pp):
        ours = [(st.chunk + 1 if st.kind == "F" else -(st.chunk + 1), st.microbatch)
                for st in rank_schedule(pp, vpp, m, rank)]
        assert ours == _mcore_order(pp, vpp, m, rank), (pp, vpp, m, rank)


@pytest.mark.parametrize(("pp", "vpp", "m"), [(2, 2, 4), (4, 2, 8), (3, 3, 6)])
def test_schedule_order_with_ep_overlap_extra_warmup(pp, vpp, m):
    for rank in range(pp):
        ours = [(st.chunk + 1 if st.kind == "F" else -(st.chunk + 1), st.microbatch)
                for st in rank_schedule(pp, vpp, m, rank, extra_warmup=True)]
        assert ours == _mcore_order(pp, vpp, m, rank, ep_overlap=True)
