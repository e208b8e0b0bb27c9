"""The neural modules on a four-node hand-built graph, pooling, projection and token-budget batching."""

from __future__ import annotations

import warnings

import pytest  # noqa: E402
import torch  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from torch_geometric.utils import scatter, to_torch_coo_tensor, to_torch_csr_tensor  # noqa: E402

from graphdoc.batching import token_budget_batches  # noqa: E402
from graphdoc.models import DocumentGraphEncoder, Projection, ResidualGATLayer  # noqa: E402
from graphdoc.models.passage_encoder import pool  # noqa: E402

CHANNELS = 8
# an asymmetric four-node graph, as in PyG's own tests: edges j -> i
EDGE_INDEX = torch.tensor([[0, 1, 2, 3], [0, 0, 1, 1]])



@pytest.fixture
def x() -> torch.Tensor:
    return torch.randn(4, CHANNELS, generator=torch.Generator().manual_seed(0))


def randomise_out(layer: ResidualGATLayer) -> None:
    with torch.no_grad():
        layer.out.weight.normal_(generator=torch.Generator().manual_seed(1))
        layer.out.bias.normal_(generator=torch.Generator().manual_seed(2))


# ------------------------------------------------------------------ ResidualGATLayer
def test_untrained_layer_is_exactly_the_identity(x: torch.Tensor) -> None:
    layer = ResidualGATLayer(CHANNELS, heads=2)
    for mode in (layer.train, layer.eval):
        mode()
        out = layer(x, EDGE_INDEX)
        assert out.shape == (4, CHANNELS)
        assert torch.equal(out, x)


def test_trained_layer_changes_the_nodes(x: torch.Tensor) -> None:
    layer = ResidualGATLayer(CHANNELS, heads=2).eval()
    randomise_out(layer)
    out = layer(x, EDGE_INDEX)
    assert out.shape == (4, CHANNELS)
    assert not torch.allclose(out, x)
    layer.reset_parameters()
    assert torch.equal(layer(x, EDGE_INDEX), x)


@pytest.mark.parametrize("heads", [1, 2, 4])
def test_attention_weights_sum_to_one_per_target_and_head(x: torch.Tensor, heads: int) -> None:
    layer = ResidualGATLayer(CHANNELS, heads=heads).eval()
    out, (att_index, alpha) = layer(x, EDGE_INDEX, return_attention_weights=True)
    assert torch.equal(out, x)
    # the three edges between distinct nodes plus one self-loop per node (the given (0, 0) is replaced)
    assert sorted(map(tuple, att_index.t().tolist())) == [(0, 0), (1, 0), (1, 1), (2, 1), (2, 2), (3, 1), (3, 3)]
    assert alpha.shape == (7, heads)
    sums = scatter(alpha, att_index[1], dim=0, dim_size=4, reduce="sum")
    assert torch.allclose(sums, torch.ones(4, heads), atol=1e-6)
    assert (alpha >= 0).all()


def test_sparse_adjacency_gives_the_same_output(x: torch.Tensor) -> None:
    layer = ResidualGATLayer(CHANNELS, heads=2).eval()
    randomise_out(layer)
    expected = layer(x, EDGE_INDEX)
    # PyG's sparse convention is the transposed adjacency: row = target, column = source
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch: "sparse CSR support is in beta"
        for to_sparse in (to_torch_csr_tensor, to_torch_coo_tensor):
            adj_t = to_sparse(EDGE_INDEX.flip(0), size=(4, 4))
            assert torch.allclose(layer(x, adj_t), expected, atol=1e-6)


def test_heads_must_divide_the_channels() -> None:
    with pytest.raises(ValueError, match="node size 10 is not divisible by 4 attention heads"):
        ResidualGATLayer(10, heads=4)


def test_layer_repr() -> None:
    assert repr(ResidualGATLayer(16, heads=4, dropout=0.2, attention_dropout=0.0)) == \
        "ResidualGATLayer(16, heads=4, dropout=0.2, attention_dropout=0.0)"


def test_layer_trains_from_zero() -> None:
    """Gradients reach the zero-initialised output projection, so training can move away from identity."""
    layer = ResidualGATLayer(CHANNELS, heads=2, dropout=0.0, attention_dropout=0.0)
    x = torch.randn(4, CHANNELS, generator=torch.Generator().manual_seed(3))
    layer(x, EDGE_INDEX).pow(2).sum().backward()
    assert layer.out.weight.grad is not None and layer.out.weight.grad.abs().sum() > 0


# ------------------------------------------------------------------ DocumentGraphEncoder
def test_graph_encoder_untrained_is_identity_and_returns_one_attention_per_layer(x: torch.Tensor) -> None:
    encoder = DocumentGraphEncoder(CHANNELS, num_layers=3, heads=2).eval()
    out, attention = encoder(x, EDGE_INDEX, return_attention_weights=True)
    assert torch.equal(out, x)
    assert len(attention) == 3
    assert all(a.shape == (2, 7) and w.shape == (7, 2) for a, w in attention)
    assert torch.equal(encoder(x, EDGE_INDEX), x)


def test_graph_encoder_with_trained_layers_changes_the_nodes(x: torch.Tensor) -> None:
    encoder = DocumentGraphEncoder(CHANNELS, num_layers=2, heads=2).eval()
    randomise_out(encoder.layers[1])
    out = encoder(x, EDGE_INDEX)
    assert out.shape == (4, CHANNELS)
    assert not torch.allclose(out, x)


def test_graph_encoder_with_no_layers_passes_through(x: torch.Tensor) -> None:
    encoder = DocumentGraphEncoder(CHANNELS, num_layers=0)
    assert len(encoder.layers) == 0
    assert encoder(x, EDGE_INDEX, return_attention_weights=True)[1] == []
    assert torch.equal(encoder(x, EDGE_INDEX), x)


def test_graph_encoder_repr() -> None:
    assert repr(DocumentGraphEncoder(32, num_layers=2, heads=4)) == "DocumentGraphEncoder(32, num_layers=2, heads=4)"


# ------------------------------------------------------------------ Projection
def test_projection_shape_and_tanh_range() -> None:
    projection = Projection(6, 3)
    with torch.no_grad():
        projection.linear.weight.mul_(100.0)  # push outputs towards saturation
    x = torch.randn(5, 6, generator=torch.Generator().manual_seed(0))
    out = projection(x)
    assert out.shape == (5, 3)
    assert (out.abs() <= 1).all()
    assert (out.abs() > 0.99).any()  # saturated, yet within the range
    assert torch.allclose(out, torch.tanh(x @ projection.linear.weight.T + projection.linear.bias))
    assert repr(projection) == "Projection(6, 3, activation=tanh)"


# ------------------------------------------------------------------ pooling
HIDDEN = torch.tensor([[[1.0, -2.0], [3.0, 4.0], [100.0, 100.0]],
                       [[-1.0, 0.0], [5.0, -6.0], [0.0, 2.0]]])  # [B=2, L=3, H=2]
MASK = torch.tensor([[1, 1, 0], [1, 1, 1]])  # the first row's last token is padding


@pytest.mark.parametrize("mode, expected", [
    ("cls", [[1.0, -2.0], [-1.0, 0.0]]),
    ("mean", [[2.0, 1.0], [4 / 3, -4 / 3]]),
    ("max", [[3.0, 4.0], [5.0, 2.0]]),
])
def test_pooling_ignores_padding(mode: str, expected: list[list[float]]) -> None:
    assert torch.allclose(pool(HIDDEN, MASK, mode), torch.tensor(expected))


def test_unknown_pooling_names_the_valid_ones() -> None:
    with pytest.raises(ValueError, match="unknown pooling 'sum'; valid: cls, mean, max"):
        pool(HIDDEN, MASK, "sum")


# ------------------------------------------------------------------ token-budget batching
def test_token_budget_batches_exact() -> None:
    # longest first; 2 x 5 = 10 fits a budget of 10, adding a third would not
    assert token_budget_batches([3, 5, 1, 5, 2], max_tokens=10) == [[1, 3], [0, 4, 2]]
    assert token_budget_batches([3, 5, 1, 5, 2], max_tokens=10, max_batch_size=1) == [[1], [3], [0], [4], [2]]
    assert token_budget_batches([50, 1], max_tokens=10) == [[0], [1]]  # too long for the budget: alone
    assert token_budget_batches([], max_tokens=10) == []


@settings(max_examples=200, deadline=None, database=None)
@given(lengths=st.lists(st.integers(0, 40), max_size=60), max_tokens=st.integers(1, 200),
       max_batch_size=st.one_of(st.none(), st.integers(1, 8)))
def test_token_budget_batches_properties(lengths: list[int], max_tokens: int, max_batch_size: int | None) -> None:
    batches = token_budget_batches(lengths, max_tokens, max_batch_size)
    order = [i for batch in batches for i in batch]
    assert sorted(order) == list(range(len(lengths)))  # every index exactly once
    assert [lengths[i] for i in order] == sorted(lengths, reverse=True)  # longest first
    for batch in batches:
        assert batch
        if max_batch_size is not None:
            assert len(batch) <= max_batch_size
        if len(batch) > 1:  # only a single over-long sequence may exceed the budget
            assert len(batch) * max(max(lengths[i] for i in batch), 1) <= max_tokens
