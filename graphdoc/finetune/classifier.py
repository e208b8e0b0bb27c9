"""DocumentClassifier: a graphdoc encoder (graph or flat backbone) and a linear head on its document vector.

Saved as a folder::

    DIR/encoder/             the encoder, as its save_pretrained writes it
    DIR/head.safetensors     the head's weights
    DIR/head_config.json     {"in_channels", "num_classes", "dropout", "max_passages"}
    DIR/labels.json          the label of each output, in order

``max_passages`` is the passage cap the classifier was trained and scored with; :meth:`predict_proba` keeps it
unless told otherwise, so predictions reproduce the dev score. A folder saved before it was recorded has
none (``None``: the encoder's own chunker cap).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import nn

from graphdoc.config import check_count
from graphdoc.documents import Document, as_document
from graphdoc.errors import GraphDocError, ModelLoadError
from graphdoc.fileio import atomic_directory, check_finite, check_replaceable
from graphdoc.models.classification_head import ClassificationHead
from graphdoc.modes import eval_mode

ENCODER_DIR, HEAD_WEIGHTS, HEAD_CONFIG, LABELS = "encoder", "head.safetensors", "head_config.json", "labels.json"


class DocumentClassifier(nn.Module):
    """``head(encoder(document))``: class logits ``[B, num_classes]`` for ``B`` documents."""

    def __init__(self, encoder: nn.Module, labels: Sequence[str], dropout: float = 0.0,
                 max_passages: int | None = None) -> None:
        super().__init__()
        if len(labels) < 2 or len(set(labels)) != len(labels):
            raise GraphDocError(f"a classifier needs two or more distinct labels; got {list(labels)}")
        if max_passages is not None and not _positive_int(max_passages):
            raise GraphDocError(f"max_passages must be a positive integer or None; got {max_passages!r}")
        self.encoder = encoder
        self.labels = [str(label) for label in labels]
        self.max_passages = max_passages  # the passage cap of training (None: the encoder's chunker cap)
        self.head = ClassificationHead(encoder.dimension, len(labels), dropout).to(encoder.device)

    @property
    def device(self) -> torch.device:
        return self.encoder.device

    def logits(self, document_vectors: torch.Tensor) -> torch.Tensor:
        """Shapes: ``[B, d]`` -> ``[B, num_classes]``."""
        return self.head(document_vectors)

    @torch.inference_mode()
    def predict_proba(self, documents, batch_size: int = 32, max_passages: int | None = None,
                      show_progress_bar: bool = False) -> torch.Tensor:
        """Class probabilities ``[n, num_classes]`` of documents (strings, dicts or Documents); a single document
        gives ``[num_classes]``, as :meth:`GraphDocEncoder.encode` gives one vector.

        ``max_passages``: passages kept per document (``None``: :attr:`max_passages`, the training cap).
        """
        check_count("batch_size", batch_size)
        if max_passages is not None and not _positive_int(max_passages):
            raise GraphDocError(f"max_passages must be a positive integer or None; got {max_passages!r}")
        single = isinstance(documents, (str, Document, Mapping))
        if single:
            return self.predict_proba([documents], batch_size, max_passages)[0]
        if documents is None or isinstance(documents, (bytes, bytearray)) or not isinstance(documents, Iterable):
            raise TypeError(f"documents must be a str, a dict, a Document or an iterable of them; got "
                            f"{type(documents).__name__}")
        documents = list(documents)
        max_passages = max_passages if max_passages is not None else self.max_passages
        from graphdoc.progress import progress_bar

        with eval_mode(self), progress_bar(total=len(documents), desc="Predicting", unit="doc",
                                           disable=not show_progress_bar) as bar:
            out = []
            for start in range(0, len(documents), batch_size):
                chunk = [as_document(d, start + i) for i, d in enumerate(documents[start:start + batch_size])]
                vectors = self.encoder([self.encoder.prepare(d, max_passages) for d in chunk]).document_embeddings
                out.append(torch.softmax(self.logits(vectors).float(), dim=-1).cpu())
                bar.update(len(chunk))
        return torch.cat(out) if out else torch.zeros((0, len(self.labels)))

    @staticmethod
    def check_save_target(path: str | Path) -> None:
        """Refuse, in one line, a ``path`` that :meth:`save_pretrained` would not replace (a folder of other
        files), before a run that ends by saving there."""
        check_replaceable(path, lambda p: (p / HEAD_WEIGHTS).is_file(), "a saved classifier",
                          (ENCODER_DIR, HEAD_WEIGHTS, HEAD_CONFIG, LABELS))

    def save_pretrained(self, path: str | Path, *, shown_as: str | Path | None = None) -> None:
        """Write the classifier folder atomically; ``path`` must be new, empty or an earlier classifier
        (``shown_as``: the folder its encoder's model card names, as :meth:`GraphDocEncoder.save_pretrained`)."""
        self.check_save_target(path)
        with atomic_directory(path) as tmp:
            self.encoder.save_pretrained(tmp / ENCODER_DIR, shown_as=Path(shown_as or path) / ENCODER_DIR)
            save_file({k: v.detach().cpu().contiguous() for k, v in self.head.state_dict().items()},
                      str(tmp / HEAD_WEIGHTS))
            head = {"in_channels": self.head.in_channels, "num_classes": self.head.num_classes,
                    "dropout": self.head.dropout, "max_passages": self.max_passages}
            (tmp / HEAD_CONFIG).write_text(json.dumps(head, indent=2) + "\n", encoding="utf-8")
            (tmp / LABELS).write_text(json.dumps(self.labels, indent=1) + "\n", encoding="utf-8")

    @classmethod
    def from_pretrained(cls, path: str | Path, device: str | torch.device | None = None) -> DocumentClassifier:
        from graphdoc.backbones import load_model
        from graphdoc.config import read_config_file

        path = Path(path)
        if not path.exists():
            raise GraphDocError(f"no model folder at {path}")
        missing = [name for name in (HEAD_WEIGHTS, LABELS, HEAD_CONFIG) if not (path / name).is_file()]
        if missing:
            raise GraphDocError(f"{path} is not a saved classifier (no {' or '.join(missing)})")
        if not (path / ENCODER_DIR).is_dir():  # not a hub id to look up
            raise ModelLoadError(f"{path} has no {ENCODER_DIR}/ folder (the classifier's encoder)")
        head, labels = read_config_file(path / HEAD_CONFIG), read_config_file(path / LABELS)
        if not isinstance(labels, list) or not all(isinstance(label, str) for label in labels):
            raise ModelLoadError(f"{path / LABELS}: not a JSON list of label strings")
        if not isinstance(head, dict):
            raise ModelLoadError(f"{path / HEAD_CONFIG}: not a JSON object")
        num_classes = head.get("num_classes")
        if num_classes != len(labels):
            raise ModelLoadError(f"{path / LABELS} lists {len(labels)} labels; {path / HEAD_CONFIG} "
                                 f"has num_classes {num_classes!r}")
        try:
            weights = load_file(str(path / HEAD_WEIGHTS))
        except (OSError, SafetensorError) as exc:
            raise ModelLoadError(f"{path / HEAD_WEIGHTS}: unreadable safetensors file ({exc})") from None
        check_finite(weights.items(), path / HEAD_WEIGHTS)
        max_passages = head.get("max_passages")  # absent from folders saved before it was recorded
        if max_passages is not None and not _positive_int(max_passages):
            raise ModelLoadError(f"{path / HEAD_CONFIG}: max_passages must be a positive integer or null; "
                                 f"got {max_passages!r}")
        dropout = head.get("dropout", 0.0)
        if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0 <= dropout < 1:
            raise ModelLoadError(f"{path / HEAD_CONFIG}: dropout must be a number from 0 to below 1; got {dropout!r}")
        model = cls(load_model(str(path / ENCODER_DIR), device=device), labels, dropout, max_passages)
        try:
            model.head.load_state_dict(weights)
        except RuntimeError:
            raise ModelLoadError(f"{path / HEAD_WEIGHTS} does not fit {path / HEAD_CONFIG}: not the weights of a "
                                 f"{model.encoder.dimension} -> {num_classes} head") from None
        return model.to(model.encoder.device)

    def extra_repr(self) -> str:
        return f"labels={len(self.labels)}, max_passages={self.max_passages}"


def _positive_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0
