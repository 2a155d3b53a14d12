"""benchmarks/overhead.py: the goals table compares the right cases."""
from __future__ import annotations

import importlib.util
import json

import pandas as pd
import pytest

from tests.helpers import ROOT


def _overhead():
    spec = importlib.util.spec_from_file_location("overhead", ROOT / "benchmarks" / "overhead.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_goal_table_ratios_and_verdicts() -> None:
    overhead = _overhead()
    cases = list(overhead.SUITES["goals"])
    epoch = dict(zip(cases, [0.4, 0.3, 0.8, 0.25, 0.27, 0.6, 0.45]))
    goals = overhead.goal_table(pd.DataFrame({"case": cases, "epoch_s": list(epoch.values())}),
                                overhead.GOALS["goals"])
    assert goals["comparison"].tolist() == [g[0] for g in overhead.GOALS["goals"]]
    assert goals["ratio"].tolist() == pytest.approx([0.75, 2.0, 1.2, 1.08, 1.5, 1.5])
    assert goals["goal"].tolist() == ["<= 1.00", "<= 1.50", "<= 1.10", "<= 1.10", "-", "-"]
    assert goals["met"].tolist() == ["yes", "no", "no", "yes", "-", "-"]
    for _, case, reference, _ in overhead.GOALS["goals"]:  # every compared case runs in the suite
        assert case in overhead.SUITES["goals"] and reference in overhead.SUITES["goals"]


@pytest.mark.slow  # make test-all: a benchmark's own processes
def test_memory_part_a_measures_each_case_in_its_own_process(tmp_path, capsys) -> None:
    spec = importlib.util.spec_from_file_location("memory", ROOT / "benchmarks" / "memory.py")
    memory = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(memory)
    memory.OUT = tmp_path
    assert memory.main(["--part", "a", "--nodes", "3000", "--chunks", "4", "--engines", "single",
                        "--tag", "_t", "--halo", "historical"]) == 0
    assert "targets=all, historical, METIS" in capsys.readouterr().out
    table = pd.read_csv(tmp_path / "memory_a_t.csv")
    assert table["case"].tolist() == ["single k=1", "single k=4"]
    assert table["status"].tolist() == ["completed", "completed"]
    full, chunked = table.to_dict("records")
    assert chunked["peak_ratio"] == pytest.approx(chunked["peak_mb"] / full["peak_mb"])
    # held is read just before the training peak is reset, and train and peak are two readings of one
    # peak: 1 MiB slack each (a real error is tens of MiB)
    for row in (full, chunked):
        assert row["base_mb"] < row["held_mb"] < row["train_mb"] + 1 and row["train_mb"] <= row["peak_mb"] + 1
    assert chunked["replication"] > 1.0 and full["replication"] == 1.0


def test_pipeline_benchmark_table_records_and_figures(tmp_path) -> None:
    spec = importlib.util.spec_from_file_location("pipeline", ROOT / "benchmarks" / "pipeline.py")
    pipeline = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(pipeline)
    tiny = ["dataset.num_nodes=400", "dataset.num_features=16", "dataset.num_communities=6",
            "dataset.train_per_class=10", "dataset.num_val=40", "dataset.num_test=60"]
    out, csv = tmp_path / "out", tmp_path / "pipeline.csv"
    assert pipeline.main(["--epochs", "2", "--chunks", "8", "--cases", "single", "pipelining gpipe auto",
                          "--overhead-repeats", "1", "--overhead-steps", "2", "--csv", str(csv), "--out",
                          str(out), *tiny]) == 0
    table = pd.read_csv(csv)
    assert table["case"].tolist() == ["single", "pipelining gpipe auto"]
    assert table["speedup"].tolist() == pytest.approx([1.0, table.epoch_s[0] / table.epoch_s[1]])
    auto = table.iloc[1]
    assert auto["bubble_theoretical"] == pytest.approx(1 / 9) and 0 < auto["of_ideal"]
    assert sum(map(int, auto["balance"].split(","))) == 4
    overhead = pd.read_csv(tmp_path / "pipeline_overhead.csv")
    assert overhead["case"].tolist() == ["single k=8", "pipelining gpipe auto k=8",
                                         "single k=8, 2 steps in one process",
                                         "gpipe k=8, 2 steps in one process"]
    on_over_off = overhead.timeline_on_s / overhead.timeline_off_s
    assert overhead["overhead"].tolist() == pytest.approx(list(on_over_off - 1))
    for name in ("single_k8/result.json", "single_k8/trace.json", "pipelining_gpipe_auto_k8/trace.json"):
        assert (out / name).is_file(), name


def test_reference_accuracy_checks_pairs_and_published_figures() -> None:
    spec = importlib.util.spec_from_file_location("reference_accuracy",
                                                  ROOT / "benchmarks" / "reference_accuracy.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    cora_gcn = {"dataset": "cora", "model": "gcn"}
    table = pd.DataFrame([
        {**cora_gcn, "implementation": "plain pyg", "mean": 0.815, "sem": 0.003},
        {**cora_gcn, "implementation": "pipegnn full batch", "mean": 0.812, "sem": 0.004},
        {**cora_gcn, "implementation": "pipegnn exact k=8", "mean": 0.790, "sem": 0.004}])
    verdict = module.checks(table)
    ok = dict(zip(verdict["check"], verdict["ok"]))
    assert ok["plain pyg vs pipegnn full batch"]  # 0.3 points apart, bound 2 x 0.5 = 1.0
    assert not ok["plain pyg vs pipegnn exact k=8"]  # 2.5 points apart
    assert ok["pipegnn full batch vs published 81.5"] and not ok["pipegnn exact k=8 vs published 81.5"]
    assert len(verdict) == 3 + 3


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_memory_part_d_puts_bf16_over_fp32_side_by_side() -> None:
    memory = _load("memory")
    rows = [{"mode": "full batch", "precision": "fp32", "status": "completed", "peak_mb": 1000.0,
             "train_mb": 900.0, "held_mb": 400.0, "feature_mb": 200.0, "epoch_s": 2.0},
            {"mode": "full batch", "precision": "bf16", "status": "completed", "peak_mb": 800.0,
             "train_mb": 720.0, "held_mb": 300.0, "feature_mb": 100.0, "epoch_s": 1.0},
            {"mode": "single k=16", "precision": "fp32", "status": "completed", "peak_mb": 500.0,
             "train_mb": 450.0, "held_mb": 400.0, "feature_mb": 200.0, "epoch_s": 4.0},
            {"mode": "single k=16", "precision": "bf16", "status": "oom", "peak_mb": 600.0}]
    full, chunked = memory.side_by_side(rows, "precision", "fp32", "bf16",
                                        ("peak_mb", "train_mb", "held_mb", "feature_mb", "epoch_s"))
    assert (full["mode"], chunked["mode"]) == ("full batch", "single k=16")
    assert (full["fp32_peak_mb"], full["bf16_peak_mb"]) == (1000.0, 800.0)
    assert [full[f"{k}_ratio"] for k in ("peak", "train", "held", "feature", "epoch")] == \
        pytest.approx([0.8, 0.8, 0.75, 0.5, 0.5])
    assert (chunked["bf16_status"] == "oom" and chunked["peak_ratio"] is None
            and chunked["epoch_ratio"] is None)


def test_memory_side_by_side_copies_the_other_runs_figures() -> None:
    memory = _load("memory")
    rows = [{"mode": "single k=16", "features": "memory", "status": "completed", "epoch_s": 2.0,
             "peak_mb": 900.0},
            {"mode": "single k=16", "features": "disk", "status": "completed", "epoch_s": 2.5,
             "peak_mb": 600.0, "step_read_mb": 12.5, "step_read_calls": 40}]
    (row,) = memory.side_by_side(rows, "features", "memory", "disk", ("epoch_s", "peak_mb"),
                                 copied=("step_read_mb", "step_read_calls"))
    assert (row["epoch_ratio"], row["peak_ratio"]) == pytest.approx((1.25, 2 / 3))
    assert (row["step_read_mb"], row["step_read_calls"], row["disk_status"]) == (12.5, 40, "completed")


def test_precision_benchmark_compares_means_within_one_point() -> None:
    precision = _load("precision")
    accs = {("cora", "gat", "fp32"): [0.80, 0.82, 0.84], ("cora", "gat", "bf16"): [0.805, 0.825, 0.845],
            ("cora", "gcn", "fp32"): [0.80, 0.80, 0.80], ("cora", "gcn", "bf16"): [0.78, 0.79, 0.78]}
    runs = pd.DataFrame([{"dataset": d, "model": m, "precision": p, "seed": s, "test_acc": a}
                         for (d, m, p), values in accs.items() for s, a in enumerate(values)])
    table = precision.compare(runs, tolerance=0.01)
    assert table[["dataset", "model"]].values.tolist() == [["cora", "gat"], ["cora", "gcn"]]
    assert table["fp32_mean"].tolist() == pytest.approx([0.82, 0.80])
    assert table["bf16_mean"].tolist() == pytest.approx([0.825, 2.35 / 3])
    assert table["fp32_std"].tolist() == pytest.approx([0.02, 0.0])
    assert table["diff"].tolist() == pytest.approx([0.005, 2.35 / 3 - 0.8])
    assert table["within"].tolist() == [True, False]
    assert table["bf16_per_seed"].tolist() == ["0.805 0.825 0.845", "0.780 0.790 0.780"]
    text = precision.report(table, 0.01, 200, [])
    assert "82.00 ±  2.00" in text and "+0.50  yes" in text and "-1.67  no" in text


def test_memory_case_keeps_the_runs_record(tmp_path) -> None:
    memory = _load("memory")
    record = tmp_path / "records" / "tiny_n2000.json"
    row = memory.case(["dataset=synthetic", "dataset.num_nodes=2000", "dataset.num_features=16",
                       "train.epochs=2", "model=gat", "model.layers=2", "chunks=4", "microbatch.halo=exact",
                       "data.features=disk", f"cache_root={tmp_path / 'cache'}"],
                      {}, safety_gb=4.0, timeout=300, record=record)
    assert row["status"] == "completed", row
    kept = json.loads(record.read_text())
    assert kept["status"] == "completed" and kept["config"]["dataset"]["num_nodes"] == 2000
    assert kept["features"]["storage"] == "disk" and len(kept["epochs"]) == 2
    assert row["step_read_mb"] == pytest.approx(kept["features"]["train_bytes_mean"] / 2 ** 20)
    # the case's peak covers the setup, whose peak the run records before it resets the counter
    assert row["peak_mb"] >= row["setup_mb"] >= kept["memory"]["setup_peak_rss_bytes"] / 2 ** 20


def test_memory_part_f_figure_marks_the_sizes_that_did_not_fit(tmp_path) -> None:
    memory = _load("memory")
    rows = [{"mode": "full batch", "nodes": n, "status": s, "peak_mb": p, "epoch_s": e}
            for n, s, p, e in [(1000, "completed", 900.0, 0.1), (2000, "oom", None, None)]]
    rows += [{"mode": "k=64 disk", "nodes": n, "status": "completed", "peak_mb": 700.0, "epoch_s": 0.2}
             for n in (1000, 2000, 4000)]
    fig = memory.plot_f(rows, 3.0, 1024, "test", tmp_path / "f.png")
    assert (tmp_path / "f.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    memory_ax, time_ax = fig.axes[:2]
    crosses = [line for line in memory_ax.lines if line.get_marker() == "x"]
    assert [list(line.get_xdata()) for line in crosses] == [[2000], []]  # full batch's failure, at the cap
    assert [list(line.get_ydata()) for line in crosses] == [[3.0], []]
    assert [list(line.get_xdata()) for line in time_ax.lines] == [[1000], [1000, 2000, 4000]]


def test_capacity_search_finds_the_largest_size_within_its_resolution() -> None:
    """benchmarks/capacity.py's search: doubling, then bisection down to the resolution; the largest
    size that fitted comes back with its probe's result, and 0 when even the first does not fit."""
    spec = importlib.util.spec_from_file_location("capacity", ROOT / "benchmarks" / "capacity.py")
    capacity = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(capacity)
    tried: list[int] = []

    def fits(n: int) -> dict:
        tried.append(n)
        return {"fits": n <= 37, "n": n}

    assert capacity.largest(fits, 8, lambda n: 8) == (32, {"fits": True, "n": 32}, {"fits": False, "n": 40})
    assert tried == [8, 16, 32, 64, 48, 40]
    assert capacity.largest(fits, 8, lambda n: 1)[:2] == (37, {"fits": True, "n": 37})
    assert capacity.largest(fits, 64, lambda n: 8) == (0, {}, {"fits": False, "n": 64})


def test_depth_repeats_combine_to_the_median_of_each_case() -> None:
    depth = _load("depth")
    case = dict(dataset="synthetic", model="gcn2", layers=8, hidden=64, aggregation="messages", halo="full",
                k=1, threads=1, inflation=1.0)
    runs = pd.DataFrame([
        {**case, "case": "full batch x1", "status": "completed", "epoch_s": e, "bubble": 0.1}
        for e in (1.0, 1.4, 1.1)
    ] + [{**case, "case": "single x1", "status": s, "epoch_s": e, "bubble": 0.2}
         for s, e in (("failed", None), ("completed", 2.0))])
    table = depth.combine(runs).set_index("case")
    assert (table.loc["full batch x1", "epoch_s"] == pytest.approx(1.1)
            and table.loc["full batch x1", "runs"] == 3)
    assert table.loc["full batch x1", "epoch_s_spread"] == pytest.approx(0.4 / 1.1)
    assert table.loc["single x1", "epoch_s"] == pytest.approx(2.0) and table.loc["single x1", "runs"] == 1


def test_depth_summary_sets_the_best_pipeline_against_the_best_single_process() -> None:
    depth = _load("depth")
    rows = [("full batch x1", "full", 1, 1, 1.0, 1.0), ("full batch x2", "full", 1, 2, 0.7, 1.0),
            ("single x1", "historical", 8, 1, 1.1, 1.15), ("single x2", "historical", 8, 2, 0.8, 1.15),
            ("pipelining gpipe", "historical", 8, 1, 0.6, 1.15),
            ("pipelining 1f1b", "historical", 8, 1, 0.65, 1.15),
            ("pipelining gpipe", "exact", 8, 1, 2.0, 6.0), ("single x1", "exact", 8, 1, 3.0, 6.0)]
    table = pd.DataFrame([dict(dataset="synthetic", model="gcn2", layers=16, status="completed", case=c,
                               halo=h, k=k, threads=t, epoch_s=e, inflation=i, bubble=0.1)
                          for c, h, k, t, e, i in rows])
    row = depth.summarise(table, threads=2).iloc[0]
    assert (row.best_pipeline == "pipelining gpipe historical k=8"
            and row.best_alone == "full batch x2 full k=1")
    slow = table.assign(epoch_s=table.epoch_s.where(table.threads == 1, 1.3))  # two threads slower than one
    assert depth.summarise(slow, threads=2).iloc[0].best_alone == "full batch x1 full k=1"
    assert row.speedup == pytest.approx(0.7 / 0.6) and row.vs_single_x1_same_mb == pytest.approx(1.1 / 0.6)
    assert (row.historical_over_full_x1 == pytest.approx(1.1)
            and row.historical_inflation == pytest.approx(1.15))
    widths = pd.concat([table.assign(hidden=64), table.assign(hidden=256, epoch_s=table.epoch_s * 4)])
    wide = depth.summarise(widths, threads=2).set_index("hidden")  # one row per width, each against its own
    assert list(wide.index) == [64, 256] and wide.loc[256, "alone_s"] == pytest.approx(2.8)
    assert wide.loc[256, "speedup"] == pytest.approx(0.7 / 0.6)


def test_depth_plan_runs_exact_halos_up_to_their_depth_and_every_baseline() -> None:
    """Exact halos only up to --exact-max-layers; per depth both full batches, and per k and halo the
    single engine with 1 and --threads threads and both pipelines (one thread each)."""
    depth = _load("depth")
    plan = depth.plan(depth.parse(["--datasets", "cora", "--models", "gcn2", "--depths", "2", "8",
                                   "--chunks", "4", "8", "--exact-max-layers", "4"]))
    labels = [(lab["layers"], lab["case"], lab["halo"], lab["k"], threads) for _, threads, lab in plan]
    assert len(labels) == len(set(labels)) == 2 * 2 + 2 * 2 * 4 + 2 * 4
    assert {(layers, halo) for layers, _, halo, _, _ in labels} == {
        (2, "full"), (2, "exact"), (2, "historical"), (8, "full"), (8, "historical")}
    assert {threads for _, case, _, _, threads in labels if case.startswith("pipelining")} == {1}
    overrides, _, _ = next(p for p in plan
                           if p[2]["case"] == "pipelining 1f1b" and p[2]["halo"] == "historical")
    assert {"dataset=cora", "model=gcn2", "engine.schedule=1f1b", "microbatch.halo=historical",
            "microbatch.halo_dropout=read", "model.aggregation=messages"} <= set(overrides)
    both = depth.plan(depth.parse(["--datasets", "cora", "--models", "gcn2", "--depths", "8", "--chunks", "8",
                                   "--halos", "historical", "--aggregations", "messages", "sparse"]))
    assert [lab["aggregation"] for _, _, lab in both] == ["messages"] * 6 + ["sparse"] * 6
    assert all(f"model.aggregation={lab['aggregation']}" in o for o, _, lab in both)
    widths = depth.plan(depth.parse(["--datasets", "cora", "--models", "gcn2", "--depths", "16",
                                     "--chunks", "8", "--halos", "historical", "--hidden", "64", "256"]))
    assert [lab["hidden"] for _, _, lab in widths] == [64] * 6 + [256] * 6
    assert all(f"model.hidden={lab['hidden']}" in o for o, _, lab in widths)


def test_depth_summary_takes_the_best_over_aggregations_and_compares_within_the_pipelines() -> None:
    """With two aggregations the best pipeline and the best single process may use different ones; the
    same-micro-batch and historical-over-full figures stay within the best pipeline's aggregation."""
    depth = _load("depth")
    rows = [("messages", "full batch x1", "full", 1, 1, 1.0),
            ("messages", "full batch x2", "full", 1, 2, 0.7),
            ("messages", "single x1", "historical", 8, 1, 1.2),
            ("messages", "pipelining 1f1b", "historical", 8, 1, 0.8),
            ("sparse", "full batch x1", "full", 1, 1, 0.9), ("sparse", "full batch x2", "full", 1, 2, 0.75),
            ("sparse", "single x1", "historical", 8, 1, 1.0),
            ("sparse", "pipelining 1f1b", "historical", 8, 1, 0.6)]
    table = pd.DataFrame([dict(dataset="synthetic", model="gcn2", layers=32, status="completed",
                               aggregation=a, case=c, halo=h, k=k, threads=t, epoch_s=e, inflation=1.15,
                               bubble=0.1)
                          for a, c, h, k, t, e in rows])
    row = depth.summarise(table, threads=2).iloc[0]
    assert (row.pipeline_aggregation, row.alone_aggregation) == ("sparse", "messages")
    assert row.speedup == pytest.approx(0.7 / 0.6) and row.vs_single_x1_same_mb == pytest.approx(1.0 / 0.6)
    assert row.historical_over_full_x1 == pytest.approx(1.0 / 0.9)


def test_depth_with_more_threads_per_stage_sets_them_against_one_process_with_all() -> None:
    """--stage-threads 4: the pipelines run 2 x 4 threads (engine.threads), the baselines 4 (the same
    micro-batches per process) and 8 (the pipeline's cores), and the summary's per-process figures
    are the 4-thread runs'."""
    depth = _load("depth")
    args = depth.parse(["--datasets", "cora", "--models", "gcn2", "--depths", "8", "--chunks", "8",
                        "--halos", "historical", "--stage-threads", "4"])
    plan = depth.plan(args)
    assert depth.cores(args) == 8
    assert {lab["case"]: threads for _, threads, lab in plan} == {
        "full batch x4": 4, "full batch x8": 8, "single x4": 4, "single x8": 8,
        "pipelining gpipe": 4, "pipelining 1f1b": 4}
    rows = [("full batch x4", "full", 1, 4, 1.0), ("full batch x8", "full", 1, 8, 0.8),
            ("single x4", "historical", 8, 4, 1.2), ("single x8", "historical", 8, 8, 0.9),
            ("pipelining gpipe", "historical", 8, 4, 0.6)]
    table = pd.DataFrame([dict(dataset="cora", model="gcn2", layers=8, status="completed", case=c, halo=h,
                               k=k, threads=t, epoch_s=e, inflation=1.1, bubble=0.1)
                          for c, h, k, t, e in rows])
    row = depth.summarise(table, threads=8, stage_threads=4).iloc[0]
    assert row.best_alone == "full batch x8 full k=1" and row.speedup == pytest.approx(0.8 / 0.6)
    assert (row.vs_single_x1_same_mb == pytest.approx(1.2 / 0.6)
            and row.historical_over_full_x1 == pytest.approx(1.2))
    assert row.stage_threads == 4


def test_host_overhead_counts_calls_per_step_beside_plain_pyg(capsys) -> None:
    """benchmarks/host_overhead.py on the tiny graph: a plain PyG row and pipegnn's cases, per step a
    positive count of aten calls and of sync-forcing ones (item, nonzero, ...): more aten calls for 8
    micro-batches than for full batch, and one wait for the device (the loss) in both."""
    spec = importlib.util.spec_from_file_location("host_overhead", ROOT / "benchmarks" / "host_overhead.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    events = {"aten::add": 3, "aten::nonzero": 2, "aten::_local_scalar_dense": 1, "stage0 forward": 9}
    calls = module.HostCalls.of(events)
    assert (calls.aten, calls.syncs) == (6, 3)
    tiny = ["dataset.num_nodes=400", "dataset.num_features=16", "dataset.num_communities=6",
            "dataset.train_per_class=10", "dataset.num_val=40", "dataset.num_test=60"]
    assert module.main(["--models", "GAT 2", "--cases", "full batch", "exact k=8", "--epochs", "1",
                        *tiny]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = {line.split()[2] + " " + line.split()[3]: line.split() for line in lines[2:]}
    assert sorted(rows) == ["exact k=8", "full batch", "plain PyG"]
    plain, full, exact = (rows[k] for k in ("plain PyG", "full batch", "exact k=8"))
    assert all(int(float(r[4])) > 0 and int(float(r[5])) > 0 for r in (plain, full, exact))
    assert int(float(exact[4])) > int(float(full[4])) and float(exact[5]) == float(full[5]) == 1
