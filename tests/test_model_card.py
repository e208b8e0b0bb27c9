"""The README.md model card a saved model folder holds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from graphdoc.encoder import GraphDocEncoder
from graphdoc.model_card import MARKER, base_model
from graphdoc.serialization import save_search_defaults


def card_of(folder: Path) -> str:
    return (folder / "README.md").read_text(encoding="utf-8")


def settings_block(card: str) -> dict:
    return json.loads(card.split("```json\n", 1)[1].split("```", 1)[0])


def test_a_saved_model_has_a_card_naming_what_it_is(model_dir: Path, tiny_bert: Path, tmp_path: Path) -> None:
    model = GraphDocEncoder.from_pretrained(str(model_dir), device="cpu")
    folder = tmp_path / "my-model"
    model.save_pretrained(folder)
    card = card_of(folder)
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    assert card.startswith("---\nlibrary_name: graphdoc\npipeline_tag: feature-extraction\ntags:\n- graphdoc\n")
    assert "base_model" not in card  # a local encoder folder has no hub id
    assert "\n# my-model\n" in card
    assert (f"`{tiny_bert}` embeds each passage (mean pooling, at most 64 tokens); a document node and the passage "
            "nodes (every passage linked to every other) go through 2 graph attention layers (2 heads), and the "
            "document node is the document's 32-dimensional embedding.") in card
    assert f"model = graphdoc.load_model({json.dumps(str(folder))})" in card
    assert settings_block(card) == config["model"]
    assert f"Saved with graphdoc {config['graphdoc_version']}, torch " in card
    model.save_pretrained(folder)  # saved again into its own folder: the card is its own, replaced with it
    assert card_of(folder) == card and card.endswith(f"\n{MARKER}\n")
    (folder / "README.md").write_text(card.replace(MARKER, "my own notes"), encoding="utf-8")  # the user's now
    model.save_pretrained(folder)  # kept as it is
    assert card_of(folder) == card.replace(MARKER, "my own notes")
    save_search_defaults(folder, {"fusion": {"alpha": 0.7}})  # the user's card is not rewritten either
    assert "my own notes" in card_of(folder) and "fine-tuned" not in card_of(folder)


def test_search_defaults_saved_later_are_in_the_card(model_dir: Path, tmp_path: Path) -> None:
    folder = tmp_path / "tuned"
    GraphDocEncoder.from_pretrained(str(model_dir), device="cpu").save_pretrained(folder)
    save_search_defaults(folder, {"fusion": {"alpha": 0.7, "method": "weighted"}})
    assert "search with the settings it was fine-tuned with: fusion.alpha 0.7, fusion.method weighted." in \
        card_of(folder)
    (folder / "README.md").unlink()  # a model saved before cards: none is added
    save_search_defaults(folder, {"fusion": {"alpha": 0.5}})
    assert not (folder / "README.md").exists()


def test_a_flat_model_card(tiny_bert: Path, tmp_path: Path) -> None:
    from graphdoc import load_model

    load_model(str(tiny_bert), backbone="flat", device="cpu").save_pretrained(tmp_path / "flat")
    assert "A graphdoc flat model: " in card_of(tmp_path / "flat")
    assert "are embedded whole" in card_of(tmp_path / "flat")
    use = card_of(tmp_path / "flat").split("```python\n", 1)[1].split("\nvectors = ", 1)[0]
    found: dict = {}
    exec(use, found)  # the card's own lines load it
    assert type(found["model"]).__name__ == "FlatEncoder"


@pytest.mark.parametrize("encoder, expected", [
    ("all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2"),
    ("roberta-base", "roberta-base"),  # (an id of before the hub named organisations)
    ("BAAI/bge-small-en-v1.5", "BAAI/bge-small-en-v1.5"),
    ("/models/mine", None),
    ("./mine/sub", None),
])
def test_base_model_is_a_hub_id_or_none(encoder, expected) -> None:
    assert base_model(encoder) == expected


def test_a_card_names_the_final_folder_and_quotes_it_for_the_shell(model_dir: Path, tmp_path: Path) -> None:
    import torch

    from graphdoc.training import checkpoint

    model = GraphDocEncoder.from_pretrained(str(model_dir), device="cpu")
    folder = tmp_path / "run" / "checkpoint 1"
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    checkpoint.save_checkpoint(folder, model, optimizer, scheduler, {}, {"step": 1})
    card = card_of(folder / checkpoint.MODEL_DIR)
    assert ".tmp" not in card and f"--model '{folder / checkpoint.MODEL_DIR}'" in card


def test_a_readme_folder_is_refused_and_a_classifiers_user_card_kept(model_dir: Path, tmp_path: Path) -> None:
    from graphdoc.errors import GraphDocError
    from graphdoc.finetune.classifier import DocumentClassifier

    model = GraphDocEncoder.from_pretrained(str(model_dir), device="cpu")
    folder = tmp_path / "m"
    model.save_pretrained(folder)
    (folder / "README.md").unlink()
    (folder / "README.md").mkdir()
    (folder / "README.md" / "notes.txt").write_text("precious")
    with pytest.raises(GraphDocError, match=r"m holds README\.md besides a saved graphdoc model"):
        model.save_pretrained(folder)
    assert (folder / "README.md" / "notes.txt").read_text() == "precious"
    classifier = DocumentClassifier(model, ["a", "b"])
    classifier.save_pretrained(tmp_path / "c")
    (tmp_path / "c" / "encoder" / "README.md").write_text("# my card\n")
    classifier.save_pretrained(tmp_path / "c")
    assert (tmp_path / "c" / "encoder" / "README.md").read_text() == "# my card\n"
