"""``engine=dgl_loader``: the loop a DGL user writes from DGL's tutorials, as a baseline runner of the
time-to-accuracy map (``map_runner=dgl_loader``): ``dgl.dataloading.DataLoader`` over the training nodes
with ``NeighborSampler`` (the run's ``microbatch.fanouts``, ``chunks`` batches an epoch, shuffled), a
plain stack of DGL's ``GraphConv`` or ``GATConv`` layers of the run's model widths over each batch's
blocks, Adam, and a full-graph evaluation every epoch; no pipegnn model, plan or engine.

It writes the record every run writes (epochs with losses, accuracies and times; early stopping, time to
accuracy and the best epoch; peak memory), so the map compares pipegnn's pipelines and its sampled
micro-batches with the library's own loop. Written here because no library ships a trainer that writes
such records; the loop itself is DGL's (its sampler, loader and layers). DGL's sampler draws from a
generator per OpenMP thread (``dgl.seed``): a seed repeats a run at one thread count only.

PyG's counterpart (``NeighborLoader``) needs pyg-lib or torch-sparse, which have no wheel for this torch
(docs/engines.md).
"""
from __future__ import annotations

import logging
import math
import time
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from pipegnn.config.choices import FrameworkName, Halo, ModelName
from pipegnn.config.schema import Config
from pipegnn.data import Graph, load_graph
from pipegnn.errors import ConfigError
from pipegnn.measure import timed
from pipegnn.run_record import RunRecord
from pipegnn.training.epochs import EPOCH_LINE, RUN_LOG
from pipegnn.training.run_figures import final_figures, stops
from pipegnn.training.targets import check_splits

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)

log = logging.getLogger(RUN_LOG)

#: Models the loop builds from DGL's layers.
MODELS = (ModelName.gcn, ModelName.gat)


def check_loader(cfg: Config) -> None:
    """What ``engine=dgl_loader`` trains: a GCN or GAT (no residual) with DGL's layers, on the CPU,
    sampled with ``microbatch.fanouts`` into ``chunks`` batches.

    Raises:
        ConfigError: naming the key, its value and what would be valid.
    """
    engine, mb = cfg.engine, cfg.microbatch
    if cfg.framework.name is not FrameworkName.dgl:
        raise ConfigError(f"engine=dgl_loader runs DGL's own loop: framework={cfg.framework.name} is not "
                          "valid; use framework=dgl")
    if cfg.model.name not in MODELS or cfg.model.residual:
        raise ConfigError(f"engine=dgl_loader builds {' and '.join(MODELS)} from DGL's layers: "
                          f"model={cfg.model.name} (residual={cfg.model.residual}) is not valid; use "
                          "model=gcn or model=gat without model.residual")
    if mb.halo is not Halo.sampled or mb.fanouts is None:
        raise ConfigError(f"engine=dgl_loader samples with DGL's NeighborSampler: microbatch.halo={mb.halo} "
                          "is not valid; use microbatch.halo=sampled with microbatch.fanouts")
    if engine.device != "cpu":
        raise ConfigError(f"engine.device={engine.device} is not valid for engine=dgl_loader: the DGL "
                          "installed here is its CPU build; use engine.device=cpu")


class LoopModel(nn.Module):
    """The run's GCN or GAT as DGL's layers: dropout on each layer's input (GAT: on its attention too),
    ReLU (GCN) or ELU (GAT) between layers, GAT's hidden heads concatenated and its output heads
    averaged (pipegnn's models: ``pipegnn.models.gcn``, ``pipegnn.models.gat``).

    GCN's ``GraphConv`` averages over a node's in-neighbours (``norm="right"``): with DGL's default
    ``norm="both"`` a sampled block's degrees are not the graph's, so a model trained on blocks meets
    other weights at the full-graph evaluation (measured on Amazon Computers' dense split, GCN 64,
    fan-outs [10,10], 8 batches, seed 0: validation accuracy 0.58-0.61 after 80 epochs, 0.84-0.86 with
    ``"right"``); pipegnn's sampled halos scale the full graph's weights instead
    (``pipegnn.microbatch.sample``)."""

    def __init__(self, cfg: Config, in_dim: int, classes: int):
        super().__init__()
        from dgl.nn import GATConv, GraphConv

        model, layers = cfg.model, cfg.model.layers
        self.gat, self.dropout = model.name is ModelName.gat, model.dropout
        self.layers = nn.ModuleList()
        dim = in_dim
        for i in range(layers):
            last = i == layers - 1
            if self.gat:
                heads = model.out_heads if last else model.heads
                out = classes if last else model.hidden
                self.layers.append(GATConv(dim, out, heads, feat_drop=0.0, attn_drop=model.dropout))
                dim = out * heads
            else:
                out = classes if last else model.hidden
                self.layers.append(GraphConv(dim, out, norm="right"))
                dim = out

    def forward(self, graphs: list[Any], x: Tensor) -> Tensor:
        """Over each layer's block (training) or the whole graph for every layer (evaluation)."""
        for i, (layer, g) in enumerate(zip(self.layers, graphs)):
            x = layer(g, F.dropout(x, self.dropout, self.training))
            last = i == len(self.layers) - 1
            if self.gat:
                x = x.mean(1) if last else F.elu(x.flatten(1))
            elif not last:
                x = F.relu(x)
        return x


def dgl_loop(cfg: Config, graph: Graph) -> tuple[Any, Any]:
    """The graph (with one self-loop per node) and the loader of DGL's loop: ``DataLoader`` over the
    training nodes in ``chunks`` shuffled batches, each with ``NeighborSampler`` at the run's fan-outs
    (``benchmarks/dgl_loop.py`` times its parts)."""
    import dgl

    g = dgl.add_self_loop(dgl.remove_self_loop(dgl.graph((graph.edge_index[0], graph.edge_index[1]),
                                                         num_nodes=graph.num_nodes)))
    train_nodes = graph.split("train")
    fanouts = list(cfg.microbatch.fanouts or [])
    # DGL's fan-outs are per layer from the input: the reverse of microbatch.fanouts' hop order
    loader = dgl.dataloading.DataLoader(g, train_nodes, dgl.dataloading.NeighborSampler(fanouts[::-1]),
                                        batch_size=math.ceil(train_nodes.numel() / cfg.chunks), shuffle=True,
                                        drop_last=False)
    return g, loader


def train_loader(cfg: Config, record: RunRecord,
                 on_epoch: Callable[[dict[str, Any]], Any] | None = None) -> list[torch.device]:
    """Train ``cfg``'s model with DGL's loop (module docstring), filling ``record``; returns the devices
    it trained on."""
    import dgl

    torch.manual_seed(cfg.train.seed)
    dgl.seed(cfg.train.seed)
    with timed() as loading:
        graph = load_graph(cfg.dataset, cfg.data.root, cfg.data.cache)
    check_splits(cfg, graph)
    g, loader = dgl_loop(cfg, graph)
    assert graph.x is not None  # features in memory
    x, y = graph.x.float(), graph.y
    train_nodes = graph.split("train")
    batch = loader.batch_size
    fanouts = list(cfg.microbatch.fanouts or [])
    model = LoopModel(cfg, x.size(1), graph.num_classes)
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.train.lr, weight_decay=cfg.train.weight_decay)
    record.dataset = {"name": graph.name, "num_nodes": graph.num_nodes, "num_edges": graph.num_edges,
                      "num_features": graph.num_features, "num_classes": graph.num_classes}
    record.model = {"parameters": sum(p.numel() for p in model.parameters()), "layers": "dgl"}
    record.microbatch = {"chunks": len(loader), "halo": "sampled", "fanouts": fanouts, "batch_size": batch,
                         "targets": "train", "loader": "dgl.dataloading.DataLoader", "shuffle": True}
    record.timing.update(setup_s=loading.seconds, load_s=loading.seconds)
    log.info("DGL's loop: %d batches of %d training nodes, fan-outs %s (DGL order %s), %s", len(loader),
             batch, fanouts, fanouts[::-1], model)
    masks = {s: getattr(graph, f"{s}_mask") for s in ("train", "val", "test")}
    epochs = record.epochs
    train_cfg = cfg.train
    for epoch in range(train_cfg.epochs):
        model.train()
        total, drawing = 0.0, 0.0
        with timed() as step:
            batches = iter(loader)
            while True:
                start = time.perf_counter()
                got = next(batches, None)
                drawing += time.perf_counter() - start
                if got is None:
                    break
                input_nodes, output_nodes, blocks = got
                loss = F.cross_entropy(model(blocks, x[input_nodes]), y[output_nodes], reduction="sum")
                optimizer.zero_grad(set_to_none=True)
                (loss / output_nodes.numel()).backward()
                optimizer.step()
                total += float(loss.detach())
        model.eval()
        with timed() as evaluation, torch.no_grad():
            logits = model([g] * len(model.layers), x)
            correct = logits.argmax(1) == y
        acc = {f"{s}_acc": float(correct[m].float().mean()) for s, m in masks.items()}
        val_loss = float(F.cross_entropy(logits[masks["val"]], y[masks["val"]]))
        epochs.append({"epoch": epoch, "train_loss": total / train_nodes.numel(), **acc, "val_loss": val_loss,
                       "epoch_time_s": step.seconds, "eval_time_s": evaluation.seconds, "sample_s": drawing,
                       "ended_at": time.time()})
        if on_epoch is not None:
            on_epoch(epochs[-1])
        log.info("epoch %3d  loss %.4f  train %.3f  val %.3f (loss %.4f)  test %.3f  epoch %.3fs  eval %.3fs",
                 epoch, epochs[-1]["train_loss"], acc["train_acc"], acc["val_acc"], val_loss, acc["test_acc"],
                 step.seconds, evaluation.seconds, extra=EPOCH_LINE)
        if stops(epochs, train_cfg.patience, train_cfg.monitor):
            break
    final_figures(record, train_cfg, timed_from=1)
    return [torch.device("cpu")]
