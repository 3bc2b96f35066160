"""A structure-aware recursive splitter for Markdown and plain text, in Latin and CJK scripts.

The text is cut into atomic pieces (headings, paragraphs, whole fenced code blocks and tables;
long paragraphs by lines, then sentence ends, then characters), and pieces are packed into
chunks. A chunk is always one contiguous span of the text, so its `start`/`end` offsets slice
the extracted text back to exactly the chunk.
"""

import re
from dataclasses import asdict, dataclass, replace

from archivist.tools.sparse import cjk_runs
from archivist.tools.words import heading_title

# One way to match a line (the title starts at its first non-space character); the closing
# `#`s and spaces are stripped after, not by a lazy pattern (which costs the square of a long
# line that is not a heading's end).
_HEADING = re.compile(r"(#{1,6})[ \t]+(\S.*)")
MAX_HEADING_CHARS = 200
"""The most characters of a heading kept in its sections' heading path: the path is copied
into every chunk under the heading, so a heading a megabyte long must not be."""
_FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})")
# An attribute list ending a heading (`## Install { #install }`, MkDocs' attr_list): an anchor
# for links, not part of the title.
_SENTENCE_END = re.compile(r"(?<=[.!?;])\s+|(?<=[。！？；])")
# `\s` matches exactly the characters `str.isspace` accepts; runs make few matches to count.
_SPACE_RUN = re.compile(r"\s+")
# Conservative characters per token for embedding tokenizers: English prose averages about
# four, code and numbers nearer three; a CJK character is about one token.
LATIN_CHARS_PER_TOKEN = 3
CJK_CHARS_PER_TOKEN = 1
PREFIX_TOKENS = 16  # the task prefix ("search_document: ") and special tokens


@dataclass(frozen=True)
class SplitterSettings:
    """Chunk sizes in characters; CJK text is denser, so it gets smaller chunks."""

    chunk_size: int = 1000
    chunk_overlap: int = 150
    cjk_chunk_size: int = 500
    cjk_chunk_overlap: int = 75
    # Code blocks and tables stay whole unless one alone is longer than this many chunk sizes.
    atomic_limit: float = 2.0

    def as_dict(self) -> dict:
        return asdict(self)

    def resized(self, chunk_size: int | None, chunk_overlap: int | None) -> "SplitterSettings":
        """Override the sizes; CJK sizes follow at half the Latin ones."""
        changes = {}
        if chunk_size is not None:
            changes.update(chunk_size=chunk_size, cjk_chunk_size=max(1, chunk_size // 2))
        if chunk_overlap is not None:
            changes.update(chunk_overlap=chunk_overlap, cjk_chunk_overlap=chunk_overlap // 2)
        settings = replace(self, **changes)
        if (
            settings.chunk_overlap >= settings.chunk_size
            or settings.chunk_size < 50
            or settings.chunk_overlap < 0
        ):
            raise ValueError(
                f"chunk size {settings.chunk_size} with overlap {settings.chunk_overlap}: the "
                "size must be at least 50 characters and larger than the overlap, and the "
                "overlap 0 or more"
            )
        return settings

    def limits(self, context_tokens: int) -> tuple[int, int]:
        """The largest (Latin, CJK) chunk sizes whose chunks fit `context_tokens` tokens,
        counting conservatively and allowing for the task prefix and whole code blocks."""
        usable = max(context_tokens - PREFIX_TOKENS, 1)
        return (
            int(usable * LATIN_CHARS_PER_TOKEN / self.atomic_limit),
            int(usable * CJK_CHARS_PER_TOKEN / self.atomic_limit),
        )

    def fitted(self, context_tokens: int) -> "SplitterSettings":
        """Shrink the chunk sizes (and overlaps in proportion) until chunks fit the context."""
        latin, cjk = self.limits(context_tokens)
        settings = self
        if settings.chunk_size > latin:
            ratio = latin / settings.chunk_size
            settings = replace(
                settings, chunk_size=latin, chunk_overlap=int(settings.chunk_overlap * ratio)
            )
        if settings.cjk_chunk_size > cjk:
            ratio = cjk / settings.cjk_chunk_size
            settings = replace(
                settings,
                cjk_chunk_size=cjk,
                cjk_chunk_overlap=int(settings.cjk_chunk_overlap * ratio),
            )
        return settings


@dataclass(frozen=True)
class Piece:
    start: int
    end: int
    headings: tuple[str, ...]
    is_heading: bool = False
    atomic: bool = False
    columns: str = ""  # a row of a table cut into pieces: the table's header lines


@dataclass
class TextChunk:
    """A contiguous span of a document's text with its heading path (every section it holds
    named: `Design Guide · FAQ` for a chunk holding the end of one and the other) and, for a
    chunk continuing a table, the table's header lines (`table_columns`)."""

    text: str
    start: int
    end: int
    headings: list[str]
    table_columns: str = ""


def is_cjk(text: str, threshold: float = 0.3) -> bool:
    """Whether CJK characters make up a large share of the text's non-space characters."""
    sample = text[:4000]
    letters = len(sample) - sum(map(len, _SPACE_RUN.findall(sample)))
    cjk = sum(map(len, cjk_runs().findall(sample)))
    return letters > 0 and cjk / letters >= threshold


def split_text(text: str, settings: SplitterSettings | None = None) -> list[TextChunk]:
    """Split a document into chunks that respect its structure."""
    settings = settings or SplitterSettings()
    if is_cjk(text):
        size, overlap = settings.cjk_chunk_size, settings.cjk_chunk_overlap
    else:
        size, overlap = settings.chunk_size, settings.chunk_overlap
    pieces = []
    for block in _blocks(text):
        limit = size * settings.atomic_limit if block.atomic else size
        if block.end - block.start <= limit:
            pieces.append(block)
        elif _is_table(text, block):
            pieces.extend(_cut_table(text, block, size))
        else:
            pieces.extend(_cut(text, block, size))
    return _pack(text, pieces, size, overlap, int(size * settings.atomic_limit))


def _is_table(text: str, block: Piece) -> bool:
    return block.atomic and text[block.start : block.end].lstrip().startswith("|")


def _cut_table(text: str, block: Piece, size: int) -> list[Piece]:
    """Cut a table too long to stay whole into its rows (a row longer than a chunk by
    sentences, then characters), each knowing the table's header: its first line, and the
    `|---|` line under it."""
    lines = text[block.start : block.end].split("\n")
    header = lines[:2] if len(lines) > 1 and set(lines[1].strip()) <= set("|-: ") else lines[:1]
    columns = "\n".join(line.strip() for line in header)
    body = block.start + sum(len(line) + 1 for line in header)
    return [
        replace(piece, columns=columns) if piece.start >= body else piece
        for piece in _cut(text, block, size)
    ]


def _blocks(text: str) -> list[Piece]:
    """Find headings, paragraphs, fenced code blocks and tables, with their offsets."""
    blocks: list[Piece] = []
    headings: list[tuple[int, str]] = []
    lines = text.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))
    i = 0
    while i < len(lines):
        line = lines[i].rstrip("\r\n")
        path = tuple(title for _, title in headings)
        if not line.strip():
            i += 1
            continue
        if fence := _FENCE.match(line):
            j = i + 1
            while j < len(lines) and not lines[j].strip().startswith(fence.group(1)):
                j += 1
            j = min(j + 1, len(lines))
            blocks.append(Piece(offsets[i], _trim(text, offsets[i], offsets[j]), path, atomic=True))
            i = j
        elif heading := _HEADING.match(line):
            level = len(heading.group(1))
            headings = [(lv, t) for lv, t in headings if lv < level] + [(level, _title(heading))]
            path = tuple(title for _, title in headings)
            end = _trim(text, offsets[i], offsets[i + 1])
            blocks.append(Piece(offsets[i], end, path, is_heading=True))
            i += 1
        elif line.lstrip().startswith("|"):
            j = i
            while j < len(lines) and lines[j].lstrip().startswith("|"):
                j += 1
            blocks.append(Piece(offsets[i], _trim(text, offsets[i], offsets[j]), path, atomic=True))
            i = j
        else:
            j = i
            while j < len(lines) and _continues_paragraph(lines[j]):
                j += 1
            j = max(j, i + 1)
            blocks.append(Piece(offsets[i], _trim(text, offsets[i], offsets[j]), path))
            i = j
    return blocks


def _title(heading: re.Match) -> str:
    """A heading's title without its closing `#`s and attribute list (`{ #anchor }`, as
    mkdocs and Pandoc write them), cut to MAX_HEADING_CHARS."""
    written = heading.group(2)
    title = written.rstrip(" \t#") or written
    title = heading_title(title)
    if len(title) > MAX_HEADING_CHARS:
        title = title[: MAX_HEADING_CHARS - 1].rstrip() + "…"
    return title


def _continues_paragraph(line: str) -> bool:
    stripped = line.strip()
    return bool(stripped) and not (
        _HEADING.match(stripped) or _FENCE.match(line) or stripped.startswith("|")
    )


def _trim(text: str, start: int, end: int) -> int:
    """Move `end` back over trailing whitespace."""
    while end > start and text[end - 1].isspace():
        end -= 1
    return end


def _cut(text: str, block: Piece, size: int) -> list[Piece]:
    """Cut an oversized block by lines, then sentence ends, then characters."""
    spans = [(block.start, block.end)]
    for pattern in (re.compile(r"\n"), _SENTENCE_END, None):
        refined = []
        for start, end in spans:
            if end - start <= size:
                refined.append((start, end))
            elif pattern is None:
                refined.extend((s, min(s + size, end)) for s in range(start, end, size))
            else:
                refined.extend(_split_at(text, start, end, pattern))
        spans = refined
    return [Piece(s, e, block.headings) for s, e in spans if text[s:e].strip()]


def _split_at(text: str, start: int, end: int, pattern: re.Pattern) -> list[tuple[int, int]]:
    spans, cursor = [], start
    for match in pattern.finditer(text, start, end):
        if match.end() > cursor and match.start() > cursor:
            spans.append((cursor, _trim(text, cursor, match.start())))
            cursor = match.end()
    spans.append((cursor, end))
    return [(s, e) for s, e in spans if e > s]


def _pack(text: str, pieces: list[Piece], size: int, overlap: int, limit: int) -> list[TextChunk]:
    """Pack consecutive pieces into chunks of at most `size`, overlapping by whole pieces; a
    heading (with at most a short lead-in) never ends a chunk before the block it introduces
    while both fit in `limit`."""
    chunks: list[TextChunk] = []
    i = 0
    while i < len(pieces):
        j = i + 1
        while (
            j < len(pieces)
            and pieces[j].end - pieces[i].start <= size
            and not (pieces[j].is_heading and pieces[j - 1].end - pieces[i].start >= size // 4)
        ):
            j += 1
        if j < len(pieces) and not pieces[j].is_heading and pieces[j - 1].is_heading:
            j += 1  # a heading is not a chunk of its own
        elif (
            j < len(pieces)
            and pieces[j].atomic
            and pieces[i].is_heading
            and pieces[j - 1].end - pieces[i].start < size // 4
            and pieces[j].end - pieces[i].start <= limit
        ):
            j += 1  # nor a heading and one sentence before their table or code
        first = pieces[i]
        chunks.append(
            TextChunk(
                text[first.start : pieces[j - 1].end],
                first.start,
                pieces[j - 1].end,
                _sections(pieces[i:j]),
                first.columns,
            )
        )
        if j >= len(pieces):
            break
        # Start the next chunk a few pieces back, within the overlap, never before a heading.
        back = j
        while (
            back - 1 > i
            and not pieces[j].is_heading
            and not pieces[back - 1].atomic
            and not pieces[back - 1].is_heading
            and pieces[j - 1].end - pieces[back - 1].start <= overlap
        ):
            back -= 1
        i = back
    return chunks


def _sections(pieces: list[Piece]) -> list[str]:
    """The heading path of a chunk made of `pieces`: the first piece's, when every section
    the chunk holds lies within it; else the path the sections share, then each section's
    path from the level where they part (`Design Guide · FAQ`, `Install › Upgrade · Support`)."""
    first = pieces[0].headings
    paths = [first] + [p.headings for p in pieces[1:] if p.is_heading]
    if (first or len(paths) == 1) and all(path[: len(first)] == first for path in paths):
        return list(first)
    shared = 0
    while all(len(path) > shared and path[shared] == first[shared] for path in paths):
        shared += 1
    parts = [path[shared:] for path in paths if len(path) > shared]
    # A section followed by its own subsection is named by the subsection's path alone.
    kept = [p for n, p in enumerate(parts) if not any(q[: len(p)] == p for q in parts[n + 1 :])]
    titles = dict.fromkeys(" › ".join(path) for path in kept)
    return [*first[:shared], " · ".join(titles)] if titles else list(first[:shared])
