"""Which fields of a record hold a document's id, text and title: :class:`Fields`, for corpora whose records
name them otherwise (``{"paper_id": ..., "abstract": ...}``).

A field named here is the only source of its value: a record without it is an error, and the keys it replaces
(``_id``/``id``/``docid``/``doc_id`` for the id, ``text``/``contents``/``body`` and ``sections`` for the text,
``title``) are kept in the document's ``metadata`` like any other. Names apply to JSON lines files, BEIR
folders and CSV/TSV tables with a header; other sources have no fields to name.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields as dataclass_fields
from typing import Any

from graphdoc.errors import InputError

#: why a mapping is refused for a source that has no named fields
APPLIES_TO = ("field names (fields=, --id-field/--text-field/--title-field) apply only to JSON lines, BEIR and "
              "CSV/TSV corpora")


@dataclass(frozen=True)
class Fields:
    """The record fields that hold a document's ``id``, ``text`` and ``title``; ``None`` keeps the default keys.

    ``Fields(text="abstract")`` reads ``{"id": "p1", "abstract": "..."}``; ``Fields(id="paper_id",
    text="article", title="headline")`` names all three. Names are matched exactly (a CSV header too). A name
    that is empty or only whitespace, or one name for two roles, is an :class:`~graphdoc.errors.InputError`.
    """

    id: str | None = None
    text: str | None = None
    title: str | None = None

    def __post_init__(self) -> None:
        named = self.named()
        for role, name in named.items():
            if not isinstance(name, str):
                raise InputError(f"the {role} field name must be a string, got {type(name).__name__} ({name!r})")
            if not name.strip():
                raise InputError(f"the {role} field name is {'empty' if not name else 'only whitespace'} "
                                 f"({name!r}): name a field, or leave it out for the default")
        roles = list(named)
        for i, role in enumerate(roles):
            other = next((r for r in roles[i + 1:] if named[r] == named[role]), None)
            if other is not None:
                raise InputError(f"field {named[role]!r} is named for both the {role} and the {other}: "
                                 "each role needs a field of its own")

    def named(self) -> dict[str, str]:
        """``{role: field}`` of the roles given a field (``{}``: the default keys for all)."""
        return {role: name for role, name in asdict(self).items() if name is not None}

    @property
    def is_default(self) -> bool:
        """Whether no field is named (every reader accepts that)."""
        return not self.named()

    def to_dict(self) -> dict[str, str]:
        """The named fields as JSON, as an index or a training run records them (``{}``: the default keys)."""
        return self.named()

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> "Fields":
        """The mapping :meth:`to_dict` wrote (``None`` or ``{}``: the default keys); an unknown role is an error."""
        data = data or {}
        if not isinstance(data, dict):
            raise InputError(f"field names must be a JSON object of id, text and title; got {data!r}")
        unknown = sorted(set(data) - {f.name for f in dataclass_fields(cls)})
        if unknown:
            raise InputError(f"unknown field role {unknown[0]!r} (valid: id, text, title)")
        return cls(**data)

    def describe(self) -> str:
        """``text=abstract, id=paper_id`` for messages; ``the default fields`` when none is named."""
        named = self.named()
        return ", ".join(f"{role}={name}" for role, name in named.items()) if named else "the default fields"


def as_fields(fields: "Fields | None") -> Fields | None:
    """``fields`` checked: ``None`` or a :class:`Fields` (a dict is refused with what to write instead)."""
    if fields is None or isinstance(fields, Fields):
        return fields
    hint = " (build one: Fields(**mapping))" if isinstance(fields, dict) else ""
    raise InputError(f"fields must be a graphdoc.corpus.Fields; got a {type(fields).__name__}{hint}")
