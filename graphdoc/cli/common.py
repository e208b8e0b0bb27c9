"""Arguments and helpers shared by several subcommands."""

from __future__ import annotations

import argparse
import logging

from graphdoc.config import ModelConfig, load_config_file

logger = logging.getLogger("graphdoc.cli")


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("model")
    group.add_argument("--model", default=None, metavar="NAME_OR_DIR",
                       help="a saved graphdoc model, or any Hugging Face encoder id or folder "
                            "(default: the built-in all-MiniLM-L6-v2)")
    group.add_argument("--config", default=None, metavar="YAML",
                       help="model config (configs/*.yaml) for a model built on a plain encoder")
    group.add_argument("--device", default=None, help="cpu, cuda or cuda:N (default: CUDA when present)")
    group.add_argument("--batch-size", type=int, default=32, metavar="N", help="documents per batch")


def load_model(args: argparse.Namespace):
    """The model named by ``--model``/``--config``; the config's encoder is used when no model is named."""
    from graphdoc.encoder import GraphDocEncoder

    config: ModelConfig | None = load_config_file(args.config) if args.config else None
    if args.model is None and config is not None:
        return GraphDocEncoder.from_config(config, device=args.device)
    return GraphDocEncoder.from_pretrained(args.model, config=config, device=args.device)
