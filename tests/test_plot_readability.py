"""Plots a reader can trust at a glance: equal series stay visible, end labels never collide, powers
of two read as numbers, legends sit off the data and list only what was drawn, PS traffic is
named as such, report tables fit the page."""

from __future__ import annotations

import itertools

import matplotlib
import pytest

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

import experiments.plots as plots  # noqa: E402
from experiments.config import experiment_from_dict  # noqa: E402
from experiments.plot_style import label_ends, log2_axis, marker_sizes, power_of_two_label  # noqa: E402
from experiments.runner import run_experiment  # noqa: E402
from experiments.store import ResultDir  # noqa: E402
from experiments.tables import mean_over_repetitions, with_series  # noqa: E402

# Four series, three of them equal (ib_edr does not care about fp16 vs bf16 vs fp32 at this size).
SWEEP = {"name": "equal", "workload": {"model": "resnet50"},
         "cluster": {"gpus_per_node": 8, "gpu": "v100", "intra_link": "nvlink2"},
         "sweep": {"cluster.gpus": [8, 16, 32, 64], "cluster.inter_link": ["tcp_10gbe", "ib_edr"],
                   "strategy.precision": ["fp32", "fp16"]}}


@pytest.fixture(scope="module")
def result_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("plots") / "equal"
    run_experiment(experiment_from_dict(SWEEP), out, jobs=1, progress=False, log=lambda _: None)
    return out


def _kept_figures(monkeypatch, module):
    """The figures ``module``'s save_figure would save (drawn, not written), closed afterwards."""
    figures = []

    def keep(fig, stem):
        fig.canvas.draw()
        figures.append(fig)
        return []

    monkeypatch.setattr(module, "save_figure", keep)
    yield figures
    for fig in figures:
        plt.close(fig)


@pytest.fixture
def captured(monkeypatch):
    """The figures the plot functions would save (drawn, not written)."""
    yield from _kept_figures(monkeypatch, plots)


def _data(result_dir):
    store = ResultDir(result_dir)
    return mean_over_repetitions(with_series(store.read_csv(), store.meta()))


def _text_boxes(ax, renderer):
    """The end labels' boxes (the leaders are annotations without text)."""
    return [t.get_window_extent(renderer) for t in ax.texts if t.get_text()]


def _overlaps(boxes) -> list[tuple[int, int]]:
    return [(i, j) for (i, a), (j, b) in itertools.combinations(enumerate(boxes), 2) if a.overlaps(b)]


def test_marker_sizes_shrink_in_drawing_order():
    assert marker_sizes(1) == [8.0]
    assert marker_sizes(4) == [10.0, 8.0, 6.0, 4.0]  # each series rings the next one drawn on it
    sizes = marker_sizes(12)
    assert all(a > b for a, b in zip(sizes, sizes[1:], strict=False)) and sizes[-1] == 4.0


def test_powers_of_two_read_as_numbers():
    assert [power_of_two_label(v) for v in (1, 2, 1024, 0.5, 0.125)] == ["1", "2", "1024", "1/2", "1/8"]
    fig, ax = plt.subplots()
    ax.plot([1, 1000], [0.3, 3000])
    log2_axis(ax, "y", 0.3, 3000)
    fig.canvas.draw()
    labels = [t.get_text() for t in ax.get_yticklabels() if t.get_text()]
    plt.close(fig)
    assert labels and all("^" not in lab and "$" not in lab for lab in labels)
    assert "1024" in labels or "2048" in labels


def test_end_labels_never_collide_even_for_equal_values():
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot([1, 10], [0, 100])
    items = [(10, 93.0, f"{93} %", "C0"), (10, 93.0, "93 %", "C1"), (10, 93.2, "93 %", "C2"), (10, 18.0, "18 %", "C3"),
             (10, 19.0, "19 %", "C4"), (10, 99.9, "100 %", "C5")]
    label_ends(ax, items)
    boxes = _text_boxes(ax, fig.canvas.get_renderer())
    assert len(boxes) == len(items) and _overlaps(boxes) == []
    plt.close(fig)


def test_speedup_and_efficiency_plots(result_dir, captured):
    data = _data(result_dir)
    plots.plot_speedup(data, "equal", result_dir / "s")
    plots.plot_efficiency(data, "equal", result_dir / "e")
    for fig in captured:
        ax = fig.axes[0]
        renderer = fig.canvas.get_renderer()
        # equal series: every point at its own GPU count (a sideways offset put points above the
        # ideal line), told apart by marker shape and by size, each smaller than the one before
        lines = [line for line in ax.get_lines() if line.get_marker() not in (None, "None", "")]
        assert len(lines) == 4
        assert all(sorted(float(x) for x in line.get_xdata()) == [8, 16, 32, 64] for line in lines)
        assert len({line.get_marker() for line in lines}) == 4
        sizes = [line.get_markersize() for line in lines]
        assert sizes == sorted(sizes, reverse=True) and len(set(sizes)) == 4
        assert "nested markers" in ax.get_xlabel()
        # end labels: one per series, none overlapping
        boxes = _text_boxes(ax, renderer)
        assert len(boxes) == 4 and _overlaps(boxes) == []
        # the legend below the axes, off the data
        legend = ax.get_legend()
        assert legend.get_window_extent(renderer).y1 <= ax.get_window_extent(renderer).y0
        # the GPU axis ticks at the counts, as numbers
        assert [t.get_text() for t in ax.get_xticklabels()] == ["8", "16", "32", "64"]
    speedup_ticks = [t.get_text() for t in captured[0].axes[0].get_yticklabels() if t.get_text()]
    assert speedup_ticks and all(lab.isdigit() or "/" in lab for lab in speedup_ticks)


def test_breakdown_legend_lists_only_what_was_drawn(result_dir, captured):
    plots.plot_breakdown(_data(result_dir), "equal", result_dir / "b")
    (fig,) = captured
    labels = [t.get_text() for legend in fig.legends for t in legend.get_texts()]
    assert "compute (forward + backward + optimizer)" in labels and "exposed communication" in labels
    assert "pipeline bubble" not in labels and "compression codec" not in labels  # none in this sweep


def test_a_parameter_server_timeline_names_its_traffic(tmp_path, captured):
    exp = experiment_from_dict({**SWEEP, "name": "ps", "strategy": {"collective": "ps"},
                                "sweep": {"cluster.gpus": [16]}})
    run_experiment(exp, tmp_path / "ps", jobs=1, progress=False, log=lambda _: None)
    store = ResultDir(tmp_path / "ps")
    (pid,) = store.finished_ids()
    plots.plot_timeline(store, pid, "ps", tmp_path / "t", None)
    labels = [t.get_text() for t in captured[0].axes[0].get_legend().get_texts()]
    assert "parameter-server push/pull (per bucket)" in labels and "gradient bucket allreduce" not in labels


def test_report_tables_wrap_text_and_keep_numbers_whole(result_dir):
    from experiments.plots import plot_results
    from experiments.report import render_html

    plot_results(result_dir)
    page = render_html(result_dir)
    assert '<div class="table"><table id="points">' in page
    assert "td.text{text-align:left;white-space:normal" in page and "table{border-collapse:collapse;font-size:80%;width:100%}" in page
    assert '<td class="text">' in page  # the series names wrap


def test_no_speedup_point_sits_above_the_ideal_line(result_dir, captured):
    """Efficiency <= 100 % means speedup <= GPUs at every plotted point: the plot must not show a
    point above the ideal line (the offsets did, at 2-4 GPUs over 10 GbE)."""
    data = _data(result_dir)
    plots.plot_speedup(data, "equal", result_dir / "s")
    ax = captured[0].axes[0]
    for line in ax.get_lines():
        if line.get_marker() in (None, "None", ""):
            continue
        for x, y in zip(line.get_xdata(), line.get_ydata(), strict=True):
            assert y <= x * (1 + 1e-9), (line.get_label(), x, y)


@pytest.fixture
def plan_figures(monkeypatch):
    import experiments.plan_report as plan_report

    yield from _kept_figures(monkeypatch, plan_report)


def _plan(**options):
    from sim.planner import plan_request_from_dict, plan_search

    spec = {"workload": {"model": "gpt2_small", "batch_size": 8}, "cluster": {"gpus": 16, "gpus_per_node": 8,
            "gpu": "a100", "intra_link": "nvlink3", "inter_link": "ib_hdr"},
            "plan": {"backends": ["nccl"], "collectives": ["auto"], "codecs": ["none"], "bucket_mib": [25],
                     "schedules": ["1f1b"], **options}}
    return plan_search(plan_request_from_dict(spec))


def _tick_labels_overlap(fig, axis) -> list:
    renderer = fig.canvas.get_renderer()
    boxes = [t.get_window_extent(renderer) for t in axis.get_ticklabels() if t.get_text() and t.get_visible()]
    return _overlaps(boxes)


def _legend_draws_everything(ax):
    """Every legend entry stands for an artist with data on the axes."""
    drawn = {artist.get_label() for artist in [*ax.get_lines(), *ax.collections]
             if (len(getattr(artist, "get_xdata", lambda: [1])()) if hasattr(artist, "get_xdata")
                 else len(artist.get_offsets()))}
    return {t.get_text() for t in ax.get_legend().get_texts()} <= drawn


def test_a_plan_at_one_gpu_count_draws_time_against_memory(plan_figures):
    """One GPU count made the GPU front a vertical strip and GPU-hours proportional to hours:
    that plot says nothing, so it is time against memory per GPU instead."""
    from experiments.plan_report import draw_pareto

    result = _plan()
    draw_pareto(result, None)
    (fig,) = plan_figures
    (ax,) = [a for a in fig.axes if a.get_visible()]
    assert ax.get_xlabel().startswith("memory per GPU (GiB)")
    assert "one GPU count" in ax.get_title()
    assert _legend_draws_everything(ax)
    front = [line for line in ax.get_lines() if line.get_label().startswith("Pareto front")][0]
    xs, ys = list(front.get_xdata()), list(front.get_ydata())
    assert xs == sorted(xs) and ys == sorted(ys, reverse=True)  # more memory buys less time along the front
    labels = [t.get_window_extent(fig.canvas.get_renderer()) for t in ax.texts if t.get_text()]
    assert labels and _overlaps(labels) == []


def test_a_plan_over_gpu_counts_has_readable_ticks_and_two_fronts(plan_figures):
    from experiments.plan_report import draw_pareto

    result = _plan(max_gpus=64)
    draw_pareto(result, None)
    (fig,) = plan_figures
    left, right = fig.axes
    for axis in (left.xaxis, left.yaxis, right.xaxis, right.yaxis):
        assert _tick_labels_overlap(fig, axis) == [], axis
    assert all("^" not in t.get_text() and "times" not in t.get_text() for t in right.xaxis.get_ticklabels())
    assert _legend_draws_everything(left) and _legend_draws_everything(right)
    for ax in (left, right):
        labels = [t.get_window_extent(fig.canvas.get_renderer()) for t in ax.texts if t.get_text()]
        assert _overlaps(labels) == []
