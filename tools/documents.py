"""A store's sources as stored: listed with exact counts of a text, and read back in order.

Each chunk carries its text and where it sits in its section of the source (`start`/`end`
offsets, and `lines` where the text is the file's own lines); a PDF page, a slide or a sheet
is a section of its own. Chunks overlap (the splitter's overlap) and leave out the blank
space between them, so a source's stored text is its chunks laid at their offsets: an
overlap is taken once, and a gap is filled with the line breaks its `lines` say it held (a
blank line or two where the format has no lines). That text is what `read` shows and what
`contains` counts in: every occurrence, once, whichever chunks it falls in.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from archivist.tools.catalog import unpacked_records
from archivist.tools.collector import collector_paused
from archivist.tools.engine import scroll_pages
from archivist.tools.words import heading_title

if TYPE_CHECKING:
    from archivist.tools.catalog import SourceInfo
    from archivist.tools.store import KnowledgeStore

# What a listing or reading reads of each chunk (each field costs the engine's conversion).
_FIELDS = ("text", "source", "chunk_index", "doc_hash", "metadata")
_HEADING = re.compile(r"^[ \t]{0,3}(#{1,6})[ \t]+(\S.*?)[ \t#]*$")
KINDS = {
    "md": "Markdown",
    "markdown": "Markdown",
    "mdx": "MDX",
    "rst": "reStructuredText",
    "txt": "text",
    "pdf": "PDF",
    "docx": "DOCX",
    "pptx": "PPTX",
    "xlsx": "XLSX",
    "xls": "XLS",
    "ods": "ODS",
    "odt": "ODT",
    "epub": "EPUB",
    "html": "HTML",
    "htm": "HTML",
    "csv": "CSV",
    "json": "JSON",
    "jsonl": "JSONL",
    "eml": "email",
}


@dataclass(frozen=True)
class Line:
    """One line of a source's stored text."""

    n: int
    """Its number: the file's line for text and Markdown, else its place in the stored text."""
    text: str
    page: int | None = None
    """The PDF page or slide it is on."""
    sheet: str | None = None
    """The spreadsheet sheet it is on."""


@dataclass
class StoredSource:
    """A source's stored text, line by line, with where its chunks start."""

    source: str
    lines: list[Line]
    file_lines: bool
    """Whether the line numbers are the file's own (text and Markdown)."""
    chunk_lines: dict[str, int] = field(default_factory=dict)
    """The index in `lines` each chunk (by id) starts on."""
    title: str | None = None
    chunks: int = 0
    ingested_at: float | None = None

    @property
    def text(self) -> str:
        """The stored text, its lines joined."""
        return "\n".join(line.text for line in self.lines)

    def sections(self) -> list[tuple[int | str, int, int]]:
        """The pages or sheets, each as (its page number or sheet name, first and last index
        into `lines`), in order; empty for a source without either."""
        found: list[tuple[int | str, int, int]] = []
        for i, line in enumerate(self.lines):
            key = line.page if line.page is not None else line.sheet
            if key is None:
                continue
            if found and found[-1][0] == key and found[-1][2] == i - 1:
                found[-1] = (key, found[-1][1], i)
            else:
                found.append((key, i, i))
        return found

    def headings(self) -> list[tuple[int, int, str]]:
        """The Markdown headings in the text, as (index into `lines`, level, title)."""
        found = []
        for i, line in enumerate(self.lines):
            if line.text.startswith(("#", " ")) and (match := _HEADING.match(line.text)):
                found.append((i, len(match.group(1)), heading_title(match.group(2))))
        return found


@dataclass
class Match:
    """Where a text occurs in a source."""

    count: int
    places: list[Line]
    """The lines of its first few occurrences."""


@dataclass
class Listed:
    """One source of a listing."""

    source: str
    chunks: int
    chars: int | None
    """Characters of stored text (None where the listing did not read it)."""
    title: str | None = None
    kind: str | None = None
    size: int | None = None
    """The file's size in bytes, where the store recorded it."""
    modified: float | None = None
    """The file's modification time (seconds since the epoch), where the store recorded it."""
    ingested_at: float | None = None
    match: Match | None = None

    def as_dict(self) -> dict[str, Any]:
        """The JSON shape `sources --contains --json` prints."""
        found: dict[str, Any] = {
            "source": self.source,
            "chunks": self.chunks,
            "chars": self.chars,
            "title": self.title,
            "kind": self.kind,
            "size": self.size,
            "modified": self.modified,
            "ingested_at": self.ingested_at,
        }
        if self.match is not None:
            found["count"] = self.match.count
            found["places"] = [place_of(line) for line in self.match.places]
        return found


def place_of(line: Line) -> dict[str, Any]:
    """A line's place as results give it: its line number and page or sheet, where known."""
    found: dict[str, Any] = {"line": line.n}
    if line.page is not None:
        found["page"] = line.page
    if line.sheet is not None:
        found["sheet"] = line.sheet
    return found


def kind_of(source: str) -> str | None:
    """The kind of document a source name says it is (`PDF`, `Markdown`, …)."""
    name = source.split("#", 1)[0].rsplit("/", 1)[-1]
    if "." not in name:
        return "web page" if source.startswith(("http://", "https://")) else None
    return KINDS.get(name.rsplit(".", 1)[-1].lower(), name.rsplit(".", 1)[-1].upper())


@dataclass
class _Section:
    """A section's stored text (a page, a sheet, or the whole of a source without them)."""

    parts: list[str]
    first_n: int
    page: int | None
    sheet: str | None


def _sections(
    chunks: list[dict[str, Any]], starts: dict[str, tuple[int, int]] | None = None
) -> tuple[bool, list[_Section], str | None]:
    """Lay a source's chunks (in order) at their offsets, section by section: whether its
    lines are the file's, the sections' texts, and the title the chunks carry; and, into
    `starts` if given, where each chunk (by id) starts (its section and offset in it).

    One pass of plain lookups a chunk: a listing runs it over every chunk of a store."""
    file_lines = bool(chunks)  # until a chunk without its lines
    sections: list[_Section] = []
    title = None
    key: tuple | None = None
    parts: list[str] = []
    prev_start: Any = None  # the previous chunk's offsets and lines
    prev_end: Any = None
    prev_lines: Any = None
    size = 0  # characters in the current section so far
    for chunk in chunks:
        get = (chunk.get("metadata") or {}).get
        lines = get("lines")
        if not isinstance(lines, list):
            file_lines = False
        if not title:
            title = get("title")
        start = get("start")
        text = chunk.get("text", "")
        # What tells a source's sections apart (a PDF page, a slide, a sheet, a chapter).
        here = (get("page"), get("slide"), get("sheet"), get("chapter"))
        if (
            here == key
            and sections
            and isinstance(start, int)
            and isinstance(prev_start, int)
            and start > prev_start
        ):
            if isinstance(prev_end, int) and start < prev_end:
                at = max(size - (prev_end - start), 0)
                text = text[prev_end - start :]  # the overlap, taken once
            else:
                # The blank space between the two, which neither stored: the line breaks
                # their lines say it held, else a space or a blank line.
                if isinstance(lines, list) and isinstance(prev_lines, list):
                    breaks = lines[0] - prev_lines[1]
                    gap = "\n" * breaks if breaks > 0 else " "
                else:
                    space = start - (prev_end if isinstance(prev_end, int) else 0)
                    gap = " " if space == 1 else "\n\n"
                parts.append(gap)
                size += len(gap)
                at = size
            parts.append(text)
            size += len(text)
        else:
            page = get("page", get("slide"))
            sheet = get("sheet")
            parts = [text]
            sections.append(
                _Section(
                    parts,
                    lines[0] if isinstance(lines, list) else 1,
                    page if isinstance(page, int) else None,
                    sheet if isinstance(sheet, str) else None,
                )
            )
            key, size, at = here, len(text), 0
        if starts is not None:
            chunk_id = chunk.get("id")
            starts[str(chunk.get("chunk_index")) if chunk_id is None else chunk_id] = (
                len(sections) - 1,
                at,
            )
        prev_start, prev_end, prev_lines = start, get("end"), lines
    if not file_lines:  # numbered in the stored text instead
        for section in sections:
            section.first_n = 1
    return file_lines, sections, title


def stored_text(chunks: list[dict[str, Any]]) -> str:
    """A source's stored text from its chunks (in order), as `assemble` lays it out."""
    return "\n".join("".join(s.parts) for s in _sections(chunks)[1])


def assemble(source: str, chunks: list[dict[str, Any]]) -> StoredSource:
    """Lay a source's chunks (in order) at their offsets: its stored text, line by line."""
    starts: dict[str, tuple[int, int]] = {}
    file_lines, sections, title = _sections(chunks, starts)
    lines: list[Line] = []
    first_line: list[int] = []  # the index in `lines` each section starts at
    texts = []
    for section in sections:
        text = "".join(section.parts)
        texts.append(text)
        first_line.append(len(lines))
        n = section.first_n if file_lines else (lines[-1].n + 1 if lines else 1)
        page, sheet = section.page, section.sheet
        lines += [Line(n + i, t, page, sheet) for i, t in enumerate(text.split("\n"))]
    chunk_lines = {
        chunk_id: first_line[index] + texts[index].count("\n", 0, offset)
        for chunk_id, (index, offset) in starts.items()
    }
    ingested = max((c.get("ingested_at") or 0.0 for c in chunks), default=0.0) or None
    return StoredSource(source, lines, file_lines, chunk_lines, title, len(chunks), ingested)


def stored_source(store: KnowledgeStore, source: str) -> StoredSource | None:
    """A source's stored text (None: the store has no such source)."""
    with collector_paused():
        return _assembled(store, source)


def _assembled(store: KnowledgeStore, source: str) -> StoredSource | None:
    chunks = _with_ids(store, [source]).get(source)
    return None if not chunks else assemble(source, chunks)


def _with_ids(store: KnowledgeStore, sources: list[str] | None) -> dict[str, list[dict]]:
    """Each source's chunks of its current version (`KnowledgeStore.sources`: the newest
    complete one, else the newest), in order, each payload with its point id as `id` and
    its version's time as `ingested_at`."""
    return _current_chunks(store, store.sources(), sources, True)


def _current_chunks(
    store: KnowledgeStore,
    current: dict[str, SourceInfo],
    sources: list[str] | None,
    reading: bool,
) -> dict[str, list[dict]]:
    """Each source's chunks (of `sources`, else all) of the version `current` names, in
    order; `reading`, each payload with its point id and time added (a listing needs
    neither, and a payload given another key is made anew)."""
    selector = None
    if sources is not None:
        m = store.records
        selector = m.Filter(
            must=[m.FieldCondition(key="source", match=m.MatchAny(any=list(sources)))]
        )
    hashes = {source: info.doc_hash for source, info in current.items()}
    times = {source: info.ingested_at for source, info in current.items()}
    by_source: dict[str, list[dict]] = {}
    for points in scroll_pages(store.client, store.name, 4096, selector, _FIELDS):
        _keep_current(points, hashes, times if reading else None, by_source)
    for chunks in by_source.values():
        try:
            chunks.sort(key=_BY_INDEX)
        except KeyError:  # a payload without its place: first, as if it were 0
            chunks.sort(key=_chunk_index)
    return by_source


def _keep_current(
    points: list[Any],
    hashes: dict[str, str],
    times: dict[str, float] | None,
    by_source: dict[str, list[dict]],
) -> None:
    """Add to `by_source` the payloads of `points` from the versions `hashes` names, with
    their ids and `times` if given."""
    for point in points:
        payload = point.payload
        if not payload:
            continue
        source = payload.get("source")
        wanted = hashes.get(source)
        if wanted is None or payload.get("doc_hash") != wanted:
            continue  # an older version, or one partly stored beside a complete one
        if times is not None:
            payload["id"] = str(point.id)
            payload["ingested_at"] = times[source]
        chunks = by_source.get(source)
        if chunks is None:
            chunks = by_source[source] = []
        chunks.append(payload)


_BY_INDEX = operator.itemgetter("chunk_index")


def _chunk_index(chunk: dict[str, Any]) -> int:
    return chunk.get("chunk_index", 0)


class Needle:
    """A text to find, each occurrence once (none overlapping), case ignored unless
    `case_sensitive`: as `re` finds it (`re.IGNORECASE`: Unicode's simple case folding).

    Ignoring case, `re` compares character by character (~5 ms a MB). For a needle and a
    text both ASCII, Unicode's case rules are ASCII's and lower-casing keeps every offset,
    so the needle lower-cased is found in the text lower-cased at a plain search's speed,
    at the same offsets. (Outside ASCII they differ: `re` finds "s" in "ſ" and "i" in "İ",
    which lower-case to other strings; there `re` searches.)"""

    def __init__(self, text: str, case_sensitive: bool = False) -> None:
        escaped = re.escape(text)
        flags = 0 if case_sensitive else re.IGNORECASE
        self.pattern = re.compile(escaped, flags)
        folded = not case_sensitive and text.isascii()
        self._lowered = re.compile(re.escape(text.lower())) if folded else None
        # For `may_occur`: the needle and its proper beginnings followed by a chunk's end
        # (NUL), as a plain search finds them (in text lower-cased where case is ignored in
        # ASCII) and as `re` does in other text. A needle that may start in the blank
        # between two chunks, or whose beginnings would make too long a pattern, may occur
        # in any source.
        self._anywhere = text[:1] in ("", " ", "\n") or "\0" in text or len(text) > 200
        self._plain: str | None = None
        if not self._anywhere:
            self._plain = text.lower() if folded else text if case_sensitive else None
            self._heads = re.compile(_beginnings(self._plain or text) + "\0")
            self._either = re.compile(f"{escaped}|{_beginnings(text)}\0", flags)

    def offsets(self, text: str) -> list[int]:
        """Where it occurs in `text`."""
        if self._lowered is not None and text.isascii():
            return [m.start() for m in self._lowered.finditer(text.lower())]
        return [m.start() for m in self.pattern.finditer(text)]

    def may_occur(self, texts: Iterable[str]) -> bool:
        """Whether a source's stored text, laid out from chunks of these texts, may hold the
        needle: False only where it cannot.

        Laid out, a source's text is a part of each chunk's text that ends it (the overlap
        with the chunk before taken once), and between two parts the line breaks or space
        they left out. An occurrence that starts in a chunk's part either ends in it, and is
        in that chunk's text, or runs past its end, and that text ends with a beginning of
        the needle shorter than it (case ignored, a character matches one character). One
        that starts in the blank between two parts starts with a space or a line break: such
        a needle may occur anywhere. So a source none of whose chunks holds the needle or
        ends with a proper beginning of it does not hold it, and is not laid out."""
        if self._anywhere:
            return True
        joined = "\0".join(texts) + "\0"
        if self._plain is not None and (self._lowered is None or joined.isascii()):
            if self._lowered is not None:
                joined = joined.lower()
            return self._plain in joined or self._heads.search(joined) is not None
        return self._either.search(joined) is not None


def _beginnings(text: str) -> str:
    """A pattern of the proper beginnings of `text`: its first character, then as many of the
    next as follow, up to all but its last (a text of one character: that character)."""
    pattern = ""
    for character in reversed(text[1:-1]):
        pattern = f"(?:{re.escape(character)}{pattern})?"
    return re.escape(text[0]) + pattern


def find_all(text: str, needle: str, case_sensitive: bool = False) -> Iterator[int]:
    """The offsets where `needle` occurs in `text`, each occurrence once (none overlapping),
    case ignored unless `case_sensitive`."""
    if needle:
        yield from Needle(needle, case_sensitive).offsets(text)


def count_in(stored: StoredSource, needle: str, case_sensitive: bool, places: int) -> Match:
    """Count `needle` in a source's stored text; the lines of its first `places` occurrences."""
    text = stored.text
    offsets = list(find_all(text, needle, case_sensitive))
    found: list[Line] = []
    if offsets and places:
        line, at = 0, 0
        for offset in offsets[:places]:
            while line + 1 < len(stored.lines) and at + len(stored.lines[line].text) < offset:
                at += len(stored.lines[line].text) + 1
                line += 1
            found.append(stored.lines[line])
    return Match(len(offsets), found)


def list_sources(
    store: KnowledgeStore,
    names: Iterable[str] | None = None,
    contains: str | None = None,
    case_sensitive: bool = False,
    places: int = 3,
) -> list[Listed]:
    """The store's sources (those of `names`, else all), in name order, each with its title,
    kind, size and times; with `contains`, only those whose stored text holds it, each with
    its exact count and the lines of its first `places` occurrences."""
    wanted = None if names is None else sorted(set(names))
    if wanted is not None and not wanted:
        return []
    files = _recorded_files(store)
    listed: list[Listed] = []
    if contains:
        with collector_paused():
            return _matching_sources(store, wanted, Needle(contains, case_sensitive), places, files)
    named = titles(store)
    for source, info in sorted(store.sources().items()):
        if wanted is not None and source not in wanted:
            continue
        size, modified = files.get(source, (None, None))
        listed.append(
            Listed(
                source,
                info.chunks,
                None,
                named.get(source),
                kind_of(source),
                size,
                modified,
                info.ingested_at,
            )
        )
    return listed


def _matching_sources(
    store: KnowledgeStore,
    wanted: list[str] | None,
    needle: Needle,
    places: int,
    files: dict,
) -> list[Listed]:
    """The listing entries of the sources (of `wanted`, else all) whose stored text holds
    `needle`, in name order. Their chunks are let go on return, within the caller's pause
    of the collector (`collector_paused`)."""
    current = store.sources()
    by_source = _current_chunks(store, current, wanted, False)
    listed = []
    for source in sorted(by_source):
        chunks = by_source[source]
        if not needle.may_occur([chunk.get("text", "") for chunk in chunks]):
            continue
        if entry := _matching(source, chunks, needle, places, files, current[source]):
            listed.append(entry)
    return listed


_FIRST_HEADING = re.compile(r"^[ \t]{0,3}#{1,6}[ \t]+(\S.*?)[ \t#]*$", re.MULTILINE)


def _matching(
    source: str,
    chunks: list[dict[str, Any]],
    needle: Needle,
    places: int,
    files: dict,
    info: SourceInfo,
) -> Listed | None:
    """A source's listing entry when its stored text holds `needle` (None otherwise):
    counted over the text as `assemble` lays it out, without making its lines."""
    file_lines, sections, title = _sections(chunks)
    texts = ["".join(section.parts) for section in sections]
    text = "\n".join(texts)
    offsets = needle.offsets(text)
    if not offsets:
        return None
    found: list[Line] = []
    index, section_start, number = 0, 0, 1  # `number`: the first line of a section
    for offset in offsets[:places]:
        while offset > section_start + len(texts[index]):
            number += texts[index].count("\n") + 1
            section_start += len(texts[index]) + 1
            index += 1
        section = sections[index]
        within = offset - section_start
        start = texts[index].rfind("\n", 0, within) + 1
        end = texts[index].find("\n", within)
        first = section.first_n if file_lines else number
        found.append(
            Line(
                first + texts[index].count("\n", 0, within),
                texts[index][start : None if end < 0 else end],
                section.page,
                section.sheet,
            )
        )
    size, modified = files.get(source, (None, None))
    heading = _FIRST_HEADING.search(text)
    return Listed(
        source,
        len(chunks),
        len(text),
        title or (heading_title(heading.group(1)) if heading else None),
        kind_of(source),
        size,
        modified,
        info.ingested_at,
        Match(len(offsets), found),
    )


def _entry(stored: StoredSource, files: dict, match: Match | None) -> Listed:
    size, modified = files.get(stored.source, (None, None))
    return Listed(
        stored.source,
        stored.chunks,
        sum(len(line.text) + 1 for line in stored.lines) - 1,
        stored.title or _first_heading(stored),
        kind_of(stored.source),
        size,
        modified,
        stored.ingested_at,
        match,
    )


def describe_source(store: KnowledgeStore, stored: StoredSource) -> Listed:
    """A source's listing entry, from its stored text."""
    return _entry(stored, _recorded_files(store), None)


def _first_heading(stored: StoredSource) -> str | None:
    headings = stored.headings()
    return headings[0][2] if headings else None


def _recorded_files(store: KnowledgeStore) -> dict[str, tuple[int, float]]:
    """(size in bytes, modification time) of each source the store's roots recorded."""
    roots = store.info().get("roots") or []
    found: dict[str, tuple[int, float]] = {}
    for root in roots:
        prefix = "" if len(roots) == 1 else f"{root.get('label')}/"
        for name, record in unpacked_records(root.get("files")).items():
            if isinstance(record, list) and len(record) >= 2:
                source = root.get("label") if root.get("kind") == "file" and prefix else None
                found[source or prefix + name] = (record[0], record[1] / 1e9)
    return found


def titles(store: KnowledgeStore) -> dict[str, str]:
    """Each source's title: the document's own, else the heading its text starts with."""
    m = store.records
    first = m.Filter(must=[m.FieldCondition(key="chunk_index", match=m.MatchValue(value=0))])
    found: dict[str, str] = {}
    for points in scroll_pages(store.client, store.name, 4096, first, _FIELDS):
        for point in points:
            payload = point.payload or {}
            named = (payload.get("metadata") or {}).get("title")
            if not named:
                line = next((t for t in payload.get("text", "").splitlines() if t.strip()), "")
                match = _HEADING.match(line)
                named = heading_title(match.group(2)) if match else None
            if named:
                found[payload["source"]] = str(named)
    return found


def titled_sources(store: KnowledgeStore, title: str) -> list[str]:
    """The sources whose title (the document's own, else its first heading) is `title`,
    case ignored."""
    wanted = title.strip().casefold()
    return sorted(source for source, named in titles(store).items() if named.casefold() == wanted)
