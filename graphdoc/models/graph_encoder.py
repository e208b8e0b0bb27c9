from __future__ import annotations

import torch
from torch import nn

from graphdoc.models.residual_gat import ResidualGATLayer


class DocumentGraphEncoder(nn.Module):
    r"""``num_layers`` :class:`ResidualGATLayer` layers run over a batch of document graphs.

    Args:
        channels: node vector size.
        num_layers: number of layers (T in the paper; 0 leaves the node vectors unchanged).
        heads, dropout, attention_dropout: as in :class:`ResidualGATLayer`.

    Shapes:
        input ``x: [N, channels]``, ``edge_index: [2, E]``; output ``[N, channels]`` and, with
        ``return_attention_weights=True``, one ``(edge_index, alpha [E', heads])`` pair per layer.
    """

    def __init__(self, channels: int, num_layers: int = 2, heads: int = 2, dropout: float = 0.1,
                 attention_dropout: float = 0.1) -> None:
        super().__init__()
        self.channels = channels
        self.num_layers = num_layers
        self.heads = heads
        self.layers = nn.ModuleList(
            ResidualGATLayer(channels, heads, dropout, attention_dropout) for _ in range(num_layers))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for layer in self.layers:
            layer.reset_parameters()

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor, return_attention_weights: bool = False):
        attentions = []
        for layer in self.layers:
            if return_attention_weights:
                x, att = layer(x, edge_index, return_attention_weights=True)
                attentions.append(att)
            else:
                x = layer(x, edge_index)
        return (x, attentions) if return_attention_weights else x

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({self.channels}, num_layers={self.num_layers}, heads={self.heads})"
