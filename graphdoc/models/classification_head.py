"""ClassificationHead: a linear layer over a document vector."""

from __future__ import annotations

import torch
from torch import nn


class ClassificationHead(nn.Module):
    r"""Class logits from a document vector.

    .. math::
        \mathbf{z} = \mathbf{W}\, \mathrm{dropout}(\mathbf{h}) + \mathbf{b}

    Args:
        in_channels: size of the document vector.
        num_classes: number of labels.
        dropout: dropout on the document vector during training.

    Shapes:
        input ``[B, in_channels]``, output ``[B, num_classes]``.
    """

    def __init__(self, in_channels: int, num_classes: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.in_channels = in_channels
        self.num_classes = num_classes
        self.dropout = dropout
        self.linear = nn.Linear(in_channels, num_classes)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self.linear.reset_parameters()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(nn.functional.dropout(x, self.dropout, self.training))

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({self.in_channels}, {self.num_classes}, dropout={self.dropout})"
