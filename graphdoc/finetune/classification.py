"""Document classification: labelled documents -> document vectors -> linear head -> cross-entropy.

With ``frozen_encoder`` the passage vectors come from the on-disk cache and only the graph layers and the
head learn (a flat backbone, which has nothing but its encoder, trains the head over fixed vectors); else
everything trains end to end. After every epoch the dev set's accuracy picks the best model, saved in
``OUTPUT/model`` as a :class:`~graphdoc.finetune.classifier.DocumentClassifier`.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from graphdoc.corpus import read_corpus
from graphdoc.corpus.files import has_suffix
from graphdoc.corpus.formats import JSONL_SUFFIXES
from graphdoc.corpus.jsonl import JSON_TYPE_NAMES, iter_json_objects
from graphdoc.documents import Document, lone_surrogate
from graphdoc.errors import GraphDocError, InputError
from graphdoc.finetune.classifier import DocumentClassifier
from graphdoc.finetune.config import ClassificationConfig
from graphdoc.finetune.inputs import GraphInputs
from graphdoc.finetune.loop import EpochLoop, data_fingerprint, seed_everything
from graphdoc.finetune.supcon import supcon_losses
from graphdoc.modes import eval_mode
from graphdoc.outputs import GraphOutput

logger = logging.getLogger(__name__)

SUPCON_NEEDS_LAYERS = ("objective supcon trains layers over sub-documents, and a flat model over a frozen encoder "
                       "has none: use frozen_encoder false (--no-frozen-encoder) or a graph model")


def read_labelled(source: str | Path, split: str, fields=None, label_field: str = "label") -> list[Document]:
    """Documents with a label field (``label_field``, default ``label``); ids become ``split/id`` so splits never
    collide, and the label is the document's ``metadata["label"]`` whatever field held it.

    A label is a string or an integer (``0`` is the class ``"0"``); anything else is refused. ``fields``: the
    record fields of the ids, texts and titles (:class:`graphdoc.corpus.Fields`).
    """
    if not isinstance(label_field, str) or not label_field.strip():
        raise GraphDocError(f"the label field must be a field's name; got {label_field!r}")
    if fields is not None and label_field in fields.named().values():
        raise GraphDocError(f"field {label_field!r} is named for the documents' "
                            f"{next(r for r, n in fields.named().items() if n == label_field)}, not their label")
    docs = []
    for doc in read_corpus(source, fields=fields):
        label = doc.metadata.get(label_field)
        problem = label_problem(label, label_field)
        if problem and label_field == "label" and "label" not in doc.metadata:  # (the field, not its value)
            problem += " field (a label field of another name: label_field, --label-field)"
        if problem:
            raise InputError(f"{_where(source, doc.id, fields)}: document {doc.id!r} {problem}")
        metadata = doc.metadata if label_field == "label" else {**doc.metadata, "label": label}
        docs.append(dataclasses.replace(doc, id=f"{split}/{doc.id}", metadata=metadata))
    if not docs:
        raise GraphDocError(f"{source} holds no labelled document")
    return docs


def label_problem(label, field: str = "label") -> str | None:
    """Why ``label`` (the record's ``field``) cannot be a class label (``None`` when it can: a non-empty string or
    an integer)."""
    if label is None or (isinstance(label, str) and not label.strip()):
        return f"has no {field!r}"
    if isinstance(label, str):
        surrogate = lone_surrogate(label)
        return f"has a {field!r} that is not valid Unicode (lone surrogate {surrogate})" if surrogate else None
    if isinstance(label, int) and not isinstance(label, bool):
        return None
    if isinstance(label, float):  # pandas writes a whole-number column holding a null as floats: 1.0
        hint = f" (write {int(label)}, not {label!r})" if label.is_integer() else ""
        return f"has a {field!r} that is a JSON float (2.0, 1e3); a label is a string or an integer{hint}"
    kind = {**JSON_TYPE_NAMES, dict: "an object"}.get(type(label), type(label).__name__)
    return f"has a {field!r} that is {kind}; a label is a string or an integer"


def _where(source: str | Path, doc_id: str, fields=None) -> str:
    """``source:line`` of the JSON lines record or CSV/TSV row of ``doc_id`` (found again, on the error path
    only), else ``source``."""
    from graphdoc.corpus.table import TABLE_SUFFIXES, table_documents

    path = Path(source)
    try:
        if path.is_file() and has_suffix(path, *JSONL_SUFFIXES):
            for lineno, record in iter_json_objects(path):
                if Document.from_dict(record, fields=fields).id == doc_id:
                    return f"{source}:{lineno}"
        elif path.is_file() and has_suffix(path, *TABLE_SUFFIXES):
            for lineno, doc in table_documents(path, warn=False, fields=fields):  # (its warning was given on the first read)
                if doc.id == doc_id:
                    return f"{source}:{lineno}"
    except GraphDocError:  # the reader took the file: no error before the document's line
        pass
    return str(source)


def labels_of(docs: Sequence[Document]) -> list[str]:
    return [str(d.metadata["label"]) for d in docs]


def accuracy(gold: Sequence[str], predicted: Sequence[str]) -> float:
    return float(np.mean([g == p for g, p in zip(gold, predicted)])) if gold else 0.0


def macro_f1(gold: Sequence[str], predicted: Sequence[str]) -> float:
    """The unweighted mean of the per-class F1 over the classes of ``gold`` and ``predicted``."""
    scores = []
    for label in sorted(set(gold) | set(predicted)):
        tp = sum(g == p == label for g, p in zip(gold, predicted))
        fp = sum(p == label != g for g, p in zip(gold, predicted))
        fn = sum(g == label != p for g, p in zip(gold, predicted))
        scores.append(2 * tp / (2 * tp + fp + fn) if tp else 0.0)
    return float(np.mean(scores)) if scores else 0.0


class FixedFeatures:
    """Document vectors ``[d]`` by id, computed once (a frozen model with nothing left to train)."""

    def __init__(self, model, vectors: dict[str, torch.Tensor]) -> None:
        self.model, self.vectors = model, vectors

    @classmethod
    def compute(cls, model, documents: Sequence[Document], cache, max_passages: int | None) -> FixedFeatures:
        """Through the cache when the model embeds passage vectors (graph backbone), else the model's own
        inference pass (:meth:`iter_forward`), each document cut to ``max_passages`` passages either way."""
        if cache is not None and hasattr(model, "forward_passage_vectors"):
            graphs = GraphInputs(model, cache)
            graphs.add_documents(documents, max_passages)
            vectors = graphs.embed_all([d.id for d in documents]).document_embeddings  # [n, d]
        else:  # the passage cap as for training and predict (a mean-pooling flat model reads the passages)
            vectors = torch.cat([out.document_embeddings.float().cpu() for out in model.iter_forward(
                list(documents), max_passages=max_passages, document_only=True)]
                or [torch.zeros(0, model.dimension)])  # [n, d]
        return cls(model, {d.id: v for d, v in zip(documents, vectors)})

    def embed(self, keys: Sequence[str]) -> GraphOutput:
        vectors = torch.stack([self.vectors[k] for k in keys]).to(self.model.device)  # [B, d]
        return GraphOutput([], vectors, vectors, torch.arange(len(keys) + 1))


@dataclass
class LabelledInputs:
    """Every labelled document, held ready (``inputs``), and the label of each id."""

    inputs: GraphInputs | FixedFeatures
    labels: dict[str, str]
    max_passages: int | None = None  # the passage cap the documents were prepared with

    def set_model(self, model) -> None:
        self.inputs.model = model


def prepare_inputs(encoder, documents: Sequence[Document], cache, max_passages: int) -> LabelledInputs:
    """Graphs of ``documents`` (cached passage vectors when ``cache``), or fixed vectors for a frozen flat model."""
    trainable = any(p.requires_grad for n, p in encoder.named_parameters() if not n.startswith("passage_encoder."))
    if cache is not None and not trainable:
        inputs = FixedFeatures.compute(encoder, documents, cache, max_passages)
    else:
        inputs = GraphInputs(encoder, cache)
        inputs.add_documents(documents, max_passages)
    return LabelledInputs(inputs, {d.id: str(d.metadata["label"]) for d in documents}, max_passages)


@torch.inference_mode()
def evaluate_classifier(classifier: DocumentClassifier, data: LabelledInputs, keys: Sequence[str],
                        batch_size: int = 64) -> dict[str, float]:
    """Accuracy and macro-F1 of ``classifier`` on the documents ``keys``."""
    predicted = []
    with eval_mode(classifier):
        for start in range(0, len(keys), batch_size):
            vectors = data.inputs.embed(keys[start:start + batch_size]).document_embeddings
            predicted += [classifier.labels[i] for i in classifier.logits(vectors).argmax(-1).tolist()]
    gold = [data.labels[k] for k in keys]
    return {"accuracy": accuracy(gold, predicted), "macro_f1": macro_f1(gold, predicted)}


class ClassificationTrainer:
    """Fine-tunes ``classifier`` on ``train_keys`` of ``data``; picks the best epoch on ``dev_keys``."""

    def __init__(self, classifier: DocumentClassifier, config: ClassificationConfig, data: LabelledInputs,
                 train_keys: Sequence[str], output: Path, dev_keys: Sequence[str] | None = None,
                 show_progress_bar: bool | None = None) -> None:
        self.classifier, self.cfg, self.data, self.output = classifier, config, data, Path(output)
        self.train_keys, self.dev_keys = list(train_keys), list(dev_keys or [])
        unknown = sorted({data.labels[k] for k in self.train_keys} - set(classifier.labels))
        if unknown:
            raise GraphDocError(f"training label {unknown[0]!r} is not one of the classifier's labels")
        if config.objective == "supcon" and isinstance(data.inputs, FixedFeatures):
            raise GraphDocError(SUPCON_NEEDS_LAYERS)
        data.set_model(classifier.encoder)
        # saved with the classifier: predict then keeps the passage cap the dev score was measured with
        classifier.max_passages = data.max_passages if data.max_passages is not None else config.max_passages
        self.index = {label: i for i, label in enumerate(classifier.labels)}
        self.terms: list[tuple[float, float]] = []  # this epoch's (supcon, probe) losses
        self.steps_per_epoch = -(-len(self.train_keys) // config.batch_size)
        seed_everything(config.seed)
        head = [p for p in classifier.head.parameters()]
        body = [p for p in classifier.encoder.parameters() if p.requires_grad]
        groups = [{"params": head, "lr": config.head_lr, "weight_decay": 0.0}]
        if body:
            groups.append({"params": body, "lr": config.lr, "weight_decay": config.weight_decay})
        fingerprint = data_fingerprint({"train": [[k, data.labels[k]] for k in self.train_keys],
                                        "dev": [[k, data.labels[k]] for k in self.dev_keys],
                                        "labels": list(classifier.labels)})
        self.loop = EpochLoop(classifier, config, self.output, config.epochs * self.steps_per_epoch, groups,
                              clip_per_group=config.objective == "supcon", data=fingerprint,
                              show_progress_bar=show_progress_bar)

    def train(self, resume: bool = False) -> dict:
        self.loop.start_or_resume(resume)
        frozen = isinstance(self.data.inputs, FixedFeatures) or getattr(self.data.inputs, "cache", None) is not None
        try:
            while self.loop.state["epoch"] < self.cfg.epochs:
                epoch = self.loop.state["epoch"]
                self.classifier.train()
                if frozen:
                    self.classifier.encoder.passage_encoder.eval()
                order = np.random.default_rng([self.cfg.seed, epoch]).permutation(len(self.train_keys))
                bs, self.terms = self.cfg.batch_size, []
                losses = [self.loop.step(self._loss(order[b * bs:(b + 1) * bs].tolist(), epoch))
                          for b in range(self.steps_per_epoch)]
                dev = evaluate_classifier(self.classifier, self.data, self.dev_keys) if self.dev_keys else {}
                shown = f"accuracy {dev['accuracy']:.4f}, macro-F1 {dev['macro_f1']:.4f}" if dev else "-"
                logger.info("epoch %d/%d: loss %.4f, dev %s", epoch + 1, self.cfg.epochs, np.mean(losses), shown)
                terms = dict(zip(("supcon", "probe"), np.mean(self.terms, axis=0).tolist())) if self.terms else {}
                if self.loop.keeps(dev.get("accuracy")):
                    self.classifier.save_pretrained(self.output / "model")
                self.loop.end_epoch({"loss": float(np.mean(losses)), **terms, **dev}, dev.get("accuracy"))
        finally:
            self.loop.close_bar()
        return self.loop.summary({"train": len(self.train_keys), "dev": len(self.dev_keys),
                                  "model_dir": str(self.output / "model")})

    def _loss(self, positions: list[int], epoch: int) -> torch.Tensor:
        """The loss of the training documents at ``positions`` (``supcon``: contrastive + probe)."""
        keys = [self.train_keys[i] for i in positions]
        targets = torch.tensor([self.index[self.data.labels[k]] for k in keys], device=self.classifier.device)
        if self.cfg.objective == "supcon":
            contrastive, probe = supcon_losses(self.data.inputs, self.classifier.logits, keys, targets, positions,
                                               self.cfg, epoch)
            self.terms.append((float(contrastive.detach()), float(probe.detach())))
            return contrastive + probe
        vectors = self.data.inputs.embed(keys).document_embeddings  # [B, d]
        return F.cross_entropy(self.classifier.logits(vectors), targets)
