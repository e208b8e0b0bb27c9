from __future__ import annotations

import torch
from torch import nn


class Projection(nn.Module):
    r"""The paper's projection of passage vectors before the graph layers.

    .. math::
        \mathbf{h}' = \tanh(\mathbf{W}\mathbf{h} + \mathbf{b})

    Args:
        in_channels: size of the encoder's pooled vectors.
        out_channels: size of the node vectors (512 in the paper).

    Shapes:
        input ``[N, in_channels]``, output ``[N, out_channels]``.
    """

    def __init__(self, in_channels: int, out_channels: int) -> None:
        super().__init__()
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.linear = nn.Linear(in_channels, out_channels)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self.linear.reset_parameters()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.linear(x))

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({self.in_channels}, {self.out_channels}, activation=tanh)"
