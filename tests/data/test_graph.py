"""pipegnn.data.graph: a graph saved to the cache and loaded back, and the files it refuses."""
from __future__ import annotations

import logging
from pathlib import Path

import torch

from pipegnn.data.graph import GRAPH_FILE, load_saved_graph, save_graph

from tests.helpers import CodeMarker, damage_a_tensor, random_graph, same_graph


def test_saved_graph_round_trip_and_refusals(tmp_path: Path, caplog) -> None:
    g = random_graph()
    path = tmp_path / "c" / GRAPH_FILE
    assert save_graph(g, path)
    back = load_saved_graph(path, "random")
    assert back is not None and same_graph(back, g) and back.num_classes == g.num_classes
    assert load_saved_graph(tmp_path / "none.pt", "random") is None
    assert load_saved_graph(path, "other") is None and "ignoring cached graph" in caplog.text
    marker = tmp_path / "code-ran"
    torch.save(CodeMarker(marker), path)
    assert load_saved_graph(path, "random") is None and not marker.exists()
    blocked = tmp_path / "blocker"
    blocked.write_text("")
    with caplog.at_level(logging.WARNING):
        assert not save_graph(g, blocked / "c" / GRAPH_FILE)
    assert "cannot be written" in caplog.text


def test_a_graph_damaged_in_place_is_not_loaded(tmp_path: Path, caplog) -> None:
    """Bytes of the largest tensor (the features) inverted in place, the file still loadable and every
    shape and dtype right: the content checksum refuses it, with a warning; the loader then rebuilds."""
    path = tmp_path / GRAPH_FILE
    graph = random_graph()
    graph.x = torch.randn(graph.num_nodes, 4 * graph.edge_index.size(1))  # the largest tensor
    assert save_graph(graph, path)
    damage_a_tensor(path)
    assert torch.load(path, weights_only=True)["name"] == "random"
    with caplog.at_level(logging.WARNING):
        assert load_saved_graph(path, "random") is None
    assert "ignoring cached graph" in caplog.text and "content checksum" in caplog.text
