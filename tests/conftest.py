"""Shared fixtures: tiny randomly initialised BERT, RoBERTa and Longformer encoders built offline from configs."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import tempfile  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# hypothesis keeps its example database out of the working tree
os.environ.setdefault("HYPOTHESIS_STORAGE_DIRECTORY", os.path.join(tempfile.gettempdir(), "graphdoc-hypothesis"))

import pytest  # noqa: E402
import torch  # noqa: E402

DATA_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "data"

TRAINING_TEXT = [
    "Graph attention networks read documents as graphs of passages.",
    "The quick brown fox jumps over the lazy dog. A second sentence follows here!",
    "Long documents are split into passages of about one hundred words on sentence boundaries.",
    "Retrieval with dense vectors and BM25 can be fused. Meetings have topics and sections.",
    "Café naïve über résumé: unicode text is text too. Numbers 1 2 3 4 5 6 7 8 9 10.",
] * 20


def _tiny_tokenizer(kind: str):
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    if kind == "bert":
        # the vocabulary is built, not trained: WordPiece training breaks ties in hash-map order, which made
        # the tiny BERT (and every score computed with it) differ from one test session to the next
        normalizer, pre_tokenizer = normalizers.BertNormalizer(lowercase=True), pre_tokenizers.BertPreTokenizer()
        words = {w for text in TRAINING_TEXT for w, _ in pre_tokenizer.pre_tokenize_str(normalizer.normalize_str(text))}
        chars = sorted({c for w in words for c in w})
        # whole words, plus word starts and 2- to 3-letter word parts, as trained subwords would split other words
        starts = {w[:n] for w in words for n in range(2, len(w))}
        parts = {f"##{w[i:i + n]}" for w in words for n in (2, 3) for i in range(1, len(w) - n + 1)}
        pieces = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *chars, *(f"##{c}" for c in chars),
                  *sorted((words | starts) - set(chars)), *sorted(parts)]
        tok = Tokenizer(models.WordPiece({piece: i for i, piece in enumerate(pieces)}, unk_token="[UNK]"))
        tok.normalizer, tok.pre_tokenizer = normalizer, pre_tokenizer
        tok.post_processor = processors.TemplateProcessing(
            single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B [SEP]",
            special_tokens=[("[CLS]", tok.token_to_id("[CLS]")), ("[SEP]", tok.token_to_id("[SEP]"))])
        tok.decoder = decoders.WordPiece()
        return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]",
                                       cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]",
                                       model_max_length=64)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    special = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    tok.train_from_iterator(TRAINING_TEXT, trainers.BpeTrainer(vocab_size=400, special_tokens=special,
                                                               initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.post_processor = processors.RobertaProcessing(("</s>", tok.token_to_id("</s>")), ("<s>", tok.token_to_id("<s>")))
    tok.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                                   pad_token="<pad>", cls_token="<s>", sep_token="</s>", mask_token="<mask>",
                                   model_max_length=64)


def build_tiny_model(folder: Path, kind: str = "bert", initializer_range: float = 0.02) -> Path:
    """Save a tiny randomly initialised encoder and its tokenizer into ``folder``."""
    from transformers import BertConfig, BertModel, RobertaConfig, RobertaModel

    torch.manual_seed(0)
    tokenizer = _tiny_tokenizer(kind)
    common = dict(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                  intermediate_size=64, initializer_range=initializer_range)
    if kind == "bert":
        model = BertModel(BertConfig(max_position_embeddings=64, **common))
    else:
        model = RobertaModel(RobertaConfig(max_position_embeddings=66, pad_token_id=tokenizer.pad_token_id,
                                           bos_token_id=0, eos_token_id=2, **common))
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session", autouse=True)
def _one_torch_thread():
    """Tiny models gain nothing from threads; on a busy 2-core machine spin-waits make them far slower."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def tiny_bert(tmp_path_factory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny-bert"), "bert")


@pytest.fixture(scope="session")
def spread_bert(tmp_path_factory) -> Path:
    """tiny_bert's architecture with a wider initialisation: at 0.02 its mean-pooled vectors of any two
    texts have cosine 0.99999, which no head can separate in a few steps."""
    return build_tiny_model(tmp_path_factory.mktemp("spread-bert"), "bert", initializer_range=0.3)


@pytest.fixture(scope="session")
def tiny_roberta(tmp_path_factory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny-roberta"), "roberta")


@pytest.fixture(scope="session")
def tiny_longformer(tiny_roberta: Path, tmp_path_factory) -> Path:
    """A tiny random Longformer (4-token attention window) with the tiny RoBERTa tokenizer."""
    from transformers import AutoTokenizer, LongformerConfig, LongformerModel

    folder = tmp_path_factory.mktemp("tiny-longformer")
    tokenizer = AutoTokenizer.from_pretrained(tiny_roberta)
    torch.manual_seed(0)
    config = LongformerConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                              intermediate_size=64, attention_window=4, max_position_embeddings=66,
                              pad_token_id=tokenizer.pad_token_id, bos_token_id=0, eos_token_id=2)
    LongformerModel(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture
def data_dir() -> Path:
    if not DATA_DIR.is_dir():
        pytest.skip(f"shared evaluation data not found at {DATA_DIR}")
    return DATA_DIR


@pytest.fixture
def restore_cli_state():
    """``graphdoc.cli.main`` configures logging and quiets transformers for the process; undo that."""
    from _retrieval_helpers import cli_state_restored

    with cli_state_restored():
        yield


@pytest.fixture(scope="session")
def model_dir(tiny_bert: Path, tmp_path_factory) -> Path:
    """A saved graphdoc model on tiny_bert with mean pooling and short passages (``_retrieval_helpers``)."""
    from _retrieval_helpers import save_model

    return save_model(tiny_bert, tmp_path_factory.mktemp("graphdoc-model"))


@pytest.fixture(scope="session")
def model(model_dir: Path):
    from graphdoc.encoder import GraphDocEncoder

    return GraphDocEncoder.from_pretrained(str(model_dir), device="cpu")


@contextlib.contextmanager
def pretraining_killed_before_step_5(monkeypatch):
    """Within the block, a pretraining run (the API's or the CLI's) is killed (KeyboardInterrupt) as step 5
    begins."""
    from graphdoc.training.trainer import Trainer

    original = Trainer._train_step

    def killed_at_step_5(self, batch):
        if self.step == 4:
            raise KeyboardInterrupt
        return original(self, batch)

    monkeypatch.setattr(Trainer, "_train_step", killed_at_step_5)
    try:
        yield
    finally:
        monkeypatch.setattr(Trainer, "_train_step", original)


def pretrain_killed_before_step_5(corpus, output, setup, monkeypatch) -> None:
    """Start a pretraining run into ``output`` and kill it (KeyboardInterrupt) as step 5 begins."""
    from graphdoc.training import pretrain

    with pretraining_killed_before_step_5(monkeypatch), pytest.raises(KeyboardInterrupt):
        pretrain(corpus, output, setup, device="cpu")
