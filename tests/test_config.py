"""Configuration dataclasses: YAML files in graphdoc/configs/, unknown keys, bad values, round trips."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from graphdoc.config import (ChunkerConfig, GraphConfig, ModelConfig, PassageEncoderConfig, from_dict,
                             load_config_file, read_config_file)
from graphdoc.errors import GraphDocError

ALL_CONFIGS = sorted((Path(__file__).resolve().parents[1] / "graphdoc" / "configs").glob("*.yaml"))
# model configs; pretrain-*.yaml, docsplit-*.yaml and finetune-*.yaml are training setups, loaded by their own tests
PRETRAIN_PREFIXES = ("pretrain-", "docsplit-")
CONFIGS = [p for p in ALL_CONFIGS if not p.name.startswith((*PRETRAIN_PREFIXES, "finetune-"))]


def test_there_are_config_files() -> None:
    assert {p.name for p in CONFIGS} >= {"default.yaml", "section-graph.yaml", "graph-roberta-paper.yaml"}


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_every_yaml_file_loads_into_a_model_config(path: Path) -> None:
    config = load_config_file(path)
    assert isinstance(config, ModelConfig)
    assert ModelConfig.from_dict(config.to_dict()) == config


@pytest.mark.parametrize("path", [p for p in ALL_CONFIGS if p not in CONFIGS], ids=lambda p: p.name)
def test_training_setups_load_with_their_loaders(path: Path) -> None:
    if path.name.startswith(PRETRAIN_PREFIXES):
        from graphdoc.training.config import load_setup
    else:
        from graphdoc.finetune.config import load_finetune_setup as load_setup
    assert load_setup(path) is not None


def test_default_yaml_is_the_default_config() -> None:
    assert load_config_file(CONFIGS[0].with_name("default.yaml")) == ModelConfig()


def test_yaml_files_say_what_they_promise() -> None:
    folder = CONFIGS[0].parent
    assert load_config_file(folder / "section-graph.yaml").graph.graph_type == "section"
    paper = load_config_file(folder / "graph-roberta-paper.yaml")
    assert (paper.passage_encoder.model_name_or_path, paper.passage_encoder.pooling,
            paper.passage_encoder.projection_dim) == ("roberta-base", "cls", 512)


def test_to_dict_from_dict_round_trip_through_json() -> None:
    config = ModelConfig(ChunkerConfig(max_words=50, max_passages=None, title="all"),
                         PassageEncoderConfig("some/model", pooling="mean", normalize=True, max_seq_length=128,
                                              projection_dim=64, precision="bf16"),
                         GraphConfig(graph_type="section", num_layers=0, heads=4, dropout=0.0))
    data = json.loads(json.dumps(config.to_dict()))
    assert ModelConfig.from_dict(data) == config
    assert data["chunker"] == {"max_words": 50, "max_passages": None, "title": "all"}


def test_partial_sections_keep_defaults() -> None:
    config = ModelConfig.from_dict({"graph": {"heads": 4}})
    assert config.graph == GraphConfig(heads=4)
    assert config.chunker == ChunkerConfig()


def test_unknown_top_level_key_lists_valid_keys() -> None:
    with pytest.raises(GraphDocError) as info:
        ModelConfig.from_dict({"grpah": {}})
    assert str(info.value) == "unknown config key grpah; valid keys: chunker, passage_encoder, graph"


def test_unknown_nested_key_lists_valid_keys(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("chunker:\n  max_word: 10\n", encoding="utf-8")
    with pytest.raises(GraphDocError) as info:
        load_config_file(path)
    assert str(info.value) == (f"{path}: unknown config key chunker.max_word; "
                               "valid keys: chunker.max_words, chunker.max_passages, chunker.title")


def test_a_key_given_twice_is_refused_and_yaml_merge_keys_still_work(tmp_path: Path) -> None:
    path = tmp_path / "twice.yaml"
    path.write_text("chunker:\n  max_words: 50\n  title: all\n  max_words: 80\n", encoding="utf-8")
    with pytest.raises(GraphDocError) as info:
        load_config_file(path)
    assert str(info.value) == (f"{path}: invalid YAML (the key 'max_words' is given twice, on lines 2 and 4 (the last "
                               "would win silently))")
    path = tmp_path / "twice.json"
    path.write_text('{"chunker": {"max_words": 50, "max_words": 80}}', encoding="utf-8")
    with pytest.raises(GraphDocError) as info:
        load_config_file(path)
    assert str(info.value) == f"{path}: the key 'max_words' is given twice in one object (the last would win silently)"
    path = tmp_path / "twice-inline.yaml"
    path.write_text("chunker: {max_words: 50, max_words: 80}\n", encoding="utf-8")  # on one line
    with pytest.raises(GraphDocError, match=r"the key 'max_words' is given twice, on line 1 "):
        load_config_file(path)
    path = tmp_path / "merged-list.yaml"  # an anchored mapping merged into another later: no duplicate
    text = "base: &base {a: 1}\nlist:\n  - &mid\n    <<: *base\n    a: 2\ntop:\n  <<: *mid\n  b: 3\n"
    path.write_text(text, encoding="utf-8")
    # what PyYAML makes of the merge, untouched (6.0.3 gives top a 2, 6.0.4 a 1: PyYAML's own choice)
    assert read_config_file(path) == yaml.safe_load(text)
    assert read_config_file(path)["list"] == [{"a": 2}] and read_config_file(path)["top"]["b"] == 3
    path = tmp_path / "merge.yaml"  # a key a merged mapping gave may be set again: YAML's own override
    path.write_text("chunker:\n  <<: &base {max_words: 50, title: all}\n  max_words: 80\n", encoding="utf-8")
    assert (load_config_file(path).chunker.max_words, load_config_file(path).chunker.title) == (80, "all")


def test_unknown_keys_of_mixed_types_are_one_error_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("chunker:\n  1: 2\n  foo: 3\n", encoding="utf-8")  # YAML gives an int key and a str key
    with pytest.raises(GraphDocError,
                       match=r"bad\.yaml: unknown config key chunker\.1; valid keys: chunker\.max_words"):
        load_config_file(path)


@pytest.mark.parametrize("data, expected", [
    ({"graph": {"graph_type": "star"}}, "graph.graph_type must be one of full, section; got 'star'"),
    ({"chunker": {"title": "last"}}, "chunker.title must be one of first, all, none; got 'last'"),
    ({"passage_encoder": {"pooling": "sum"}},
     "passage_encoder.pooling must be one of cls, mean, max, mean_sqrt_len_tokens, weightedmean, lasttoken; got 'sum'"),
    ({"passage_encoder": {"precision": "int8"}},
     "passage_encoder.precision must be one of auto, fp32, fp16, bf16; got 'int8'"),
    ({"chunker": {"max_words": 0}}, "chunker.max_words must be at least 1; got 0"),
    ({"chunker": {"max_passages": 0}}, "chunker.max_passages must be at least 1 or null; got 0"),
    ({"graph": {"num_layers": -1}}, "graph.num_layers must be >= 0; got -1"),
    ({"graph": {"heads": 0}}, "graph.heads must be >= 1; got 0"),
    ({"passage_encoder": {"max_tokens_per_batch": 0}}, "passage_encoder.max_tokens_per_batch must be positive"),
])
def test_bad_values_are_one_line_errors(data: dict, expected: str) -> None:
    with pytest.raises(GraphDocError) as info:
        ModelConfig.from_dict(data)
    assert str(info.value) == expected


def test_a_section_that_is_not_a_mapping_is_an_error() -> None:
    with pytest.raises(GraphDocError, match="config section 'chunker' must be a mapping"):
        ModelConfig.from_dict({"chunker": [1, 2]})


def test_wrong_value_type_is_a_one_line_error() -> None:
    with pytest.raises(GraphDocError) as info:
        from_dict(ChunkerConfig, {"max_words": "ten"})
    assert str(info.value) == "chunker.max_words must be an integer; got 'ten'"


def test_built_in_configs_are_read_by_name_from_any_folder(tmp_path: Path, monkeypatch, caplog) -> None:
    from graphdoc.config import CONFIG_DIR, builtin_configs
    from graphdoc.finetune import load_finetune_setup
    from graphdoc.training import load_setup

    monkeypatch.chdir(tmp_path)  # no configs/ folder here
    assert builtin_configs() == sorted(p.stem for p in ALL_CONFIGS) and "section-graph" in builtin_configs()
    expected = load_config_file(CONFIG_DIR / "section-graph.yaml")
    assert expected.graph.graph_type == "section"
    for name in ("section-graph", "section-graph.yaml", "configs/section-graph.yaml",
                 "graphdoc/configs/section-graph.yaml"):
        with caplog.at_level("INFO", logger="graphdoc.config"):
            caplog.clear()
            assert load_config_file(name) == expected
        said = [f"{name} is no file here: reading graphdoc's built-in config section-graph"] if "/" in name else []
        assert [r.getMessage() for r in caplog.records] == said  # a file of the user's may have been meant
    assert load_setup("pretrain-paper") == load_setup(CONFIG_DIR / "pretrain-paper.yaml")
    assert load_finetune_setup("finetune-ranking").ranking.hard_negatives == 4
    (tmp_path / "section-graph.yaml").write_text("graph:\n  num_layers: 5\n", encoding="utf-8")
    assert load_config_file("section-graph.yaml").graph.num_layers == 5  # a file of that name comes first
    with pytest.raises(GraphDocError, match=r"^config file not found: sectoin-graph \(built-in configs: default, "
                                            r"docsplit-bert, .*, section-graph\)$"):
        load_config_file("sectoin-graph")
    with pytest.raises(GraphDocError, match=r"^config file not found: other/section-graph.yaml \(built-in"):
        load_config_file("other/section-graph.yaml")  # a path into another folder is a file, not a name


def test_missing_and_broken_files_are_named(tmp_path: Path) -> None:
    with pytest.raises(GraphDocError, match="config file not found: .*nope.yaml"):
        load_config_file(tmp_path / "nope.yaml")
    broken = tmp_path / "broken.yaml"
    broken.write_text("chunker: [unclosed\n", encoding="utf-8")
    with pytest.raises(GraphDocError, match=r"broken.yaml: invalid YAML") as info:
        load_config_file(broken)
    assert "\n" not in str(info.value)
    bad_json = tmp_path / "bad.json"
    bad_json.write_text("{\n  'chunker': 1}", encoding="utf-8")
    with pytest.raises(GraphDocError, match=r"bad.json: invalid JSON \(.* at line 2\)"):
        load_config_file(bad_json)


@pytest.mark.parametrize("text", ["[]", "0", "false", "''"])
def test_a_yaml_file_of_an_empty_list_or_a_falsy_scalar_is_no_config(tmp_path: Path, text: str) -> None:
    path = tmp_path / "odd.yaml"
    path.write_text(text + "\n", encoding="utf-8")
    with pytest.raises(GraphDocError, match="must be a mapping"):
        load_config_file(path)
    path.write_text("# nothing set\n", encoding="utf-8")  # an empty file, or comments only: the defaults
    assert load_config_file(path) == ModelConfig()


@pytest.mark.parametrize("backbone", [["graph"], {"a": 1}, 1])
def test_a_backbone_that_is_no_name_is_one_error_line(tmp_path: Path, backbone) -> None:
    from graphdoc.training import load_setup

    path = tmp_path / "setup.yaml"
    path.write_text(yaml.safe_dump({"backbone": backbone}), encoding="utf-8")
    with pytest.raises(GraphDocError, match=r"setup\.yaml: unknown backbone .*; valid: graph, flat$"):
        load_setup(path)


def test_json_config_files_load_too(tmp_path: Path) -> None:
    path = tmp_path / "model.json"
    path.write_text(json.dumps({"graph": {"graph_type": "section"}}), encoding="utf-8")
    assert load_config_file(path) == ModelConfig(graph=GraphConfig(graph_type="section"))
