"""The graph store (pipegnn.data.graph_store): CSC edge files through PyG's GraphStore interface, columns
read by position, damaged files refused; plans, halos and samples built from it equal those built from
edges in memory, and a run with ``data.edges=disk`` trains as one with ``data.edges=memory``."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from pipegnn.data.graph_store import DiskGraphStore, GraphFileError, cached_graph_store, csc
from pipegnn.data.synthetic import DrawnEdges, SyntheticSpec, load_drawn, make_synthetic, save_drawn
from pipegnn.integrity import file_checksum
from pipegnn.microbatch import ComputationGraph, PlanSpec, build_plan, cached_plan
from pipegnn.microbatch.halo import InCSR
from pipegnn.microbatch.sample import NeighbourSampler

from tests.helpers import make_cfg, run_no_dropout

TYPE = ("node", "gcn", "node")


def _graph(n: int = 60, e: int = 500, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    edge_index = torch.randint(n, (2, e), generator=g)
    loops = torch.arange(n).repeat(2, 1)  # self-loops, as a computation graph has
    return torch.cat([edge_index, loops], 1), torch.rand(e + n, generator=g, dtype=torch.float64)


def _store(tmp_path: Path, edge_index: torch.Tensor, weight: torch.Tensor | None, n: int = 60
           ) -> DiskGraphStore:
    store = DiskGraphStore(tmp_path / "edges")
    store.write(TYPE, *csc(edge_index, n, weight), key="k")
    return store


def test_round_trip_through_the_graph_store_interface(tmp_path: Path) -> None:
    edge_index, _ = _graph()
    colptr, row, _ = csc(edge_index, 60)
    store = DiskGraphStore(tmp_path / "edges")
    store.put_edge_index((row, colptr), edge_type=TYPE, layout="csc", size=(60, 60))
    got_row, got_ptr = store.get_edge_index(edge_type=TYPE, layout="csc")
    assert torch.equal(got_row, row) and torch.equal(got_ptr, colptr)
    coo = store.get_edge_index(edge_type=TYPE, layout="coo")
    order = torch.argsort(edge_index[1], stable=True)
    assert torch.equal(torch.stack(coo), edge_index[:, order])
    other = ("node", "gat", "node")  # coo in: grouped by target on writing
    store.put_edge_index(tuple(edge_index), edge_type=other, layout="coo", size=(60, 60))
    assert torch.equal(store.get_edge_index(edge_type=other, layout="csc")[1], colptr)
    assert sorted(a.edge_type for a in store.get_all_edge_attrs()) == sorted([TYPE, other])
    assert all(a.layout.value == "csc" and a.size == (60, 60) for a in store.get_all_edge_attrs())
    assert store.remove_edge_index(edge_type=other, layout="csc")
    assert [a.edge_type for a in store.get_all_edge_attrs()] == [TYPE]
    with pytest.raises(KeyError):
        store.get_edge_index(edge_type=other, layout="csc")


def test_columns_read_the_positions_asked(tmp_path: Path) -> None:
    edge_index, weight = _graph()
    store = _store(tmp_path, edge_index, weight)
    colptr, row, w = store.columns(TYPE)
    memory = InCSR(edge_index, 60, weight)
    disk = InCSR.from_columns(colptr, row, w, "k")
    assert torch.equal(colptr, memory.rowptr)
    pos = torch.randint(row.numel(), (300,), generator=torch.Generator().manual_seed(1))  # duplicates too
    assert w is not None and w.dtype == torch.float64
    for a, b in ((memory.src, disk.src), (memory.dst, disk.dst), (memory.weight, disk.weight)):
        assert b is not None and a is not None and torch.equal(a[pos], b[pos])
    assert row[torch.empty(0, dtype=torch.long)].numel() == 0
    with pytest.raises(IndexError, match="out of range"):
        row[torch.tensor([row.numel()])]
    calls = store.read_calls
    row[torch.arange(10, 400)]  # one run: one read
    assert store.read_calls == calls + 1


@pytest.mark.parametrize("damage", ["flip", "truncate", "foreign", "fifo", "pointers"])
def test_damaged_edge_files_are_never_read(tmp_path: Path, damage: str) -> None:
    edge_index, weight = _graph()
    store = _store(tmp_path, edge_index, weight)
    paths = store.paths(TYPE)
    if damage == "flip":
        data = bytearray(paths["row"].read_bytes())
        data[17] ^= 1
        paths["row"].write_bytes(bytes(data))
    elif damage == "truncate":
        paths["weight"].write_bytes(paths["weight"].read_bytes()[:-8])
    elif damage == "foreign":
        meta = json.loads(paths["meta"].read_text())
        paths["meta"].write_text(json.dumps({**meta, "format": "pickle"}))
    elif damage == "fifo":
        paths["colptr"].unlink()
        os.mkfifo(paths["colptr"])
    else:  # pointers that fall, resealed with a matching checksum: still refused
        colptr = csc(edge_index, 60)[0]
        colptr[5] = colptr[6] + 1
        paths["colptr"].write_bytes(colptr.numpy().tobytes())
        meta = json.loads(paths["meta"].read_text())
        meta["checksum"]["colptr"] = file_checksum(paths["colptr"])
        paths["meta"].write_text(json.dumps(meta))
    fresh = DiskGraphStore(store.folder)
    with pytest.raises(GraphFileError):
        fresh.columns(TYPE)
    assert fresh.read_calls == 0


def test_cached_store_is_reused_and_damaged_one_rebuilt(tmp_path: Path) -> None:
    edge_index, weight = _graph()
    built: list[int] = []

    def build() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        built.append(1)
        return csc(edge_index, 60, weight)

    folder = tmp_path / "edges"
    assert cached_graph_store(folder, TYPE, "k", build)[1] is False
    assert cached_graph_store(folder, TYPE, "k", build)[1] is True and len(built) == 1
    assert cached_graph_store(folder, TYPE, "other", build)[1] is False and len(built) == 2  # foreign key
    path = DiskGraphStore(folder).paths(TYPE)["row"]
    data = bytearray(path.read_bytes())
    data[3] ^= 4
    path.write_bytes(bytes(data))
    store, cached = cached_graph_store(folder, TYPE, "other", build)
    assert not cached and len(built) == 3
    assert torch.equal(store.columns(TYPE)[1][torch.arange(edge_index.size(1))], csc(edge_index, 60)[1])


def _equal_plans(a, b) -> None:  # type: ignore[no-untyped-def]
    assert torch.equal(a.targets, b.targets) and torch.equal(a.part, b.part)
    assert a.stats == b.stats
    for x, y in zip(a.micro_batches, b.micro_batches, strict=True):
        assert torch.equal(x.nodes, y.nodes) and x.sizes == y.sizes and x.sources == y.sources
        for e, f in zip(x.edges, y.edges, strict=True):
            assert torch.equal(e, f)
        for v, w in zip(x.weights, y.weights, strict=True):
            assert (v is None and w is None) or (v is not None and w is not None and torch.equal(v, w))


@pytest.mark.parametrize("halo", ["exact", "historical", "none", "sampled"])
@pytest.mark.parametrize("partitioner", ["metis", "random"])
def test_plans_from_the_store_equal_plans_in_memory(tmp_path: Path, halo: str, partitioner: str) -> None:
    edge_index, weight = _graph()
    store = _store(tmp_path, edge_index, weight)
    disk = ComputationGraph(torch.empty(2, 0, dtype=torch.long), 60,
                            csr=InCSR.from_columns(*store.columns(TYPE), key="k"))
    memory = ComputationGraph(edge_index, 60, weight)
    targets = torch.arange(0, 60, 2)
    spec = PlanSpec(4, 2, halo=halo, partitioner=partitioner, seed=3,
                    fanouts=(2, 3) if halo == "sampled" else None)
    _equal_plans(build_plan(memory, targets, spec), build_plan(disk, targets, spec))
    if halo == "sampled":  # later epochs' draws too
        parts = [t[t.argsort()] for t in torch.arange(0, 60, 2).chunk(4)]
        draws = [NeighbourSampler(csr, parts, [2, 3], 3).draw(5)
                 for csr in (InCSR(edge_index, 60, weight), disk.csr)]
        for x, y in zip(*draws, strict=True):
            assert torch.equal(x.nodes, y.nodes) and all(torch.equal(e, f) for e, f in zip(x.edges, y.edges))
    else:  # cached by the store's key
        plan, cached = cached_plan(tmp_path / "plans", disk, targets, spec)
        assert not cached and cached_plan(tmp_path / "plans", disk, targets, spec)[1]
        _equal_plans(plan, build_plan(memory, targets, spec))


@pytest.mark.parametrize("overrides", [
    ("model=gcn", "microbatch.halo=exact"),
    ("model=gat", "microbatch.halo=sampled", "microbatch.fanouts=[3,3]", "microbatch.partition=random"),
])
def test_run_with_edges_on_disk_trains_as_in_memory(overrides: tuple[str, ...]) -> None:
    common = ("chunks=2", "train.epochs=2", *overrides)
    memory = run_no_dropout(*common, "data.edges=memory")
    disk = run_no_dropout(*common, "data.edges=disk")
    assert memory["status"] == disk["status"] == "completed", disk["error"]
    assert [e["train_loss"] for e in disk["epochs"]] == [e["train_loss"] for e in memory["epochs"]]
    edges = disk["dataset"]["edges"]
    assert edges["storage"] == "disk" and edges["file_bytes"] > 0 and Path(edges["path"]).is_dir()
    assert memory["dataset"]["edges"] == {"storage": "memory"}
    assert disk["dataset"]["num_edges"] == memory["dataset"]["num_edges"] > 0
    again = run_no_dropout(*common, "data.edges=disk")  # its edges are not drawn again
    assert again["dataset"]["edges"]["cached"] is True
    assert again["dataset"]["edges"]["edge_list_loaded"] is False
    assert again["dataset"]["num_edges"] == memory["dataset"]["num_edges"]
    assert [e["train_loss"] for e in again["epochs"]] == [e["train_loss"] for e in memory["epochs"]]


def test_edge_storage_is_checked_before_training(tmp_path: Path) -> None:
    from hydra.errors import ConfigCompositionException

    with pytest.raises(ConfigCompositionException) as info:
        make_cfg("data.edges=ssd")
    assert "Invalid value 'ssd', expected one of [memory, disk]" in str(info.value.__cause__)
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("")
    record = run_no_dropout("data.edges=disk", f"data.cache={blocked}")
    assert record["status"] == "invalid" and "data.edges=disk" in record["error"], record["error"]


def test_a_synthetic_graph_skips_the_edges_drawn_before(tmp_path: Path) -> None:
    spec = SyntheticSpec(num_nodes=300, num_features=12, num_communities=4, train_per_class=5, num_val=20,
                         num_test=30)
    drawn: list[DrawnEdges] = []
    full = make_synthetic(spec, on_edges=drawn.append)
    save_drawn(tmp_path, "k", drawn[0])
    saved = load_drawn(tmp_path, "k")
    assert saved is not None and saved.num_edges == full.edge_index.size(1) > 0
    again = make_synthetic(spec, drawn=saved)  # labels, features and split as if the edges were drawn
    assert again.edge_index.shape == (2, 0)
    for field in ("x", "y", "train_mask", "val_mask", "test_mask"):
        assert torch.equal(getattr(again, field), getattr(full, field)), field
    assert load_drawn(tmp_path, "another spec") is None
    path = tmp_path / "drawn-edges.json"
    state = json.loads(path.read_text())
    digit = "0" if state["state"][40] != "0" else "1"
    state["state"] = state["state"][:40] + digit + state["state"][41:]
    path.write_text(json.dumps(state))
    assert load_drawn(tmp_path, "k") is None  # damaged: the edges are drawn again
