"""Benchmark reports inside hand-written Markdown: a script rewrites only the text between its marker comments.

A report file (``docs/*.md``) holds the generated figures between ``<!-- benchmark:start -->`` and
``<!-- benchmark:end -->`` (named markers, ``<!-- benchmark:start NAME -->``, where one report has several
generated parts), and notes written by hand around them, which a new run keeps as they are. A file without
the markers (a new ``--output``) gets each block appended.
"""

from __future__ import annotations

from pathlib import Path


def markers(name: str = "") -> tuple[str, str]:
    """The start and end comments of the block ``name`` (``""``: the unnamed block)."""
    suffix = f" {name}" if name else ""
    return f"<!-- benchmark:start{suffix} -->", f"<!-- benchmark:end{suffix} -->"


def replace_blocks(text: str, blocks: dict[str, str]) -> str:
    """``text`` with each named block replaced between its markers (appended where they are missing)."""
    for name, block in blocks.items():
        start, end = markers(name)
        wrapped = f"{start}\n{block.strip(chr(10))}\n{end}"
        first = text.find(start)
        last = text.find(end, first + len(start)) if first >= 0 else -1
        if first >= 0 and last < 0:  # replacing to a later block's end would drop the text between them
            raise SystemExit(f"{start} has no {end} after it: put it back where the generated text ends")
        if last >= 0:
            text = text[:first] + wrapped + text[last + len(end):]
        else:
            text = text.rstrip("\n") + ("\n\n" if text else "") + wrapped + "\n"
    return text


def write_blocks(path: Path, blocks: dict[str, str]) -> None:
    """Replace the blocks of ``path`` (created if missing), keeping the rest of the file."""
    text = path.read_text(encoding="utf-8") if path.is_file() else ""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(replace_blocks(text, blocks), encoding="utf-8")


def write_block(path: Path, block: str) -> None:
    """Replace the text between the unnamed benchmark markers of ``path``."""
    write_blocks(path, {"": block})
