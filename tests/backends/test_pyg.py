"""pipegnn.backends.pyg: bf16 messages under autocast with float32 parameters, and the block structure of
each aggregation (a CSR adjacency for sparse, the edges for messages)."""
from __future__ import annotations

import pytest
import torch

from pipegnn.backends import get_backend
from pipegnn.models import LayerSpec

from tests.backends.test_backends import PYG, first_layer_block, outputs


@pytest.mark.parametrize("kind", ["gat", "gcn"])
def test_pyg_bf16_messages_stay_bf16_and_train_float32_parameters(kind: str) -> None:
    """Under bf16 autocast PyG's attention and edge weights are cast with the rows, so the per-edge
    messages and the output are bfloat16 (type promotion would make them float32), while gradients
    reach the float32 parameters and agree with float32's."""
    mb, h = first_layer_block(kind)
    h = h.float()
    mb.weights = [None if w is None else w.float() for w in mb.weights]  # GCN's, as float32 training has them
    conv = PYG.conv(kind, LayerSpec(h.size(1), 4, heads=3 if kind == "gat" else 1, concat=True))
    layer = torch.nn.ModuleList(PYG.split(conv))  # [transform, propagation], as pipegnn runs them
    messages: list[torch.dtype] = []
    layer[1].register_propagate_forward_hook(lambda module, inputs, out: messages.append(out.dtype))
    grads = {}
    for precision in ("fp32", "bf16"):
        layer.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
            out = outputs(PYG, layer[1], mb, layer[0](h.to(torch.bfloat16) if precision == "bf16" else h))
        out.float().square().sum().backward()
        grads[precision] = {name: p.grad.clone() for name, p in layer.named_parameters()}
        assert out.dtype == (torch.bfloat16 if precision == "bf16" else torch.float32)
    assert messages == [torch.float32, torch.bfloat16]
    assert all(p.dtype == torch.float32 for p in layer.parameters())
    for name, grad in grads["bf16"].items():
        assert grad.dtype == torch.float32
        reference = grads["fp32"][name]
        torch.testing.assert_close(grad, reference, rtol=0.05, atol=0.05 * reference.abs().max())


def test_sparse_structure_is_a_csr_adjacency() -> None:
    backend = get_backend("pyg", "sparse")
    edge_index = torch.tensor([[0, 3, 1, 2, 4], [1, 0, 0, 2, 1]])  # (src, dst), dst < 3
    weight = torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0])
    adj = backend.structure(edge_index, weight, 5, 3)
    assert adj.layout == torch.sparse_csr and adj.shape == (3, 5)
    dense = torch.zeros(3, 5)
    dense[edge_index[1], edge_index[0]] = weight
    assert torch.equal(adj.to_dense(), dense)
    messages, w = get_backend("pyg").structure(edge_index, weight, 5, 3)  # the same edges, sized (src, dst)
    assert torch.equal(messages.as_tensor(), edge_index) and messages.sparse_size() == (5, 3) and w is weight


@pytest.mark.parametrize("layer", ["gcn", "gcn2"])
def test_a_square_block_reaches_the_layer_as_a_plain_edge_index(layer: str,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A full-batch block (as many source rows as target rows) goes into GCNConv and GCN2Conv as a plain
    tensor, not PyG's EdgeIndex, whose Python dispatch of every edge operation cost GCNII 64 about 5% of a
    step's host time; the rows are the EdgeIndex path's. A block with halo rows keeps its EdgeIndex,
    which sizes the output to the target rows."""
    from torch_geometric import EdgeIndex
    from torch_geometric.nn import GCN2Conv, GCNConv

    torch.manual_seed(0)
    backend = get_backend("pyg")
    conv = GCNConv(8, 8, normalize=False) if layer == "gcn" else GCN2Conv(8, 0.1, 0.5, 1, normalize=False)
    _, conv = backend.split(conv)
    edge_index = torch.tensor([[0, 1, 2, 3, 4, 4], [1, 0, 2, 1, 0, 2]])
    weight = torch.rand(6)
    h, initial = torch.randn(5, 8), torch.randn(5, 8)
    seen: list[type] = []
    forward = type(conv).forward
    monkeypatch.setattr(type(conv), "forward",
                        lambda self, *a, **k: (seen.append(type(a[-2])), forward(self, *a, **k))[1])
    extra = {} if layer == "gcn" else {"initial": initial}
    square = backend.apply(conv, h, backend.structure(edge_index, weight, 5, 5), **extra)
    halo = backend.apply(conv, h, backend.structure(edge_index, weight, 5, 3), **extra)
    assert seen == [torch.Tensor, EdgeIndex] and square.shape == (5, 8) and halo.shape == (3, 8)
    torch.testing.assert_close(square[:3], halo)
