"""MaskedLMHead: a checkpoint's masked-language-model head over a passage encoder it shares, not copies."""

from __future__ import annotations

import logging
from pathlib import Path

import torch
from torch import nn

from graphdoc.errors import GraphDocError, ModelLoadError
from graphdoc.models.passage_encoder import PassageEncoder, full_precision
from graphdoc.progress import no_transformers_bar

logger = logging.getLogger(__name__)


class MaskedLMHead(nn.Module):
    r"""The language-model head of a Hugging Face ``AutoModelForMaskedLM``, reading a :class:`PassageEncoder`'s
    token vectors.

    Only the head is kept (BERT's ``cls``, RoBERTa's and Longformer's ``lm_head``): the token vectors come
    from the passage encoder being trained, and the head's output embeddings *are* that encoder's input
    embeddings when the checkpoint ties them (as BERT and RoBERTa do), so the encoder exists once. The
    head's own weights (transform, layer norm, output bias) are what :meth:`own_state_dict` holds.

    Args:
        head: the head module taken from the masked-LM model.
        output: the head's output layer (``get_output_embeddings()``).
        encoder: the passage encoder whose input embeddings the head's output layer shares.
        tied: share the output embeddings (the checkpoint's ``tie_word_embeddings``).

    Shapes: :meth:`forward`: ``hidden [..., hidden_size]`` -> ``logits [..., vocab_size]``.
    """

    def __init__(self, head: nn.Module, output: nn.Linear, encoder: PassageEncoder, tied: bool) -> None:
        super().__init__()
        self.head = head
        self.tied = tied
        if tied:
            output.weight = encoder.model.get_input_embeddings().weight
        self._shared = {id(p) for p in encoder.parameters()}

    @classmethod
    def load(cls, encoder: PassageEncoder, source: str | Path | None, seed: int = 0) -> "MaskedLMHead":
        """The head of the masked-LM checkpoint ``source`` (``None``: a new head of the encoder's architecture,
        e.g. to load a training checkpoint's head weights into). Missing head weights are initialised from
        ``seed``, so every run starts from the same head."""
        from transformers import AutoModelForMaskedLM

        with torch.random.fork_rng(devices=[]):
            torch.default_generator.manual_seed(seed)
            try:
                if source is None:
                    mlm, missing = AutoModelForMaskedLM.from_config(encoder.model.config), set()
                else:
                    with no_transformers_bar():
                        mlm, info = AutoModelForMaskedLM.from_pretrained(str(source), output_loading_info=True, trust_remote_code=False,
                                                                         use_safetensors=True, **full_precision())
                    missing = set(info["missing_keys"])
            except (OSError, ValueError) as exc:
                raise ModelLoadError(f"cannot load a masked-language-model head for {source or 'the encoder'} "
                                     f"({str(exc).splitlines()[0] if str(exc) else type(exc).__name__}); "
                                     "set pretrain.mlm_weight to 0") from None
        name, head = _head_of(mlm)
        model = cls(head, mlm.get_output_embeddings(), encoder, bool(getattr(mlm.config, "tie_word_embeddings", True)))
        fresh = {k[len(name) + 1:] for k in missing if k.startswith(f"{name}.")}
        if fresh:
            logger.info("%s has no masked-language-model head: the MLM loss trains a freshly initialised one", source)
            with torch.random.fork_rng(devices=[]):
                torch.default_generator.manual_seed(seed)
                model.initialise(fresh, getattr(mlm.config, "initializer_range", 0.02))
        return model.to(next(encoder.parameters()).device)

    def initialise(self, names: set[str], std: float = 0.02) -> None:
        """BERT's initialisation of the head weights ``names`` (a checkpoint without them): linear weights
        ``N(0, std)``, layer norms 1 and 0, biases 0. Done here rather than trusted to transformers, which
        leaves some heads' missing weights uninitialised (Longformer's output bias, in transformers 5)."""
        with torch.no_grad():
            for module_name, module in self.head.named_modules():
                for local, param in module.named_parameters(recurse=False):
                    full = f"{module_name}.{local}" if module_name else local
                    if full not in names or id(param) in self._shared:
                        continue
                    if isinstance(module, nn.LayerNorm):
                        param.fill_(1.0 if local == "weight" else 0.0)
                    elif local == "weight":
                        param.normal_(0.0, std)
                    else:
                        param.zero_()

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.head(hidden)

    def own_parameters(self) -> dict[str, nn.Parameter]:
        """The head's weights that are not the encoder's (the tied output embeddings are left out)."""
        return {n: p for n, p in self.head.named_parameters() if id(p) not in self._shared}

    def own_state_dict(self) -> dict[str, torch.Tensor]:
        return {n: p.detach().cpu().contiguous() for n, p in self.own_parameters().items()}

    def load_own_state_dict(self, tensors: dict[str, torch.Tensor]) -> None:
        own = self.own_parameters()
        if set(tensors) != set(own):
            raise GraphDocError(f"MLM head weights do not match the head: expected {sorted(own)[:3]}, "
                                f"got {sorted(tensors)[:3]}")
        with torch.no_grad():
            for name, value in tensors.items():
                own[name].copy_(value)

    def extra_repr(self) -> str:
        return f"tied={self.tied}, own_parameters={len(self.own_parameters())}"


def _head_of(mlm: nn.Module) -> tuple[str, nn.Module]:
    """The one child of a masked-LM model beside its base model that holds weights: its LM head."""
    base = mlm.base_model_prefix
    heads = [(n, m) for n, m in mlm.named_children() if n != base and any(True for _ in m.parameters())]
    if len(heads) != 1:
        raise GraphDocError(f"{type(mlm).__name__} has no single language-model head module (found "
                            f"{[n for n, _ in heads]}); set pretrain.mlm_weight to 0")
    return heads[0]
