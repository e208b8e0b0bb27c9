"""Plain data types that flow through graphdoc: documents with sections, and their passages."""

from __future__ import annotations

import json
import numbers
import reprlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from graphdoc.errors import ArgumentTypeError, GraphDocError, InputError

if TYPE_CHECKING:  # (graphdoc.corpus imports this module)
    from graphdoc.corpus.fields import Fields

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

    ``sections`` are character spans of ``text``, in order, not overlapping, and covering all of it but
    whitespace; ``None`` (or ``[]``) means the whole text is one untitled section. Other sections, an id
    with a line break, or a string that is not valid Unicode are refused with an :class:`InputError`.
    """

    id: str
    text: str
    title: str = ""
    sections: list[Section] | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        """Refuse what would crash or silently lose text later, in one :class:`InputError` line."""
        if _is_int(self.id):  # as the readers take integer ids
            self.id = str(int(self.id))
        if not isinstance(self.id, str):
            raise InputError(f"document id must be a string or an integer, got {type(self.id).__name__} "
                             f"({self.id!r})")
        if has_line_break(self.id):
            raise InputError(f"document id {self.id!r} {LINE_BREAK}")
        for what, value in (("text", self.text), ("title", self.title)):
            if not isinstance(value, str):
                raise InputError(f"document {self.id!r}: {what} must be a string, got {type(value).__name__}")
        if self.sections:  # an empty list, like None, means one untitled section
            check_sections(self.id, self.text, self.sections)
        for what, value in (("id", self.id), ("title", self.title), ("text", self.text)):
            surrogate = lone_surrogate(value)
            if surrogate:
                raise InputError(f"document {self.id!r}: {what} is not valid Unicode (lone surrogate {surrogate})")

    def section_spans(self) -> list[Section]:
        """The sections to chunk: the explicit ones, or one untitled section covering the text."""
        if self.sections:
            return list(self.sections)
        return [Section("", 0, len(self.text))]

    @classmethod
    def from_dict(cls, record: Mapping[str, Any], default_id: str | None = None,
                  fields: "Fields | None" = None) -> "Document":
        """Build a document from a JSON-style record.

        Accepts ``_id``/``id``/``docid`` (a string or an integer) for the id, ``text``/``contents``/``body``
        for the text (several of them: the one that is not blank; two that differ are an error), an optional
        ``title`` (a string or null) and an optional ``sections`` list of ``{"title", "text"}`` whose texts,
        joined with ``"\\n"``, make the document text. ``fields`` (a :class:`graphdoc.corpus.Fields`) names other
        fields for the id, text or title: a named field is the only source of its value (a record without it is
        an error) and the keys it replaces (``sections`` too, for the text) are kept in ``metadata``. Raises
        :class:`InputError` naming the problem.
        """
        keys = _Keys.of(fields)
        id_keys, text_keys, title_key = keys.id, keys.text, keys.title
        key = next((k for k in id_keys if record.get(k) not in (None, "")), None)
        if key is None and (default_id is None or keys.id_named):
            raise InputError(f"record has no id field {id_keys[0]!r} (the field named for ids)" if keys.id_named
                             else f"record has no id field (expected one of {', '.join(id_keys)})")
        doc_id = scalar_id(record[key], key) if key is not None else default_id
        if keys.title_named and title_key not in record:  # (null: no title)
            raise InputError(f"document {doc_id!r} has no field {title_key!r} (the field named for titles)")
        title = _optional_string(record.get(title_key), f"document {doc_id!r}: {title_key!r}") if title_key else ""
        text = _text_field(doc_id, record, text_keys)
        raw_sections = record.get("sections") if keys.sections else None  # a named text: metadata
        sections = None
        if raw_sections:
            text, sections = _sections_from_records(doc_id, raw_sections, text)
        if text is None:
            expected = (f"{text_keys[0]!r} is the field named for the text" if keys.text_named
                        else f"expected one of {', '.join(text_keys)}")
            raise InputError(f"document {doc_id!r} has no text field ({expected})")
        used = {*text_keys, title_key} | ({"sections"} if keys.sections else set())
        extra = {k: v for k, v in record.items()  # an id field other than the one used is kept ("id" beside "_id")
                 if k != key and k not in used and not (k in id_keys and v in (None, ""))}
        return cls(id=doc_id, text=text, title=title, sections=sections, metadata=extra)


@dataclass(frozen=True)
class _Keys:
    """The record keys read for a document's id, text and title (and whether ``sections`` makes its text): the
    fields named, else the default keys that no role names (``Fields(title="body")`` reads no text from
    ``body``)."""

    id: tuple[str, ...]
    text: tuple[str, ...]
    title: str | None
    sections: bool
    id_named: bool = False
    text_named: bool = False
    title_named: bool = False

    @classmethod
    def of(cls, fields: "Fields | None") -> "_Keys":
        if fields is None:
            return cls(ID_KEYS, TEXT_KEYS, "title", True)
        named = set(fields.named().values())
        return cls(id=(fields.id,) if fields.id else tuple(k for k in ID_KEYS if k not in named),
                   text=(fields.text,) if fields.text else tuple(k for k in TEXT_KEYS if k not in named),
                   title=fields.title or ("title" if "title" not in named else None),
                   sections=not fields.text and "sections" not in named,
                   id_named=bool(fields.id), text_named=bool(fields.text), title_named=bool(fields.title))


def _text_field(doc_id: str, record: Mapping[str, Any], keys: tuple[str, ...] = TEXT_KEYS) -> str | None:
    """The text among the record's ``keys`` (:data:`TEXT_KEYS`, or the one named): the one that is not blank
    (``{"text": "", "contents": "..."}`` is the contents), else the first present; ``None`` when there is none."""
    present = [(k, record[k]) for k in keys if record.get(k) is not None]
    for key, value in present:
        if not isinstance(value, str):
            raise InputError(f"document {doc_id!r}: {key} must be a string, got {type(value).__name__}")
    filled = [(k, v) for k, v in present if v.strip()]
    differing = [k for k, v in filled if v != filled[0][1]]
    if differing:
        raise InputError(f"document {doc_id!r}: fields {filled[0][0]!r} and {differing[0]!r} both hold text and "
                         "differ (give the text once)")
    return (filled or present or [(None, None)])[0][1]


def _optional_string(value: Any, what: str) -> str:
    """A JSON title: a string as it is, null (or no field) as ''; anything else is an :class:`InputError`."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise InputError(f"{what} must be a string or null, got {_shown_json(value)}")
    return value


def _sections_from_records(doc_id: str, raw: Any, text: str | None) -> tuple[str, list[Section]]:
    if not isinstance(raw, list):
        raise InputError(f"document {doc_id!r}: 'sections' must be a list of {{title, text}} objects")
    sections, parts, pos = [], [], 0
    for i, sec in enumerate(raw):
        if not isinstance(sec, Mapping) or not isinstance(sec.get("text", None), str):
            raise InputError(f"document {doc_id!r}: section {i} must be an object with a string 'text'")
        sec_text = sec["text"]
        title = _optional_string(sec.get("title"), f"document {doc_id!r}: section {i} 'title'")
        sections.append(Section(title, pos, pos + len(sec_text)))
        parts.append(sec_text)
        pos += len(sec_text) + 1
    joined = "\n".join(parts)
    if text is not None and text.strip() and text != joined:  # a blank text is no text
        raise InputError(f"document {doc_id!r}: section texts joined with '\\n' do not equal 'text'")
    return joined, sections


#: Why an id with a line break is refused; line breaks are whatever :meth:`str.splitlines` splits on.
LINE_BREAK = "has a line break (ids are stored one per line)"


def has_line_break(text: str) -> bool:
    """Whether ``text`` holds a line break: ``\\n``, ``\\r``, U+2028 or else what ``str.splitlines`` splits on."""
    return bool(text) and text.splitlines() != [text]


def id_problem(item_id: str, single_token: bool = False) -> str | None:
    """Why ``item_id`` cannot be the id of a document or query read from a file, or ``None`` when it can.

    Ids are stored one per line (ids files, an index's ``doc_ids.txt``), so they must be non-empty and
    without a line break. ``single_token``: no whitespace either, for the ids of queries and judgements, which
    live in whitespace-separated TREC run and qrels files. (Document ids may hold spaces, as file names do;
    a TREC run of such a corpus is refused when it is asked for.) A :class:`Document` built in Python may be
    blank (a query is one, with id ``''``): only a line break is refused there.
    """
    if not item_id.strip():
        return "is empty" if not item_id else "is only whitespace"
    if has_line_break(item_id):
        return LINE_BREAK
    if single_token and item_id.split() != [item_id]:  # split() splits on all that isspace() calls whitespace
        return "has whitespace (TREC run and qrels files are whitespace-separated)"
    return None


def scalar_id(value: Any, key: str) -> str:
    """A JSON id as a string: a string as it is, an integer in decimal; anything else is an :class:`InputError`.

    A float is refused too: ``1.0`` and ``1`` would name different documents, and large ones lose digits.
    """
    if isinstance(value, str):
        return value
    if _is_int(value):
        return str(int(value))
    raise InputError(f"id field {key!r} must be a string or an integer, got {_shown_json(value)}")


def _shown_json(value: Any) -> str:
    """``value`` as JSON, cut to 40 characters, for an error message."""
    shown = json.dumps(value, ensure_ascii=False, default=repr)
    return shown if len(shown) <= 40 else shown[:37] + "..."


def lone_surrogate(text: str) -> str | None:
    """The first lone surrogate in ``text`` as ``\\udXXX`` (JSON's ``"\\ud800"`` escape makes one), or ``None``.

    Cheap: an ASCII string is known to be one without a scan; other text is encoded once.
    """
    if text.isascii():
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:  # UTF-8 encodes every code point but the surrogates
        return f"\\u{ord(text[err.start]):04x}"
    return None


def query_names(ids: Sequence[Any] | None, count: int) -> list[str]:
    """How messages name ``count`` queries: by id (``query 'q1'``) when they have ids, else by position."""
    return [f"query {str(q)!r}" for q in ids] if ids is not None else \
        [f"query {i} (counting from 0)" for i in range(count)]


def check_query_text(text: Any, name: str) -> str:
    """One query: a str of valid Unicode; ``name`` (``"query 'q1'"``, ``"the query"``) says which in messages."""
    if not isinstance(text, str):
        raise ArgumentTypeError(f"{name} is of type {type(text).__name__}, not str: {reprlib.repr(text)}")
    surrogate = lone_surrogate(text)
    if surrogate:
        raise GraphDocError(f"{name} is not valid Unicode (lone surrogate {surrogate})")
    return text


def check_sections(doc_id: str, text: str, sections: Sequence[Section]) -> None:
    """Refuse sections that are not in-order, non-overlapping spans of ``text`` covering all its words.

    The chunker reads only what sections cover, so text outside them would be lost; whitespace between
    them (the ``"\\n"`` that :meth:`Document.from_dict` puts between section texts) may be left out.
    """
    if not isinstance(sections, (list, tuple)):
        raise InputError(f"document {doc_id!r}: sections must be a list of graphdoc.Section, "
                         f"got {type(sections).__name__}")
    covered = 0
    for i, section in enumerate(sections):
        where = f"document {doc_id!r}: section {i}"
        if not isinstance(section, Section):
            raise InputError(f"{where} must be a graphdoc.Section(title, start, end), got {type(section).__name__}")
        start, end, title = section.start, section.end, section.title
        if not (_is_int(start) and _is_int(end) and isinstance(title, str)):
            raise InputError(f"{where} must have a string title and integer start and end, got {section!r}")
        if start > end:
            raise InputError(f"{where} ({title!r}) ends before it starts ([{start}, {end}))")
        if start < 0 or end > len(text):
            raise InputError(f"{where} ({title!r}) span [{start}, {end}) is outside the text (0 to {len(text)})")
        if start < covered:
            raise InputError(f"{where} ({title!r}) starts at {start}, before section {i - 1} ends (at {covered}): "
                             "sections must be in order and not overlap")
        surrogate = lone_surrogate(title)
        if surrogate:
            raise InputError(f"{where} title is not valid Unicode (lone surrogate {surrogate})")
        covered = end
    gaps = zip([0] + [s.end for s in sections], [s.start for s in sections] + [len(text)])
    for start, end in gaps:
        _check_uncovered(doc_id, text, start, end)


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _check_uncovered(doc_id: str, text: str, start: int, end: int) -> None:
    """Text between sections must be whitespace: the chunker would drop its words."""
    if start < end and not text[start:end].isspace():
        words = " ".join(text[start:end].split())
        shown = words if len(words) <= 30 else words[:27] + "..."
        raise InputError(f"document {doc_id!r}: text[{start}:{end}] ({shown!r}) is in no section "
                         "(sections must cover all the text but whitespace)")


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
