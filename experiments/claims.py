"""The README's table: the seeds' claims | scalebench's simulated figure | the difference.

Generated from results/<experiment>/results.csv, never typed: ``scalebench report --claims``
prints it, ``--readme README.md`` rewrites it between the markers
``<!-- claims:begin -->`` and ``<!-- claims:end -->``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from experiments.tables import markdown_table
from sim.errors import ConfigError

BEGIN, END = "<!-- claims:begin -->", "<!-- claims:end -->"


@dataclass(frozen=True, kw_only=True)
class Claim:
    claim: str
    source: str
    experiment: str
    figure: Callable[[pd.DataFrame], tuple[str, float | None]]
    """Results -> (the simulated figure as text, the number compared with ``seed_value``)."""
    seed_value: float | None
    unit: str
    """'pp' (efficiency, percentage points), 'x' (speedup) or 'h' (hours)."""
    explanation: str


def _row(df: pd.DataFrame, **where) -> pd.Series:
    """The mean simulated row matching ``where`` (column -> value); KeyError if none."""
    sel = df[df["source"] == "sim"]
    for column, value in where.items():
        sel = sel[sel[column].astype(str) == str(value)]
    if sel.empty:
        raise KeyError(f"no simulated row with {where}")
    return sel.select_dtypes("number").mean()


def _chainermn_ib(df):
    r = _row(df, world_size=128, inter_link="ib_fdr", collective="hierarchical")
    return f"{100 * r.scaling_efficiency:.0f} % ({r.speedup:.0f}x) at 128 GPUs, IB FDR, hierarchical", 100 * r.scaling_efficiency


def _chainermn_tcp(df):
    h = _row(df, world_size=128, inter_link="tcp_10gbe", collective="hierarchical")
    ring = _row(df, world_size=128, inter_link="tcp_10gbe", collective="ring")
    return (f"{100 * h.scaling_efficiency:.0f} % hierarchical / {100 * ring.scaling_efficiency:.0f} % ring "
            f"at 128 GPUs over 10 GbE TCP"), 100 * h.scaling_efficiency


def _hours_50_vs_10(df, collective, link):
    r10 = _row(df, world_size=10, collective=collective, inter_link=link)
    r50 = _row(df, world_size=50, collective=collective, inter_link=link)
    return 80.0 * r10.throughput_samples_per_s / r50.throughput_samples_per_s


def _inception_hours(df):
    cases = [("ps", "tcp_10gbe"), ("ring", "tcp_10gbe"), ("ring", "ib_fdr")]
    hours = {c: _hours_50_vs_10(df, *c) for c in cases}
    text = "; ".join(f"{h:.0f} h ({c[0]}, {c[1]})" for c, h in hours.items())
    return f"80 h at 10 nodes -> {text} at 50", hours[("ps", "tcp_10gbe")]


def _inception_40x(df):
    ps = _row(df, world_size=50, collective="ps", inter_link="tcp_10gbe")
    ring = _row(df, world_size=50, collective="ring", inter_link="ib_fdr")
    return f"{ps.speedup:.0f}x (ps, 10 GbE); {ring.speedup:.0f}x (ring, IB FDR) at 50 GPUs", ps.speedup


def _largest_at_75(df, model, link):
    sel = df[(df["source"] == "sim") & (df["model"] == model) & (df["inter_link"] == link)]
    ok = sel[sel["scaling_efficiency"] >= 0.75]["world_size"]
    if sel.empty:
        raise KeyError(model)
    return int(ok.max()) if not ok.empty else 0, int(sel["world_size"].max())


def _target_75(df):
    parts = []
    for model in ("resnet50", "vgg16"):
        for link in ("tcp_10gbe", "tcp_25gbe", "ib_edr"):
            n, top = _largest_at_75(df, model, link)
            parts.append(f"{model} {link}: {'all ' + str(top) if n == top else 'up to ' + str(n)}")
    return "GPUs at >= 75 %: " + "; ".join(parts), None


def _ps_vs_ring(df):
    ps = _row(df, world_size=128, case="parameter servers over 10 GbE TCP (TF 2016)")
    ps_ib = _row(df, world_size=128, case="parameter servers over IB EDR")
    ring = _row(df, world_size=128, case="ring allreduce over IB EDR (Horovod-style)")
    return (f"{100 * ps.scaling_efficiency:.0f} % (PS, 10 GbE), {100 * ps_ib.scaling_efficiency:.0f} % (PS, IB EDR) "
            f"vs {100 * ring.scaling_efficiency:.0f} % (ring, IB EDR) at 128 GPUs"), 100 * ps.scaling_efficiency


def _codec_eff(df, link, world, case):
    return 100 * _row(df, world_size=world, inter_link=link, case=case).scaling_efficiency


FP8_AG = "fp8 e4m3 allgather (as the harness)"


def _fp8_loses_from(df, link):
    """The smallest swept world size at which fp8-by-allgather is slower than fp16 allreduce."""
    sim = df[(df["source"] == "sim") & (df["inter_link"] == link)]
    fp8 = sim[sim["case"] == FP8_AG].set_index("world_size")["iteration_time_s"]
    fp16 = sim[sim["case"] == "fp16 allreduce"].set_index("world_size")["iteration_time_s"]
    slower = [n for n in sorted(fp8.index) if n in fp16.index and fp8[n] > fp16[n]]
    return int(slower[0]) if slower else None


def _crossovers(link: str) -> tuple[int | None, int | None]:
    """sim.costs.codecs.crossover_ranks for ResNet-50's 25.6 M gradient elements as one tensor, one
    V100 per node: the ranks from which fp8 by allgather is slower than fp16 / fp32 ring allreduce."""
    from experiments.config import base_catalog
    from sim.cluster import cluster_from_dict
    from sim.codecs import CODECS
    from sim.costs.codecs import crossover_ranks

    catalog = base_catalog()

    def cluster_of(n):
        return cluster_from_dict({"gpus": n, "gpus_per_node": 1, "gpu": "v100", "inter_link": link}, catalog)

    fp8 = (CODECS["fp8_e4m3"], "allgather")
    return tuple(crossover_ranks(25.6e6, cluster_of, catalog.gpu("v100", "gpu"), slow=fp8, fast=(CODECS[c], "allreduce"),
                                 ranks=range(2, 1025)) for c in ("fp16", "fp32"))


def _compression(df):
    n = 64
    tcp = {c: _codec_eff(df, "tcp_10gbe", n, c) for c in ("fp32 (no compression)", "fp16 allreduce", FP8_AG,
                                                         "fp8 e4m3 reduce-scatter + allgather")}
    ib_fp8 = _codec_eff(df, "ib_hdr", 1024, FP8_AG)
    ib_fp16 = _codec_eff(df, "ib_hdr", 1024, "fp16 allreduce")
    text = (f"at {n} GPUs over 10 GbE: fp32 {tcp['fp32 (no compression)']:.0f} %, fp16/bf16 {tcp['fp16 allreduce']:.0f} %, "
            f"fp8 by allgather {tcp[FP8_AG]:.0f} %, fp8 by reduce-scatter {tcp['fp8 e4m3 reduce-scatter + allgather']:.0f} %; "
            f"at 1,024 GPUs over IB HDR fp16 {ib_fp16:.0f} % vs fp8 by allgather {ib_fp8:.0f} %; fp8 by allgather is "
            f"slower than fp16 allreduce from {_fp8_loses_from(df, 'tcp_10gbe')} GPUs (10 GbE) and "
            f"{_fp8_loses_from(df, 'ib_hdr')} (IB HDR), the smallest size swept")
    fp16_n, fp32_n = _crossovers("tcp_10gbe")
    text += (f"; crossover_ranks (one 25.6 M-element tensor, one GPU per node, 10 GbE): fp8 by allgather is slower "
             f"than fp16 allreduce from {fp16_n} ranks and than fp32 allreduce from {fp32_n}")
    return text, None


def _model_parallel(df):
    gpt = df[(df["source"] == "sim") & (df["model"] == "gpt2_xl")]
    best = gpt[gpt["world_size"] == gpt["world_size"].max()].sort_values("throughput_samples_per_s").iloc[-1]
    mlp = _row(df, world_size=gpt["world_size"].max(), model="mlp", case="data parallel")
    fits = ", ".join(sorted(gpt["case"].unique()))
    return (f"GPT-2 XL: of the five layouts only {fits} fits a 16 GB V100 (pure data parallelism does not, with or "
            f"without micro-batches: each layout's memory per rank is in the report); best layout at "
            f"{int(best.world_size)} GPUs: {best.case}, "
            f"{100 * best.scaling_efficiency:.0f} % ({best.throughput_samples_per_s:.0f} sequences/s); "
            f"the seeds' MLP: {100 * mlp.scaling_efficiency:.0f} % data parallel"), None


def _sync_async(df):
    def r(case, cv, slow, fail):
        sel = df[(df["case"] == case) & (df["heterogeneity.jitter_cv"] == cv) & (df["heterogeneity.slow_factor"] == slow)]
        sel = sel[sel["faults.fail_rank"].isna()] if fail is None else sel[sel["faults.fail_rank"] == fail]
        if sel.empty:
            raise KeyError(case)
        return sel.select_dtypes("number").mean()

    s0, a0 = r("synchronous PS", 0.0, 1.0, None), r("asynchronous PS", 0.0, 1.0, None)
    s5, a5 = r("synchronous PS", 0.5, 1.0, None), r("asynchronous PS", 0.5, 1.0, None)
    sl, al = r("synchronous PS", 0.0, 4.0, None), r("asynchronous PS", 0.0, 4.0, None)
    sf, af = r("synchronous PS", 0.0, 1.0, 5), r("asynchronous PS", 0.0, 1.0, 5)
    return (f"16 workers, samples/s sync vs async (async after the staleness penalty): no stragglers "
            f"{s0.samples_per_s:.0f} vs {a0.samples_per_s:.0f} ({a0.effective_samples_per_s:.0f}); jitter CV 0.5 "
            f"{s5.samples_per_s:.0f} vs {a5.samples_per_s:.0f} ({a5.effective_samples_per_s:.0f}); one node 4x slower "
            f"{sl.samples_per_s:.0f} vs {al.samples_per_s:.0f}; a worker lost at 15 s: sync "
            f"{sf.samples_per_s:.0f} ({sf.wall_time_s - s0.wall_time_s:.0f} s longer: restart + rollback) vs async "
            f"{af.samples_per_s:.0f}"), None


CLAIMS: tuple[Claim, ...] = (
    Claim(claim="ChainerMN: ResNet-50 on 128 GPUs (32 nodes x 4 P100), InfiniBand FDR: about 85 % efficiency, 109x",
          source="ChainerMN benchmark (Preferred Networks, 2017), as quoted by the seed",
          experiment="chainermn_128", figure=_chainermn_ib, seed_value=85.0, unit="pp",
          explanation="The simulation calibrates one P100 to a published 219 images/s, prices NCCL's allreduce "
                      "with NCCL's own tuning model and runs ChainerMN 1.0's reduction after the backward pass (no "
                      "overlap, framework chainermn_2017: its gradients gathered and summed through CUDA-aware Open MPI "
                      "and NCCL 1.3), and waits each step for the slowest of the GPUs (sim/costs/stragglers.py). "
                      "The same model predicts ChainerMN's own 2017 measurements on GTX TITAN X (validate --suite "
                      "devset) a few points optimistic; the P100 here computes 219 images/s where the TITAN X "
                      "measured 81.8, so the same communication is a larger share of its step."),
    Claim(claim="MXNet and CNTK on the same 128 GPUs: 40-50 % efficiency",
          source="ChainerMN benchmark (2017), as quoted by the seed",
          experiment="chainermn_128", figure=_chainermn_tcp, seed_value=45.0, unit="pp",
          explanation="Not like for like: those frameworks ran on InfiniBand and lost to software (parameter "
                      "servers, less overlap). The simulated figure shows what a 10 GbE network costs "
                      "ChainerMN 1.0's algorithm (reduction after backward)."),
    Claim(claim="Synchronous data parallel Inception: 10 -> 50 nodes cut training from 80 h to 20 h",
          source="the seeds (Google, 2016)",
          experiment="inception_sync", figure=_inception_hours, seed_value=20.0, unit="h",
          explanation="Time to a fixed number of epochs scales as 1/throughput (same per-GPU batch), so perfect "
                      "scaling gives 16 h and the seed's 20 h is 80 % of it. The seed's network and "
                      "parameter-server layout are not stated; the compared number is 10 parameter-server "
                      "shards over 10 GbE TCP on K80s."),
    Claim(claim="Inception on 50 GPUs: 40x faster than on one",
          source="the seeds",
          experiment="inception_sync", figure=_inception_40x, seed_value=40.0, unit="x",
          explanation="Weak-scaling speedup N x T1/TN; the seed's 40x may count time to accuracy, which "
                      "large-batch effects also move."),
    Claim(claim="The practitioner's target: 4 machines doing the work of 3 (75 % efficiency)",
          source="the seeds",
          experiment="tcp_vs_infiniband", figure=_target_75, seed_value=None, unit="pp",
          explanation="How far each network keeps data parallelism above the target. VGG-16 has 5.4x "
                      "ResNet-50's parameters for 3.8x its FLOPs (1.4x the gradient bytes per unit of compute), "
                      "so where the network is the limit (25 GbE) it drops below the target at fewer GPUs."),
    Claim(claim="Standard distributed TensorFlow (parameter servers) used about half of 128 GPUs; ring "
                "allreduce (Horovod) about 90 %",
          source="Sergeev & Del Balso 2018, Horovod (arXiv:1802.05799), Inception V3 / ResNet-101",
          experiment="ps_vs_allreduce", figure=_ps_vs_ring, seed_value=50.0, unit="pp",
          explanation="Simulated with ResNet-50 and 8 parameter-server shards. The modelled PS has no per-node "
                      "aggregation: all 8 GPUs of a node push and pull full gradients through its one NIC, and "
                      "each shard's NIC carries n flows, so over 10 GbE it is far below the claim; over "
                      "InfiniBand the same PS lands near it. The ring moves 2(n-1)/n of the gradient per GPU "
                      "whatever n is."),
    Claim(claim="Runtimes convert gradients to 32, 16 or 8 bits on the wire to cut communication",
          source="the seeds",
          experiment="compression", figure=_compression, seed_value=None, unit="pp",
          explanation="16 bits halves the ring's bytes and pays wherever the network is the limit (10 GbE); on "
                      "InfiniBand HDR ResNet-50 hides its gradients behind backward anyway. fp8 cannot be summed "
                      "by the collectives, so it is allgathered: (n-1) x S/4 bytes per rank against fp16's "
                      "2(n-1)/n x S/2, worse from n = 5 in bandwidth terms, and 8 GPUs per node already puts "
                      "it past that. Reduce-scatter in fp32 then allgather fp8 shards scales like a ring but moves "
                      "1.25x fp16's bytes."),
    Claim(claim="Models too large for one GPU need model (pipeline or tensor) parallelism; data "
                "parallelism alone does not fit them",
          source="the seeds",
          experiment="model_vs_data_parallel", figure=_model_parallel, seed_value=None, unit="pp",
          explanation="The memory check counts mixed-precision Adam's 16 B per parameter (ZeRO's accounting) and "
                      "the stored activations; layouts over 16 GB are left out with that reason (see the "
                      "experiment's report). Efficiency is against one (hypothetical, unbounded-memory) GPU. The "
                      "MLP's 609 parameters take microseconds to compute, so any distribution is latency."),
    Claim(claim="Synchronous updates optimise better; asynchronous ones do not stall on slow or dead nodes",
          source="the seeds",
          experiment="sync_vs_async", figure=_sync_async, seed_value=None, unit="pp",
          explanation="Without stragglers sync wins, and after the staleness penalty (a stale update counts "
                      "1/staleness, Zhang et al. 2016; 16 workers make it ~15) by far. Jitter and a slow node cost "
                      "sync the slowest worker's time every step, and a failure its restart and rollback; async "
                      "keeps its raw rate. Whether that raw rate wins depends on the penalty: with 1/staleness it "
                      "does not here."),
)


def _difference(claim: Claim, value: float | None) -> str:
    if value is None or claim.seed_value is None:
        return ""
    delta = value - claim.seed_value
    unit = {"pp": " pp", "x": "x", "h": " h"}[claim.unit]
    return f"{delta:+.0f}{unit} vs the claim. "


def claims_rows(results_root: str | Path) -> list[dict[str, str]]:
    rows = []
    for claim in CLAIMS:
        path = Path(results_root) / claim.experiment / "results.csv"
        try:
            text, value = claim.figure(pd.read_csv(path))
        except (OSError, KeyError, IndexError, ValueError) as err:
            text, value = f"not run yet (`scalebench run experiments/{claim.experiment}.yaml`; {type(err).__name__})", None
        rows.append({
            "the seeds' claim": f"{claim.claim} ({claim.source})",
            "scalebench (simulated)": f"{text} [{claim.experiment}]",
            "the difference, explained": _difference(claim, value) + claim.explanation,
        })
    return rows


def claims_markdown(results_root: str | Path) -> str:
    return markdown_table(claims_rows(results_root))


def update_readme(readme: str | Path, table: str) -> None:
    from sim.fileio import atomic_write_text, read_input_text

    text = read_input_text("--readme", readme, what="a readable UTF-8 file")
    if BEGIN not in text or END not in text:
        raise ConfigError("--readme", str(readme), f"a file with the markers {BEGIN} and {END}")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    atomic_write_text(readme, f"{head}{BEGIN}\n{table}{END}{tail}")
