"""Plain data types that flow through graphdoc: documents with sections, and their passages."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from graphdoc.errors import InputError

ID_KEYS = ("_id", "id", "docid", "doc_id")
TEXT_KEYS = ("text", "contents", "body")


@dataclass(frozen=True)
class Section:
    """A section of a document: its title and the character span ``[start, end)`` of ``Document.text``."""

    title: str
    start: int
    end: int


@dataclass
class Document:
    """A document to embed or index.

    ``sections`` are character spans of ``text``; ``None`` means the whole text is one untitled section.
    """

    id: str
    text: str
    title: str = ""
    sections: list[Section] | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    def section_spans(self) -> list[Section]:
        """The sections to chunk: the explicit ones, or one untitled section covering the text."""
        if self.sections:
            return list(self.sections)
        return [Section("", 0, len(self.text))]

    @classmethod
    def from_dict(cls, record: Mapping[str, Any], default_id: str | None = None) -> "Document":
        """Build a document from a JSON-style record.

        Accepts ``_id``/``id``/``docid`` for the id, ``text``/``contents`` for the text, an optional
        ``title`` and an optional ``sections`` list of ``{"title", "text"}`` whose texts, joined with
        ``"\\n"``, make the document text. Raises :class:`InputError` naming the problem.
        """
        doc_id = next((record[k] for k in ID_KEYS if record.get(k) not in (None, "")), default_id)
        if doc_id is None:
            raise InputError(f"record has no id field (expected one of {', '.join(ID_KEYS)})")
        doc_id = str(doc_id)
        title = record.get("title") or ""
        if not isinstance(title, str):
            raise InputError(f"document {doc_id!r}: 'title' must be a string")
        text = next((record[k] for k in TEXT_KEYS if k in record and record[k] is not None), None)
        raw_sections = record.get("sections")
        sections = None
        if raw_sections:
            text, sections = _sections_from_records(doc_id, raw_sections, text)
        if text is None:
            raise InputError(f"document {doc_id!r} has no text field (expected one of {', '.join(TEXT_KEYS)})")
        if not isinstance(text, str):
            raise InputError(f"document {doc_id!r}: text must be a string, got {type(text).__name__}")
        extra = {k: v for k, v in record.items()
                 if k not in ID_KEYS + TEXT_KEYS + ("title", "sections")}
        return cls(id=doc_id, text=text, title=title, sections=sections, metadata=extra)


def _sections_from_records(doc_id: str, raw: Any, text: str | None) -> tuple[str, list[Section]]:
    if not isinstance(raw, list):
        raise InputError(f"document {doc_id!r}: 'sections' must be a list of {{title, text}} objects")
    sections, parts, pos = [], [], 0
    for i, sec in enumerate(raw):
        if not isinstance(sec, Mapping) or not isinstance(sec.get("text", None), str):
            raise InputError(f"document {doc_id!r}: section {i} must be an object with a string 'text'")
        sec_text = sec["text"]
        sections.append(Section(str(sec.get("title") or ""), pos, pos + len(sec_text)))
        parts.append(sec_text)
        pos += len(sec_text) + 1
    joined = "\n".join(parts)
    if text is not None and text != joined:
        raise InputError(f"document {doc_id!r}: section texts joined with '\\n' do not equal 'text'")
    return joined, sections


def as_document(item: "Document | str | Mapping[str, Any]", index: int) -> Document:
    """Coerce what users pass to ``encode`` (a string, a dict or a Document) into a Document."""
    if isinstance(item, Document):
        return item
    if isinstance(item, str):
        return Document(id=str(index), text=item)
    if isinstance(item, Mapping):
        return Document.from_dict(item, default_id=str(index))
    raise TypeError(f"a document must be a str, a dict or a graphdoc.Document, got {type(item).__name__}")


@dataclass(frozen=True)
class Passage:
    """A chunk of a document: about 100 words of one section, on sentence boundaries.

    ``start``/``end`` are character offsets into the document's ``text``; ``text`` is
    ``document.text[start:end]``.
    """

    doc_id: str
    index: int
    section: int
    section_title: str
    start: int
    end: int
    text: str
