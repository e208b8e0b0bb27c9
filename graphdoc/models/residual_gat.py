from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch_geometric.nn import GATConv


class ResidualGATLayer(nn.Module):
    r"""A graph attention layer on a residual branch whose output projection starts at zero.

    .. math::
        \mathbf{x}'_i = \mathbf{x}_i + \mathbf{W}_o\,\mathrm{dropout}\big(\mathrm{ELU}(
            \Vert_{h=1}^{H} \textstyle\sum_{j \in \mathcal{N}(i) \cup \{i\}} \alpha^h_{ij}
            \mathbf{\Theta}^h \mathbf{x}_j)\big)

    with the :class:`~torch_geometric.nn.conv.GATConv` attention :math:`\alpha^h_{ij}` of ``heads``
    heads concatenated. :math:`\mathbf{W}_o` and its bias are initialised to zero, so an untrained
    layer is the identity: training starts from the passage encoder's own vectors.

    Args:
        channels: node vector size (must be divisible by ``heads``).
        heads: attention heads.
        dropout: dropout on the residual branch.
        attention_dropout: dropout on the attention coefficients.

    Shapes:
        input ``x: [N, channels]``, ``edge_index: [2, E]``; output ``[N, channels]`` and, with
        ``return_attention_weights=True``, ``(edge_index [2, E + N], alpha [E + N, heads])``
        including the self-loops the layer adds.
    """

    def __init__(self, channels: int, heads: int = 2, dropout: float = 0.1,
                 attention_dropout: float = 0.1) -> None:
        super().__init__()
        if channels % heads:
            raise ValueError(f"node size {channels} is not divisible by {heads} attention heads")
        self.channels = channels
        self.heads = heads
        self.dropout = dropout
        self.attention_dropout = attention_dropout
        self.conv = GATConv(channels, channels // heads, heads=heads, concat=True,
                            dropout=attention_dropout, add_self_loops=True)
        self.out = nn.Linear(channels, channels)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self.conv.reset_parameters()
        nn.init.zeros_(self.out.weight)
        nn.init.zeros_(self.out.bias)

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor,
                return_attention_weights: bool = False):
        if return_attention_weights:
            h, (att_index, alpha) = self.conv(x, edge_index, return_attention_weights=True)
        else:
            h = self.conv(x, edge_index)
        h = F.dropout(F.elu(h), p=self.dropout, training=self.training)
        out = x + self.out(h)
        if return_attention_weights:
            return out, (att_index, alpha)
        return out

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}({self.channels}, heads={self.heads}, "
                f"dropout={self.dropout}, attention_dropout={self.attention_dropout})")
