"""The ``graphdoc`` command line: a thin argparse layer over the Python API.

Each subcommand lives in its own module with ``add_parser(subparsers)`` and ``run(args) -> int``;
``COMMANDS`` lists them. User errors (:class:`graphdoc.errors.GraphDocError`) print one line on stderr
and exit with status 1.
"""

from __future__ import annotations

import argparse
import importlib
import io
import logging
import os
import re
import sys
import textwrap
from typing import Sequence

from graphdoc import __version__
from graphdoc.errors import GraphDocError

# subcommand name -> module under graphdoc.cli
COMMANDS: dict[str, str] = {
    "embed": "graphdoc.cli.embed",
    "index": "graphdoc.cli.index",
    "merge": "graphdoc.cli.merge",
    "info": "graphdoc.cli.info",
    "delete": "graphdoc.cli.delete",
    "search": "graphdoc.cli.search",
    "serve": "graphdoc.cli.serve",
    "eval": "graphdoc.cli.eval",
    "tune-fusion": "graphdoc.cli.tune_fusion",
    "compare": "graphdoc.cli.compare",
    "cluster": "graphdoc.cli.cluster",
    "plot": "graphdoc.cli.plot",
    "pretrain": "graphdoc.cli.pretrain",
    "finetune": "graphdoc.cli.finetune",
    "predict": "graphdoc.cli.predict",
}


class HelpFormatter(argparse.HelpFormatter):
    """argparse's, for descriptions taken from docstrings: their paragraphs kept, their reST literals plain
    (see :func:`_plain`), and lines never broken inside an option such as ``--dev-qrels`` or a quoted command."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        paragraphs = [p for p in re.split(r"\n\s*\n", text) if p.strip()]
        return "\n\n".join("\n".join(indent + line for line in self._split_lines(p, width - len(indent)))
                           for p in paragraphs)

    def _split_lines(self, text: str, width: int) -> list[str]:
        text = self._whitespace_matcher.sub(" ", _plain(text)).strip()
        return [line.replace(NBSP, " ") for line in textwrap.wrap(text, width, break_on_hyphens=False)]


NBSP = "\u00a0"  # holds a quoted command together while lines are wrapped


def _plain(text: str) -> str:
    """``text`` with reST literals as plain text: ````--folds K```` as ``"--folds K"``, ````label```` as
    ``"label"``, an option such as ````--repeats```` bare, and a leading ````graphdoc plot````: (a description's
    subject) bare too."""
    text = re.sub(r"^(\s*)``([^`]+)``:", r"\1\2:", text)

    def literal(match: re.Match) -> str:
        inner = " ".join(match[1].split())
        return inner if inner.startswith("-") and " " not in inner else f'"{inner.replace(" ", NBSP)}"'

    return re.sub(r"``(.+?)``", literal, text, flags=re.DOTALL)


def _plain_help(parser: argparse.ArgumentParser) -> None:
    """Give ``parser`` and every subcommand parser under it :class:`HelpFormatter`."""
    parser.formatter_class = HelpFormatter
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                _plain_help(child)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="graphdoc", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"graphdoc {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    parser.add_argument("-q", "--quiet", action="store_true", help="only warnings and errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, module in COMMANDS.items():
        importlib.import_module(module).add_parser(sub)
    for subparser in sub.choices.values():  # -v / -q also after the subcommand
        subparser.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                               help="log debug messages")
        subparser.add_argument("-q", "--quiet", action="store_true", default=argparse.SUPPRESS,
                               help="only warnings and errors; no progress bars")
    _plain_help(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI in-process; returns the exit status."""
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
    except KeyboardInterrupt:  # Ctrl-C before the command started
        print("graphdoc: interrupted", file=sys.stderr)
        return 130
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    command = " ".join(filter(None, (args.command, getattr(args, "figure", None))))  # "plot embeddings", as argparse
    level = logging.DEBUG if args.verbose else logging.WARNING if args.quiet else logging.INFO
    handler = logging.StreamHandler()
    # huggingface_hub prints its records with a handler of its own once its logging is set up (its retries on an
    # unreachable hub): not a second time here
    handler.addFilter(lambda record: not record.name.startswith("huggingface_hub")
                      or not logging.getLogger("huggingface_hub").handlers)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s", handlers=[handler], force=True)
    _quiet_third_party(args.verbose, handler)
    try:
        status = int(args.func(args) or 0)
        sys.stdout.flush()  # a closed pipe shows here, not at exit
        return status
    except BrokenPipeError:
        _silence_stdout()  # the reader (``| head``) has all it wanted; Python would complain again at exit
        return 1
    except GraphDocError as exc:
        print(f"graphdoc {command}: error: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:  # the machine's, not the input's: a full disk, a permission, a read-only folder
        if args.verbose:
            raise
        where = f": {exc.filename}" if exc.filename else ""
        print(f"graphdoc {command}: error: {exc.strerror or exc}{where} (-v shows where it happened)",
              file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"graphdoc {command}: interrupted", file=sys.stderr)
        return 130


def _silence_stdout() -> None:
    """Point stdout at /dev/null, the way the Python docs handle SIGPIPE (``signal`` module, "Note on SIGPIPE")."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):  # a stdout without a file (tests)
        pass


def _quiet_third_party(verbose: bool, handler: logging.Handler) -> None:
    """Keep bm25s's and FAISS's notices and transformers' own loading bars and notices out of graphdoc's output
    unless verbose."""
    if verbose:
        return
    logging.getLogger("faiss").setLevel(logging.WARNING)  # eight INFO lines on which CPU build it loads
    # bm25s sets its logger to DEBUG when imported (lazily, after any level set here): filter its records instead
    handler.addFilter(lambda record: record.levelno >= logging.WARNING or not record.name.startswith("bm25s"))
    if "transformers" not in sys.modules:
        # a command that loads no model (BM25 search, eval) need not import transformers (~2 s) to quiet it: it
        # reads these when a model's loading imports it (an explicit setting of the user's stands)
        os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        return
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()


def console_main() -> int:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    return main()
