"""Gradient caching gives the gradients of plain backprop, on a tiny encoder end to end."""

from __future__ import annotations

import pytest
import torch

from graphdoc.encoder import GraphDocEncoder
from graphdoc.training.data import SubDocument
from graphdoc.training.grad_cache import chunk_bounds, grad_cache_backward
from graphdoc.training.objectives import symmetric_info_nce

TEXTS = [["graph attention networks read documents", "as graphs of passages"],
         ["the quick brown fox", "jumps over the lazy dog", "a second sentence follows"],
         ["long documents are split", "into passages"],
         ["dense vectors and bm25", "can be fused", "meetings have topics"]]


def test_chunk_bounds_cover_every_item_once():
    assert chunk_bounds([2, 3, 1, 5, 1], 5) == [(0, 2), (2, 3), (3, 4), (4, 5)]
    assert chunk_bounds([9, 1], 4) == [(0, 1), (1, 2)]  # an oversize item goes alone
    assert chunk_bounds([1, 1, 1], 100) == [(0, 3)]
    assert chunk_bounds([], 3) == []


@pytest.fixture(scope="module")
def model(tiny_bert):
    torch.set_num_threads(1)
    return GraphDocEncoder.from_pretrained(tiny_bert, device="cpu")


def subdocs(model):
    """Each document's passages split in two: ``[a_1, b_1, ...]``."""
    out = []
    for passages in TEXTS:
        ids = model.passage_encoder.tokenize(passages)
        half = len(ids) // 2
        out += [SubDocument(ids[:half], [0] * half), SubDocument(ids[half:], [0] * (len(ids) - half))]
    return out


def embed_fn(model):
    def embed(items):
        flat = model.passage_encoder.encode_ids([t for s in items for t in s.token_ids])
        vectors = list(torch.split(flat, [s.num_passages for s in items]))
        return model.forward_passage_vectors(vectors, [s.section_ids for s in items]).document_embeddings
    return embed


def gradients(model):
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def loss_fn(z):
    return symmetric_info_nce(z, "cosine", 0.1)


def perturb_head(model):
    """Non-zero GAT output weights, so gradients reach every weight."""
    with torch.no_grad():
        for layer in model.graph.layers:
            layer.out.weight.normal_(0, 0.1)


def test_grad_cache_equals_plain_backprop(model):
    perturb_head(model)
    model.eval()  # no dropout: one forward over the batch and chunked forwards see the same network
    items = subdocs(model)
    model.zero_grad()
    plain = loss_fn(embed_fn(model)(items))
    plain.backward()
    expected = gradients(model)
    model.zero_grad()
    loss = grad_cache_backward(embed_fn(model), items, [s.num_passages for s in items], 3, loss_fn)
    got = gradients(model)
    assert loss.item() == pytest.approx(plain.item(), rel=1e-5)
    assert set(got) == set(expected) and any(n.startswith("passage_encoder.") for n in got)
    for name in expected:
        # float32 sums in another order (chunks, threads): 1e-6 failed about once in ten full runs
        torch.testing.assert_close(got[name], expected[name], atol=1e-5, rtol=1e-4, msg=name)


def test_grad_cache_replays_dropout(model):
    """With dropout, the re-forward of each chunk reuses the first pass's random state."""
    perturb_head(model)
    model.train()
    items = subdocs(model)
    sizes = [s.num_passages for s in items]
    embed = embed_fn(model)
    torch.manual_seed(1)
    model.zero_grad()
    # reference: the same chunks, in the same order, embedded once with gradients
    z = torch.cat([embed(items[a:b]) for a, b in chunk_bounds(sizes, 3)])
    reference = loss_fn(z)
    reference.backward()
    expected = gradients(model)
    torch.manual_seed(1)
    model.zero_grad()
    loss = grad_cache_backward(embed, items, sizes, 3, loss_fn)
    assert loss.item() == pytest.approx(reference.item(), rel=1e-5)
    for name, grad in gradients(model).items():
        torch.testing.assert_close(grad, expected[name], atol=1e-6, rtol=1e-4, msg=name)
    model.eval()
