"""What a training step asks of the host: per step, the aten operator calls and, among them, the calls
that force a device-to-host synchronisation on a GPU, with the step's time, side by side in one run, for
a plain PyG loop (the same layers and loss, no pipegnn) and pipegnn's single engine at full batch and with
exact and historical micro-batches at k = 1, 8, 32; GAT 2 layers, GCNII 16 and 64 layers; on a GPU with
``--captured`` also each case whose step can be recorded as a CUDA graph (``engine.capture=cuda_graph``:
not historical), replayed.

Counted with ``torch.profiler`` (nested calls included, so every count has one meaning for every case;
which calls wait for a GPU: :mod:`pipegnn.hostcalls`). The counts do not depend on the device, which is
what makes them a CPU proxy for the GPU's wait on the host. The step time is the median epoch of a
second, unprofiled run (``--device cuda:0`` on a GPU).

    OMP_NUM_THREADS=1 python benchmarks/host_overhead.py --csv results/benchmarks/host_overhead.csv
    python benchmarks/host_overhead.py --device cuda:0 --captured --csv OUT.csv   # on a GPU
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import pandas as pd
import torch
import torch.nn.functional as F
from torch.profiler import profile

sys.path.insert(0, str(Path(__file__).resolve().parent))
from profile_step import profile_steps  # noqa: E402 - a sibling benchmark: the per-step profiling

from pipegnn import run  # noqa: E402
from pipegnn.config.schema import compose_config  # noqa: E402
from pipegnn.data import load_graph  # noqa: E402
from pipegnn.hostcalls import HostCalls  # noqa: E402

#: model: config overrides.
MODELS = {"GAT 2": ["model=gat"], "GCNII 16": ["model=gcn2", "model.layers=16"],
          "GCNII 64": ["model=gcn2", "model.layers=64"]}
#: pipegnn case: config overrides (``microbatch.targets=all`` for all).
CASES = {"full batch": ["chunks=1", "microbatch.halo=none"],
         **{f"exact k={k}": [f"chunks={k}", "microbatch.halo=exact"] for k in (1, 8, 32)},
         **{f"historical k={k}": [f"chunks={k}", "microbatch.halo=historical"] for k in (8, 32)}}


def _layers(model: str) -> int:
    """The depth of a :data:`MODELS` entry (2 unless it sets ``model.layers``)."""
    return int(next((o.split("=")[1] for o in MODELS[model] if o.startswith("model.layers=")), 2))


def _plain_model(name: str, cfg: dict, in_dim: int, classes: int) -> torch.nn.Module:
    """The model of ``cfg`` as a plain PyG module (what a user writes without pipegnn)."""
    from torch_geometric.nn import GATConv, GCN2Conv

    hidden, layers = int(cfg["hidden"]), int(cfg["layers"])

    class GAT(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            heads = int(cfg["heads"])
            self.convs = torch.nn.ModuleList(
                [GATConv(in_dim if i == 0 else hidden * heads, hidden, heads=heads)
                 for i in range(layers - 1)]
                + [GATConv(hidden * heads if layers > 1 else in_dim, classes, heads=int(cfg["out_heads"]),
                           concat=False)])

        def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
            for conv in self.convs[:-1]:
                x = F.elu(conv(x, edge_index))
            return self.convs[-1](x, edge_index)

    class GCNII(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inp, self.out = torch.nn.Linear(in_dim, hidden), torch.nn.Linear(hidden, classes)
            alpha, theta = float(cfg["alpha"]), float(cfg["theta"])
            self.convs = torch.nn.ModuleList([GCN2Conv(hidden, alpha, theta, i + 1, cached=True)
                                              for i in range(layers)])

        def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
            x = x0 = F.relu(self.inp(x))
            for conv in self.convs:
                x = F.relu(conv(x, x0, edge_index))
            return self.out(x)

    return GAT() if name == "gat" else GCNII()


def plain_pyg(overrides: list[str], epochs: int, device: torch.device) -> dict:
    """Aten and sync-forcing calls per training step (forward, loss, backward, the loss read once) of the
    plain PyG loop, and its median step time, over ``epochs`` steps after a warm-up."""
    cfg = compose_config(["microbatch.targets=all", "model.dropout=0", *overrides])
    graph = load_graph(cfg.dataset, cfg.data.root, cfg.data.cache)
    torch.manual_seed(0)
    model = _plain_model(cfg.model.name, cfg.model, graph.num_features, graph.num_classes).to(device)
    x, y, edges = graph.x.to(device), graph.y.to(device), graph.edge_index.to(device)
    mask = graph.train_mask.to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.005)

    def step() -> float:
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x, edges)[mask], y[mask])
        loss.backward()
        optimizer.step()
        return loss.item()

    step()
    seconds = []
    for _ in range(epochs):
        start = time.perf_counter()
        step()
        seconds.append(time.perf_counter() - start)
    with profile() as prof:
        step()
    events = {e.key: e.count for e in prof.key_averages()}
    # the optimizer's step is outside pipegnn's profiled step: leave its calls out here too
    with profile() as opt:
        optimizer.step()
    for e in opt.key_averages():
        events[e.key] = events.get(e.key, 0) - e.count
    calls = HostCalls.of(events)
    return {"aten_calls": calls.aten, "sync_calls": calls.syncs, "step_s": statistics.median(seconds)}


def pipegnn_case(overrides: list[str], epochs: int, captured: bool = False) -> dict:
    """Per training step of pipegnn's single engine (``captured``: recorded once, replayed): aten and
    sync-forcing calls (profiled run), and the median epoch's training step time of an unprofiled run."""
    common = ["engine=single", "microbatch.targets=all", "model.dropout=0", "engine.timeline=false",
              *overrides, *(["engine.capture=cuda_graph"] if captured else [])]
    warmup = 2 if captured else 1  # a captured run's second step records the graph
    _, ops, steps, record = profile_steps(common, epochs + warmup, warmup=warmup)
    calls = HostCalls.of({op: n / steps for op, n in ops.items()})
    timed = run(compose_config([f"train.epochs={epochs + warmup}", *common]))
    return {"aten_calls": calls.aten, "sync_calls": calls.syncs,
            "step_s": timed["timing"]["epoch_time_median_s"],
            "inflation": record["microbatch"].get("inflation")}


def measure(args: argparse.Namespace) -> pd.DataFrame:
    rows = []
    device = torch.device(args.device)
    for model in args.models:
        base = [*MODELS[model], *args.overrides, f"engine.device={args.device}"]
        cases = [c for c in args.cases if not (c.startswith("exact") and c != "exact k=1"
                                               and _layers(model) > args.exact_max_layers)]
        rows.append({"model": model, "case": "plain PyG",
                     **plain_pyg([o for o in base if not o.startswith("engine.")], args.epochs, device)})
        for case in cases:
            rows.append({"model": model, "case": case, **pipegnn_case([*base, *CASES[case]], args.epochs)})
            print(f"{model}, {case}: {rows[-1]}", file=sys.stderr, flush=True)
            if args.captured and not case.startswith("historical"):
                rows.append({"model": model, "case": f"{case}, captured",
                             **pipegnn_case([*base, *CASES[case]], args.epochs, captured=True)})
                print(f"{model}, {case}, captured: {rows[-1]}", file=sys.stderr, flush=True)
    table = pd.DataFrame(rows)
    table["micro_batches"] = [int(c.split("k=")[1].split(",")[0]) if "k=" in c else 1 for c in table.case]
    table["aten_per_micro_batch_layer"] = table.aten_calls / (table.micro_batches * table.model.map(_layers))
    return table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    parser.add_argument("--epochs", type=int, default=3, help="timed steps per case (after a warm-up)")
    parser.add_argument("--exact-max-layers", type=int, default=16,
                        help="exact halos at k > 1 only up to this depth (deeper, a micro-batch's halo is "
                        "nearly the whole graph: results/benchmarks/depth_synthetic.txt)")
    parser.add_argument("--device", default="cpu", help="cpu, or cuda:0 for the times on a GPU")
    parser.add_argument("--captured", action="store_true",
                        help="also each non-historical case recorded as a CUDA graph and replayed "
                             "(a GPU only)")
    parser.add_argument("--csv", type=Path)
    parser.add_argument("overrides", nargs="*", help="config overrides for every case (e.g. a dataset)")
    args = parser.parse_args(argv)
    table = measure(args)
    print("per training step: aten calls, sync-forcing calls (item, nonzero, masked_select, unique, "
          "repeat_interleave), median step seconds; aten calls per micro-batch and layer")
    print(table.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    if args.csv:
        args.csv.parent.mkdir(parents=True, exist_ok=True)
        table.to_csv(args.csv, index=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
