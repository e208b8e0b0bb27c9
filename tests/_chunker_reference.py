"""The chunker as it was before it ran on arrays, one Python tuple a word: the reference its passages are checked
against (tests/test_chunker_arrays.py, tests/test_corpus_review2.py)."""

from __future__ import annotations

import re
from itertools import pairwise

import blingfire

from graphdoc import chunker
from graphdoc.chunker import WORD


def reference_sentences(text, start, end):
    segment = text[start:end]
    words = [(m.start(), m.end()) for m in WORD.finditer(segment)]
    if not words:
        return []
    _, offsets = blingfire.text_to_sentences_and_offsets(segment)
    ends = sorted({e for _, e in offsets})
    sentences, boundary = [[]], 0
    for w_start, w_end in words:
        while boundary < len(ends) and w_start >= ends[boundary]:
            boundary += 1
            if sentences[-1]:
                sentences.append([])
        sentences[-1].append((start + w_start, start + w_end))
    return [s for s in sentences if s]


def reference_units(text, sentences, max_words):
    units = []
    for sentence in sentences:
        if len(sentence) <= max_words:
            units.append(sentence)
            continue
        lines = [[sentence[0]]]
        for (_, prev_end), word in pairwise(sentence):
            if re.search(f"[{chunker.LINE_BREAKS}]", text[prev_end:word[0]]):
                lines.append([])
            lines[-1].append(word)
        units.extend(lines)
    return units


def reference_pack(units, max_words):
    """Whole units up to ``max_words``; an over-long unit cut into runs of ``max_words`` words (quadratic: it
    copied the rest each time, as the packing before the review did). A cut unit's last run that nothing joined
    and that is under half the limit is evened out with the run before it (stop 32)."""
    groups, current, stub = [], [], False

    def close():
        if stub and 2 * len(current) < max_words:
            words = groups.pop() + current
            half = (len(words) + 1) // 2
            groups.extend([words[:half], words[half:]])
        else:
            groups.append(current)

    for unit in units:
        if current and len(current) + len(unit) > max_words:
            close()
            current = []
        cut = False
        while len(unit) > max_words:
            if current:
                close()
                current = []
            groups.append(unit[:max_words])
            unit = unit[max_words:]
            cut = True
        stub = cut if not current else False
        current = current + unit
    if current:
        close()
    return groups


def reference_chunks(doc, max_words):
    out = []
    for s, section in enumerate(doc.section_spans()):
        units = reference_units(doc.text, reference_sentences(doc.text, section.start, section.end), max_words)
        out.extend((s, g[0][0], g[-1][1]) for g in reference_pack(units, max_words))
    return out
