"""Every plot a person can read: no text drawn over other text, nothing cut off at the image's edge.

The runs are logged into a temporary store with the metrics and op tables real CPU runs of the
runner logged (`+experiment=rmsnorm_comparison`, `+experiment=attention`, a reduced
`+experiment=rmsnorm_shapes` and `+experiment=queue_depth` at tiny sizes), including the cases
that broke the old plots: points at almost the same place, long compiled-graph names in narrow
bar segments, ten runs.
"""

from __future__ import annotations

import io
import itertools
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import mlflow
import pytest
from matplotlib.backend_bases import RendererBase
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle
from matplotlib.text import Text
from matplotlib.transforms import Bbox
from mlflow.entities import Metric, Param, Run

from runner import names
from runner.report import plots
from runner.report.curves import Crossover, size_curves
from runner.report.plots import (
    core_scaling_figure,
    cost_frontier_figure,
    history_figure,
    layer_errors_figure,
    op_breakdown_figure,
    queue_curves,
    queue_depth_figure,
    rank_steps_figure,
    roofline_figure,
    shape_curves_figure,
    step_time_figure,
    write_plots,
)
from runner.report.reader import label
from runner.report.scaling import ScalingPoint
from runner.report.series import Point, Series, find_steps

# the CPU peaks the probe runs measured (roofline.peak: best copy bandwidth, float32 matmul)
PEAK_GBPS, PEAK_GFLOPS = 8.407696097564202, 16.806658113767945
NAIVE_OPS = [("aten::div_", 0.030848), ("aten::sum", 0.02189), ("aten::_to_copy", 0.019637),
             ("aten::mul", 0.017674), ("aten::mean", 0.016001), ("aten::add", 0.008016), ("aten::mul", 0.007063),
             ("aten::mul", 0.006453), ("aten::empty_strided", 0.005269), ("aten::rsqrt", 0.004559),
             ("aten::copy_", 0.004539), ("aten::to", 0.004047), ("aten::fill_", 0.002355)]  # fmt: skip
BUILTIN_OPS = [("aten::pow", 0.02133), ("aten::_fused_rms_norm", 0.021281), ("aten::rms_norm", 0.018304),
               ("aten::div_", 0.012022), ("aten::_to_copy", 0.010149), ("aten::add_", 0.007854),
               ("aten::sum", 0.006812), ("aten::type_as", 0.006342), ("aten::mean", 0.006021),
               ("aten::mul", 0.004739), ("aten::mul", 0.004319), ("aten::rsqrt", 0.003686)]  # fmt: skip
COMPILED_OPS = [("## Call CompiledFxGraph fga2yec62krxemkk7f4dj2kedxa4vvtuookkm5dyijfkcjjgg5eg ##", 2.161365),
                ("Torch-Compiled Region: 0/0", 0.079578), ("TorchDynamo Cache Lookup", 0.013415),
                ("Pregraph bytecode", 0.004108), ("AOTDispatcher Runtime Wrapper Prologue", 0.003867)]  # fmt: skip
ATTENTION_OPS = {
    ("attention_naive", False): [("aten::bmm", 14.8139), ("aten::_softmax", 6.5264), ("aten::triu", 4.5986),
                                 ("aten::matmul", 0.4389), ("aten::expand", 0.1071), ("aten::div", 0.0759),
                                 ("aten::_unsafe_view", 0.0652), ("aten::transpose", 0.0498),
                                 ("aten::masked_fill", 0.0421), ("aten::ones", 0.0419)],
    ("attention_naive", True): [("## Call CompiledFxGraph fwr35wngitkmkfknnp2v5mkoeeimdh3a6mlfd3zltwhhdtx3ktyy ##",
                                 0.1004), ("Torch-Compiled Region: 0/0", 0.0609), ("aten::bmm", 0.0298),
                                ("TorchDynamo Cache Lookup", 0.013), ("AOTDispatcher Runtime Wrapper Prologue", 0.0049),
                                ("Pregraph bytecode", 0.0039)],
    ("attention_sdpa", False): [("aten::_scaled_dot_product_flash_attention_for_cpu", 0.0473),
                                ("aten::transpose", 0.023), ("aten::empty_like", 0.0134), ("aten::empty", 0.0113),
                                ("aten::scaled_dot_product_attention", 0.0093), ("aten::empty_strided", 0.0091),
                                ("aten::as_strided", 0.0062)],
    ("attention_sdpa", True): [("Torch-Compiled Region: 1/0", 0.0999),
                               ("## Call CompiledFxGraph fzgc6ajwcrqxcrpsonn2sm7itl6lma5mgydsnbitbvelxcfnfsej ##",
                                0.0529), ("aten::_scaled_dot_product_flash_attention_for_cpu", 0.0486),
                               ("aten::transpose", 0.0215), ("TorchDynamo Cache Lookup", 0.0159),
                               ("aten::empty_like", 0.0112)],
}  # fmt: skip
# (median, p10, p90) step ms of the attention runs on the 2-thread probe machine
ATTENTION_MS = {("attention_naive", False): (31.96255, 29.80495, 36.00172),
                ("attention_naive", True): (0.13678, 0.10311, 0.16902),
                ("attention_sdpa", False): (0.05815, 0.05578, 0.06419),
                ("attention_sdpa", True): (0.12063, 0.10473, 0.17559)}  # fmt: skip
# the reduced shape sweep: workload.hidden at seq_len 64, (median, p10, p90) step ms
SHAPES_MS = {
    "rmsnorm_naive": {64: (0.06808, 0.03685, 0.09692), 256: (0.09839, 0.07625, 0.14104),
                      1024: (31.96815, 0.09352, 32.187), 4096: (30.47623, 0.25812, 35.78792)},
    "rmsnorm_builtin": {64: (0.06335, 0.03795, 0.0963), 1024: (0.12203, 0.09795, 0.17678),
                        4096: (0.2596, 0.22096, 0.70757)},
    "rmsnorm_compiled": {256: (7.99824, 0.10841, 16.02753), 1024: (0.1945, 0.12159, 14.04793),
                         4096: (0.52523, 0.17925, 16.01905)},
}  # fmt: skip
SHAPE_OPS = {"rmsnorm_naive": NAIVE_OPS, "rmsnorm_builtin": BUILTIN_OPS, "rmsnorm_compiled": COMPILED_OPS}


def overlapping_texts(fig: Figure) -> list[str]:
    """The figure's texts drawn over one another (by more than 1 px) or reaching outside the image.

    Boxes are measured while the figure is saved as the runner saves it (110 dpi); texts the
    draw skips (tick labels outside the axis range, hidden labels) are left out.
    """
    drawn: dict[int, Bbox] = {}
    draw = Text.draw

    def measured(text: Text, renderer: RendererBase) -> None:
        draw(text, renderer)
        drawn[id(text)] = text.get_window_extent(renderer)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Text, "draw", measured)
        fig.savefig(io.BytesIO(), dpi=110)
    texts = [t for t in fig.findobj(Text) if id(t) in drawn and t.get_visible() and t.get_text().strip()]
    width, height = fig.get_size_inches() * 110
    found = []
    for a, b in itertools.combinations(texts, 2):
        box_a, box_b = drawn[id(a)], drawn[id(b)]
        across = min(box_a.x1, box_b.x1) - max(box_a.x0, box_b.x0)
        up = min(box_a.y1, box_b.y1) - max(box_a.y0, box_b.y0)
        if across > 1 and up > 1:
            found.append(f"{a.get_text()!r} over {b.get_text()!r}")
    for text in texts:
        box = drawn[id(text)]
        if box.x0 < -1 or box.y0 < -1 or box.x1 > width + 1 or box.y1 > height + 1:
            found.append(f"{text.get_text()!r} outside the image")
    return found


def legend_texts(fig: Figure) -> list[str]:
    """The figure legends' entries, unwrapped."""
    return [" ".join(text.get_text().split()) for legend in fig.legends for text in legend.get_texts()]


def shown_texts(fig: Figure) -> list[str]:
    """The texts drawn on the axes (labels, annotations), unwrapped."""
    return [" ".join(t.get_text().split()) for ax in fig.axes for t in ax.texts if t.get_visible()]


def roofline_metrics(bytes_moved: float, flops: float, median_ms: float) -> dict[str, float]:
    """What the runner logs for a step of `bytes_moved` and `flops` taking `median_ms` on the probe machine."""
    gbps, gflops = bytes_moved / median_ms / 1e6, flops / median_ms / 1e6
    return {
        names.ROOFLINE_BYTES: bytes_moved,
        names.ROOFLINE_FLOPS: flops,
        names.ROOFLINE_STEP_MS: median_ms,
        names.ROOFLINE_ACHIEVED_GBPS: gbps,
        names.ROOFLINE_ACHIEVED_GFLOPS: gflops,
        names.ROOFLINE_INTENSITY: flops / bytes_moved,
        names.ROOFLINE_PEAK_GBPS: PEAK_GBPS,
        names.ROOFLINE_PEAK_GFLOPS: PEAK_GFLOPS,
        names.ROOFLINE_BANDWIDTH_FRACTION: gbps / PEAK_GBPS,
        names.ROOFLINE_COMPUTE_FRACTION: gflops / PEAK_GFLOPS,
    }


class Store:
    """A temporary MLflow store that takes runs the way the runner logs them."""

    def __init__(self, uri: str, tmp_path: Path) -> None:
        self.client = mlflow.MlflowClient(uri)
        self.experiment = self.client.create_experiment("plots", artifact_location=(tmp_path / "artifacts").as_uri())

    def run(
        self,
        name: str,
        workload: str,
        step_ms: tuple[float, float, float],
        metrics: dict[str, float],
        ops: list[tuple[str, float]] | None = None,
        price: float | None = None,
    ) -> Run:
        """A FINISHED run with its step times, `metrics`, its op table (self CPU ms of one profiled step)."""
        run_id = self.client.create_run(self.experiment, run_name=name).info.run_id
        median, p10, p90 = step_ms
        steps = {names.STEP_MEDIAN_MS: median, names.STEP_P10_MS: p10, names.STEP_P90_MS: p90}
        now = int(time.time() * 1000)
        self.client.log_batch(
            run_id,
            metrics=[Metric(k, v, now, 0) for k, v in {**steps, names.PROFILER_ACTIVE_STEPS: 1.0, **metrics}.items()],
            params=[Param("backend.price_per_hour", str(price))],
            tags=[],
        )
        self.client.set_tag(run_id, names.TAG_WORKLOAD, workload)
        self.client.set_tag(run_id, names.TAG_OVERRIDES, name.replace(workload, f"workload={workload}", 1))
        if ops is not None:
            columns = ["name", "input_shapes", "calls", "calls_per_step", "self_cpu_ms"]
            rows = [["ProfilerStep*", "[]", 1, 1.0, 0.211724], *([op, "[]", 1, 1.0, ms] for op, ms in ops)]
            self.client.log_dict(run_id, {"columns": columns, "data": rows}, names.OP_TABLE_FILE)
        self.client.set_terminated(run_id)
        return self.client.get_run(run_id)


def rmsnorm_study(store: Store) -> list[Run]:
    """`+experiment=rmsnorm_comparison workload.hidden=64 workload.seq_len=8`: three points at one intensity."""
    study = [("rmsnorm_naive", (0.0715145, 0.0639246, 0.1010182), NAIVE_OPS, 0),
             ("rmsnorm_builtin", (0.0963360, 0.0817617, 0.1308394), BUILTIN_OPS, 0),
             ("rmsnorm_compiled", (0.0884660, 0.0625453, 8.8495278), COMPILED_OPS, 1)]  # fmt: skip
    return [
        store.run(
            f"{workload} backend=cpu workload.hidden=64 workload.seq_len=8 measure=quick",
            workload,
            step_ms,
            {**roofline_metrics(16640, 8288, step_ms[0]), names.COMPILE_GRAPHS: graphs},
            ops,
        )
        for workload, step_ms, ops, graphs in study
    ]


def attention_study(store: Store) -> list[Run]:
    """`+experiment=attention workload.seq_len=32 workload.heads=2 workload.head_dim=16`: four runs."""
    return [
        store.run(
            f"{workload} workload.compile={compiled} backend=cpu workload.seq_len=32 workload.heads=2 "
            "workload.head_dim=16 measure=quick",
            workload,
            step_ms,
            {**roofline_metrics(16384, 131072, step_ms[0]), names.COMPILE_GRAPHS: float(compiled)},
            ATTENTION_OPS[workload, compiled],
        )
        for (workload, compiled), step_ms in ATTENTION_MS.items()
    ]


def shape_sweep(store: Store) -> list[Run]:
    """Ten runs of three variants over workload.hidden, priced; each compiled run compiled a graph."""
    runs = []
    for workload, by_hidden in SHAPES_MS.items():
        for hidden, step_ms in by_hidden.items():
            elements = 64 * hidden
            name = f"{workload} workload.hidden={hidden} workload.seq_len=64 backend=cpu measure=quick"
            metrics = {
                **roofline_metrics(8 * elements + 4 * hidden, 4 * elements + 192, step_ms[0]),
                names.COMPILE_GRAPHS: float(workload == "rmsnorm_compiled"),
            }
            ops = [(op, ms * hidden / 64) for op, ms in SHAPE_OPS[workload]]
            runs.append(store.run(name, workload, step_ms, metrics, ops, price=0.192))
    return runs


STUDIES: dict[str, Callable[[Store], list[Run]]] = {
    "rmsnorm_comparison": rmsnorm_study,
    "attention": attention_study,
    "ten_shapes": shape_sweep,
}


@pytest.fixture
def store(tracking_uri: str, tmp_path: Path) -> Store:
    return Store(tracking_uri, tmp_path)


@pytest.fixture(params=list(STUDIES))
def study(request: pytest.FixtureRequest, store: Store) -> list[Run]:
    return STUDIES[request.param](store)


def test_overlapping_texts_finds_text_on_text_and_text_cut_off() -> None:
    fig = Figure(figsize=(6, 4))
    ax = fig.subplots()
    ax.annotate("rmsnorm_naive (0.116 GFLOP/s)", (0.5, 0.5))
    ax.annotate("rmsnorm_compiled (0.0937 GFLOP/s)", (0.5, 0.51))
    ax.plot([0, 1], [0, 1], label="## Call CompiledFxGraph fga2yec62krxemkk7f4dj2kedxa4vvtuookkm5dyijfkcjjgg5eg ##")
    ax.legend(loc="upper center", bbox_to_anchor=(0.9, -0.1))  # the old op breakdown's legend
    found = overlapping_texts(fig)
    assert "'rmsnorm_naive (0.116 GFLOP/s)' over 'rmsnorm_compiled (0.0937 GFLOP/s)'" in found
    assert any(problem.startswith("'## Call CompiledFxGraph") and "outside" in problem for problem in found)


def test_op_breakdown_names_every_op_and_labels_only_segments_that_fit(study: list[Run], store: Store) -> None:
    fig = op_breakdown_figure(store.client, study)
    assert overlapping_texts(fig) == []
    ax = fig.axes[0]
    colours = {tuple(bar.get_facecolor()) for bar in ax.patches if isinstance(bar, Rectangle) and bar.get_width() > 0}
    legend = legend_texts(fig)
    assert len(legend) == len(colours) and "other" in legend  # one entry per colour drawn
    assert not any("##" in name or "fga2yec62krx" in name for name in legend)
    assert set(shown_texts(fig)) <= {name.removeprefix("aten::") for name in legend}
    assert {" ".join(t.get_text().split()) for t in ax.get_yticklabels()} == {label(r) for r in study}


def test_op_breakdown_shortens_compiled_graph_names(store: Store) -> None:
    fig = op_breakdown_figure(store.client, rmsnorm_study(store))
    assert legend_texts(fig)[:2] == ["CompiledFxGraph <hash>", "Torch-Compiled Region: 0/0"]
    assert "CompiledFxGraph <hash>" in shown_texts(fig)  # its segment is wide enough for its name


def test_roofline_names_every_run_and_its_speed_in_the_legend(study: list[Run]) -> None:
    fig = roofline_figure(study)
    assert overlapping_texts(fig) == []
    legend = legend_texts(fig)
    for run in study:
        gflops = run.data.metrics[names.ROOFLINE_ACHIEVED_GFLOPS]
        assert f"{label(run)} ({gflops:.3g} GFLOP/s)" in legend
    assert shown_texts(fig) == ["8 GB/s, 17 GFLOP/s (ridge 2.0 FLOP/B)"]


def test_roofline_ceilings_of_two_devices_keep_apart(store: Store) -> None:
    runs = [  # two hosts: close bandwidths, one compute peak, so their ceilings' notes fall on one spot
        store.run(
            f"rmsnorm_naive backend=cpu tracking.host={host}",
            "rmsnorm_naive",
            (0.0715145, 0.0639246, 0.1010182),
            {**roofline_metrics(16640, 8288, 0.0715145), names.ROOFLINE_PEAK_GBPS: bandwidth},
        )
        for host, bandwidth in [("a", 8.41), ("b", 9.1)]
    ]
    fig = roofline_figure(runs)
    assert overlapping_texts(fig) == []
    assert len(shown_texts(fig)) == 2


def test_step_times_are_readable(study: list[Run]) -> None:
    fig = step_time_figure(study)
    assert overlapping_texts(fig) == []
    assert len(shown_texts(fig)) == len(study)


def test_cost_frontier_names_every_priced_run_in_the_legend(store: Store) -> None:
    runs = shape_sweep(store)
    fig = cost_frontier_figure(runs)
    assert overlapping_texts(fig) == []
    legend = legend_texts(fig)
    assert all(any(entry.startswith(f"{label(run)} ($0.192/h: $") for entry in legend) for run in runs)
    assert sum("on the frontier" in entry for entry in legend) == 1  # same price: the fastest run beats all


def test_shape_curves_name_compilations_once_and_each_crossover(store: Store) -> None:
    curves = size_curves(shape_sweep(store))
    found = [
        Crossover("rmsnorm_naive", "rmsnorm_builtin", 33024, 132096),
        Crossover("rmsnorm_naive", "rmsnorm_compiled", 132096, 528384),
        Crossover("rmsnorm_compiled", "rmsnorm_builtin", 132096, 528384),  # at the same place as the one before
    ]
    fig = shape_curves_figure(curves, found)
    assert overlapping_texts(fig) == []
    legend = legend_texts(fig)
    assert legend.count("x: the job compiled graphs") == 1
    assert [entry for entry in legend if entry.startswith("crossover: ")] == [
        "crossover: rmsnorm_builtin overtakes rmsnorm_naive between 33 kB and 132 kB moved",
        "crossover: rmsnorm_compiled overtakes rmsnorm_naive between 132 kB and 528 kB moved",
        "crossover: rmsnorm_builtin overtakes rmsnorm_compiled between 132 kB and 528 kB moved",
    ]
    assert set(curves) <= set(legend) and shown_texts(fig) == []


def test_queue_depths_close_together_keep_apart(store: Store) -> None:
    runs = []
    for workload, slower in [("rmsnorm_naive", 1.0), ("rmsnorm_builtin", 1.01)]:  # two curves almost on each other
        for depth, step_ms in zip([1, 2, 4, 8, 16, 32], [0.2, 0.17, 0.15, 0.14, 0.135, 0.13], strict=True):
            ms = step_ms * slower
            metrics = {
                names.THROUGHPUT_INFLIGHT: depth,
                names.THROUGHPUT_BLOCK_MS: depth * ms,
                names.THROUGHPUT_STEPS_PER_S: 1000 / ms,
            }
            name = f"{workload} measure.inflight={depth} backend=cpu workload.hidden=256 workload.seq_len=32"
            runs.append(store.run(name, workload, (ms, ms * 0.9, ms * 1.2), metrics))
    fig = queue_depth_figure(queue_curves(runs))
    assert overlapping_texts(fig) == []
    assert {"1", "2", "4", "8", "16", "32"} <= set(shown_texts(fig))
    assert legend_texts(fig) == ["rmsnorm_naive", "rmsnorm_builtin"]


def test_contention_marks_at_one_onset_stack_apart() -> None:
    def points(rates: list[float]) -> list[ScalingPoint]:
        return [ScalingPoint(k, rate, rate / (k * rates[0])) for k, rate in zip([1, 2, 4, 8], rates, strict=True)]

    fig = core_scaling_figure(
        {"rmsnorm_naive": points([5000, 9800, 12000, 13000]), "rmsnorm_builtin": points([5200, 10100, 12500, 13300])}
    )
    assert overlapping_texts(fig) == []
    assert sorted(shown_texts(fig)) == ["contention (rmsnorm_builtin)", "contention (rmsnorm_naive)"]


def test_efficiency_from_unstable_timing_is_drawn_hollow_and_said_in_the_legend() -> None:
    points = [ScalingPoint(k, 5000 * k, 1.0 + 0.1 * k, stable=k < 4) for k in (1, 2, 4, 8)]
    fig = core_scaling_figure({"rmsnorm_naive": points})
    assert overlapping_texts(fig) == []
    assert legend_texts(fig) == ["rmsnorm_naive", "hollow: timing unstable, efficiency not stated"]
    hollow = [line for line in fig.axes[1].lines if line.get_markerfacecolor() == "white" and len(line.get_xdata())]
    assert [list(line.get_xdata()) for line in hollow] == [[4, 8]]
    stable = [ScalingPoint(k, 5000 * k, 1.0) for k in (1, 2)]
    assert legend_texts(core_scaling_figure({"rmsnorm_naive": stable})) == ["rmsnorm_naive"]


def test_a_jobs_own_plots_are_readable_and_written_where_asked(tmp_path: Path) -> None:
    steps = [[0.08 + 0.001 * ((i * 7 + rank) % 5) for i in range(200)] for rank in range(8)]
    assert overlapping_texts(rank_steps_figure(steps)) == []
    layers = [f"layers.{i}.{part}" for i in range(24) for part in ("self_attn", "mlp")]
    errors = [1e-7 * 1.2**i for i in range(len(layers))]  # drift that grows through the stack
    table: dict[str, list[Any]] = {
        "layer": layers,
        "max_rel_err": errors,
        "tolerance": [1e-5] * len(layers),
        "pass": [e <= 1e-5 for e in errors],
    }
    fig = layer_errors_figure(table)
    assert overlapping_texts(fig) == []
    assert "first over: layers.13.self_attn" in shown_texts(fig)
    assert plots.save(rank_steps_figure(steps), tmp_path / "rank_steps.png").stat().st_size > 10_000
    assert plots.save(layer_errors_figure(table), tmp_path / "layer_accuracy.png").stat().st_size > 10_000


def test_write_plots_keeps_its_file_names(store: Store, tmp_path: Path) -> None:
    written = write_plots(store.client, shape_sweep(store), tmp_path / "plots", [])
    assert [path.name for path in written] == [
        "step_time.png",
        "op_breakdown.png",
        "roofline.png",
        "cost_frontier.png",
        "shape_curves.png",
    ]
    assert all(path.stat().st_size > 10_000 for path in written)


def test_history_labels_each_step_with_its_commit_and_draws_left_out_runs_hollow() -> None:
    values = [1.0 + 0.01 * (k % 3) + (0.3 if k >= 10 else 0.0) for k in range(20)]
    points = [
        Point(f"run{k}", "rmsnorm_naive", f"{k:02d}" * 20, k, v, (0.98 * v, 1.02 * v) if k % 2 else None, k != 4)
        for k, v in enumerate(values)
    ]
    series = Series("cfg-a", "rmsnorm_naive", points)
    find_steps(series, include_unstable=False)
    fig = history_figure(series, names.STEP_MEDIAN_MS)
    assert overlapping_texts(fig) == []
    assert legend_texts(fig) == [
        "run (bar: 95% interval from its worker processes)",
        "left out of the change points",
        "segment level (geometric mean of its runs)",
    ]
    assert "10101010 +29.8%" in shown_texts(fig)
    hollow = [line for line in fig.axes[0].lines if line.get_markerfacecolor() == "white"]
    assert [list(line.get_xdata()) for line in hollow] == [[4]]


@pytest.mark.parametrize("runs", [1, 2])
def test_history_counts_runs_in_whole_numbers(runs: int) -> None:
    series = Series(
        "cfg-a", "rmsnorm_naive", [Point(f"run{k}", "rmsnorm_naive", "c", k, 1.0, None, True) for k in range(runs)]
    )
    find_steps(series, include_unstable=False)
    ax = history_figure(series, names.STEP_MEDIAN_MS).axes[0]
    low, high = ax.get_xlim()
    shown = [tick for tick in ax.get_xticks() if low <= tick <= high]
    assert shown and all(tick == int(tick) for tick in shown), shown  # one run drew ticks at -0.4 ... 0.4
