"""The document tools beside each store's search: `list_<store>` and `read_<store>`.

`list_<store>` names the store's sources, filtered by a name pattern and by a text they
contain (every match, with exact counts from the stored text); `read_<store>` shows one
source in order, as stored: whole, or by lines, page or sheet, heading, or around a passage
the turn already found (`around=n` for citation [n]). Both are forgiving of how a small model
names a source (its unique name, a folder, a title, a close misspelling), answer with errors
it can act on, and page what they show to the room the context window leaves, each page
saying where it is and what is left.

People reach the same functions through `archivist sources --contains` and `archivist read`
(`list_documents`, `read_document`); MCP serves them as tools and resources.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from archivist.agent.records import Passage
from archivist.agent.retrieval import nearest_text
from archivist.tools.documents import (
    Line,
    Listed,
    StoredSource,
    kind_of,
    list_sources,
    place_of,
    stored_source,
    titled_sources,
)
from archivist.tools.errors import ArchivistError

if TYPE_CHECKING:
    from langchain_core.tools import BaseTool

    from archivist.tools.store import KnowledgeStore

TOOL_KIND = "archivist_tool"
"""The key of a tool's metadata naming which of a store's tools it is: list or read."""
TOOLSETS = ("search", "all")
"""The tool choices of `--tools`: each store's search alone, or search, list and read."""
DEFAULT_TOOLSET = "search"
PAGE_TOKENS = 1500
"""The most a page of a listing or a reading shows when no context window says otherwise."""
MAX_PAGE_TOKENS = 6000
"""The most a page shows however much room the window leaves: a reading is for the model to
answer from, and a page this long is as much as a small model reads well at once."""
LISTED_PLACES = 3
PATTERN_MAX = 300
CONTAINS_MAX = 300
_LINES = re.compile(r"^\s*(\d+)\s*(?:(?:-|:|–|\.\.|to)\s*(\d*)\s*)?$")
_GLOB = re.compile(r"[*?\[]")


def checked_toolset(tools: str | None) -> str:
    """The toolset asked for (the default when None); ArchivistError for an unknown one."""
    chosen = (tools or DEFAULT_TOOLSET).strip().lower()
    if chosen not in TOOLSETS:
        raise ArchivistError(
            f"--tools {tools} is not a toolset.",
            "Give --tools search (each store's search) or --tools all (search, list and read).",
        )
    return chosen


def list_name(store: str) -> str:
    """Name a store's listing tool after it."""
    return f"list_{store}"


def read_name(store: str) -> str:
    """Name a store's reading tool after it."""
    return f"read_{store}"


class DocumentError(ValueError):
    """A list or read the store cannot answer as asked; the message says what to do instead."""


# --- naming a source -----------------------------------------------------------------------


def resolve_source(store: KnowledgeStore, name: str, tool: str) -> tuple[str, str | None]:
    """The one source `name` means: its exact name, a unique end of a path, a folder or prefix
    holding one source, a title, or a close misspelling; with a note when it was a guess.
    DocumentError naming the candidates (or how to list them) otherwise."""
    wanted = name.strip().strip("'\"`").strip()
    if not wanted:
        raise DocumentError(f"`source` is empty: name the document to read. {list_name_of(tool)}")
    if found := store.find_source(wanted):
        return found, None
    matches = store.match_sources(wanted)
    if len(matches) == 1:
        return matches[0], None
    if len(matches) > 1:
        shown = ", ".join(matches[:8]) + (", …" if len(matches) > 8 else "")
        raise DocumentError(
            f"'{wanted}' names {len(matches)} sources: {shown}. Call {tool} with one of them."
        )
    names = store.source_names()
    titled = titled_sources(store, wanted)
    if len(titled) == 1:
        return titled[0], f"'{wanted}' is the title of {titled[0]}."
    said = set(_NAME_WORDS.findall(wanted.casefold()))
    named = [n for n in names if (stem := _stem_words(n)) and stem <= said]
    if len(named) == 1:
        return named[0], f"'{wanted}' is taken to mean {named[0]}."
    keyed = {n.casefold(): n for n in names}
    keyed.update({n.rsplit("/", 1)[-1].casefold(): n for n in names})
    close = difflib.get_close_matches(wanted.casefold(), list(keyed), n=3, cutoff=0.75)
    candidates = list(dict.fromkeys(keyed[c] for c in close))
    if len(candidates) == 1:
        return candidates[0], f"There is no '{wanted}'; this is the closest name, {candidates[0]}."
    if candidates:
        raise DocumentError(
            f"No source is called '{wanted}'. Did you mean {' or '.join(candidates)}? "
            f"Call {tool} with one of them."
        )
    raise DocumentError(
        f"No source in '{store.name}' is called '{wanted}'. {nearest_text(wanted, names)} "
        f"{list_name_of(tool)}"
    )


_NAME_WORDS = re.compile(r"\w+")


def _stem_words(source: str) -> set[str]:
    """The words of a source's file name without its extension (`refund-policy.md`:
    refund, policy)."""
    stem = source.rsplit("/", 1)[-1].rsplit(".", 1)[0]
    return set(_NAME_WORDS.findall(stem.casefold().replace("_", " ")))


def list_name_of(tool: str) -> str:
    store = tool.split("_", 1)[1] if "_" in tool else tool
    return f"Call {list_name(store)} to see every source's name."


# --- reading -------------------------------------------------------------------------------


@dataclass
class Reading:
    """A part of one source, as asked for: its lines, and what the whole holds."""

    source: str
    stored: StoredSource
    first: int
    """Index in the stored lines of the first line asked for."""
    last: int
    """Index of the last line asked for (inclusive)."""
    part: str
    """What was asked for, in words: `the whole document`, `page 3`, `lines 10-40`, …"""
    notes: list[str] = field(default_factory=list)

    @property
    def lines(self) -> list[Line]:
        return self.stored.lines[self.first : self.last + 1]

    def as_dict(self) -> dict[str, Any]:
        """The JSON shape `archivist read --json` prints."""
        stored = self.stored
        return {
            "source": self.source,
            "title": stored.title,
            "kind": kind_of(self.source),
            "part": self.part,
            "file_lines": stored.file_lines,
            "total_lines": [stored.lines[0].n, stored.lines[-1].n] if stored.lines else [],
            "lines": [{"n": line.n, "text": line.text, **_where(line)} for line in self.lines],
            "notes": self.notes,
        }


def _where(line: Line) -> dict[str, Any]:
    return {k: v for k, v in place_of(line).items() if k != "line"}


def read_document(
    store: KnowledgeStore,
    source: str,
    lines: str | Sequence[int] | None = None,
    page: int | str | None = None,
    heading: str | None = None,
    around: Passage | None = None,
    tool: str | None = None,
) -> Reading:
    """Read one source (named as `resolve_source` allows), or the part of it asked for: by
    `lines` ("A-B", "A-", "A"), `page` (a PDF page or slide number, a sheet's name or
    number), `heading` (a heading's words: its section), or `around` a passage found before.
    DocumentError saying what to ask instead when the part is not there."""
    tool = tool or read_name(store.name)
    asked = [k for k, v in (("lines", lines), ("page", page), ("heading", heading)) if v]
    if around is not None:
        source = around["source"]
    name, note = resolve_source(store, source, tool)
    stored = stored_source(store, name)
    if stored is None or not stored.lines:
        raise DocumentError(f"{name} holds no stored text. {list_name_of(tool)}")
    notes = [note] if note else []
    if len(asked) > 1:
        notes.append(f"Read by {asked[0]} only: give one of lines, page or heading at a time.")
    if around is not None:
        first, last, part = _around(stored, around)
    elif lines:
        first, last, part = _by_lines(stored, lines, tool)
    elif page not in (None, ""):
        first, last, part = _by_page(stored, page, tool)
    elif heading:
        first, last, part = _by_heading(stored, heading, tool)
    else:
        first, last, part = 0, len(stored.lines) - 1, "the whole document"
    return Reading(name, stored, first, last, part, notes)


def _by_lines(stored: StoredSource, lines: str | Sequence[int], tool: str) -> tuple[int, int, str]:
    if isinstance(lines, str):
        match = _LINES.match(lines)
        if not match:
            raise DocumentError(
                f"lines='{lines}' is not a range: give it as '10-40' (or '10-' to the end). "
                f"Call {tool} again."
            )
        low = int(match.group(1))
        upper = match.group(2)  # None: one line; "": to the end
        high = low if upper is None else int(upper) if upper else stored.lines[-1].n
    else:
        values = [int(v) for v in lines]
        if not values:
            raise DocumentError(f"lines is empty: give a range such as '10-40'. Call {tool} again.")
        low, high = values[0], values[-1]
    numbers = [line.n for line in stored.lines]
    if low > numbers[-1] or high < numbers[0] or high < low:
        raise DocumentError(
            f"{stored.source} has lines {numbers[0]}-{numbers[-1]}; lines {low}-{high} are not "
            f"in it. Call {tool} with a range inside it."
        )
    first = next(i for i, n in enumerate(numbers) if n >= low)
    last = max(i for i, n in enumerate(numbers) if n <= high)
    return first, last, f"lines {numbers[first]}-{numbers[last]}"


def _by_page(stored: StoredSource, page: int | str, tool: str) -> tuple[int, int, str]:
    sections = stored.sections()
    if not sections:
        raise DocumentError(
            f"{stored.source} has no pages or sheets: read it by lines "
            f"({stored.lines[0].n}-{stored.lines[-1].n}) or by heading. Call {tool} again."
        )
    wanted = str(page).strip()
    for key, first, last in sections:
        if str(key).casefold() == wanted.casefold():
            return first, last, f"page {key}" if isinstance(key, int) else f"sheet {key}"
    if wanted.isdigit() and all(isinstance(k, str) for k, _, _ in sections):
        index = int(wanted) - 1  # a sheet by its number
        if 0 <= index < len(sections):
            key, first, last = sections[index]
            return first, last, f"sheet {key}"
    shown = ", ".join(str(k) for k, _, _ in sections[:20])
    kind = "pages" if isinstance(sections[0][0], int) else "sheets"
    raise DocumentError(
        f"{stored.source} has no page '{wanted}'. Its {kind}: {shown}. "
        f"Call {tool} with one of them."
    )


def _by_heading(stored: StoredSource, heading: str, tool: str) -> tuple[int, int, str]:
    headings = stored.headings()
    wanted = heading.strip().lstrip("#").strip().casefold()
    exact = [h for h in headings if h[2].casefold() == wanted]
    found = exact or [h for h in headings if wanted in h[2].casefold()]
    if not found:
        titles = [h[2] for h in headings]
        close = difflib.get_close_matches(heading.strip(), titles, n=1, cutoff=0.6)
        if close:
            found = [h for h in headings if h[2] == close[0]]
    if not found:
        shown = "; ".join(h[2] for h in headings[:15]) or "none"
        raise DocumentError(
            f"{stored.source} has no heading '{heading}'. Its headings: {shown}. "
            f"Call {tool} with one of them, or by lines."
        )
    index, level, title = found[0]
    end = next((i - 1 for i, lv, _ in headings if i > index and lv <= level), None)
    last = len(stored.lines) - 1 if end is None else end
    return index, last, f"the section '{title}'"


def _around(stored: StoredSource, passage: Passage) -> tuple[int, int, str]:
    """From a little before a passage to the end of the source (the page cuts it short)."""
    numbers = [line.n for line in stored.lines]
    at = None
    lines = (passage.get("metadata") or {}).get("lines") or passage.get("lines")
    if stored.file_lines and isinstance(lines, list) and lines:
        at = next((i for i, n in enumerate(numbers) if n >= lines[0]), None)
    if at is None:
        at = stored.chunk_lines.get(passage.get("chunk_id", ""))
    if at is None:
        snippet = passage.get("text", "").strip().splitlines()[:1]
        text = stored.text
        offset = text.find(snippet[0]) if snippet else -1
        at = text.count("\n", 0, offset) if offset >= 0 else 0
    first = max(at - 3, 0)
    return first, len(stored.lines) - 1, f"around [{passage.get('n', '?')}]"


def cited_passage(turn: Sequence[Passage], around: int | str, tool: str) -> Passage:
    """The turn's passage numbered `around` (`2`, `"[2]"`); DocumentError naming the numbers
    the turn has otherwise."""
    digits = re.sub(r"\D", "", str(around))
    numbers = {p.get("n"): p for p in turn}
    if digits and int(digits) in numbers:
        return numbers[int(digits)]
    have = ", ".join(f"[{n}]" for n in sorted(n for n in numbers if n is not None)) or "none yet"
    raise DocumentError(
        f"There is no passage [{around}] in this conversation turn (found so far: {have}). "
        f"Call {tool} with `source` instead, or around one of these."
    )


def page_of(lines: Sequence[Line], budget: int) -> int:
    """How many of `lines` fit `budget` tokens (at least one)."""
    # The context guard's estimate; imported here, since a person's list or read (the CLI)
    # renders nothing for a model and need not import LangChain's messages.
    from archivist.agent.context import estimate_tokens

    used, shown = 0, 0
    for line in lines:
        used += estimate_tokens(line.text) + 1
        if shown and used > budget:
            break
        shown += 1
    return max(shown, 1)


def _range(lines: Sequence[Line]) -> str:
    return f"{lines[0].n}-{lines[-1].n}" if lines[0].n != lines[-1].n else str(lines[0].n)


def render_reading(reading: Reading, tool: str, n: int, budget: int | None) -> tuple[str, Passage]:
    """One page of a reading for the model (numbered `n` for citations), within `budget`
    tokens; the page's text says where it is in the document and how to read what is left."""
    from html import escape

    budget = min(budget or PAGE_TOKENS, MAX_PAGE_TOKENS)
    asked = reading.lines
    # The page's own words (where it is, what is left) take about this many tokens.
    shown = asked[: page_of(asked, max(budget - 80, 40))]
    stored = reading.stored
    text = _with_page_marks(shown)
    whole = stored.lines
    where = f"lines {_range(shown)} of {whole[0].n}-{whole[-1].n}"
    pages = sorted({line.page for line in shown if line.page is not None})
    if pages:
        where += f", page{'s' if len(pages) > 1 else ''} {_range_of(pages)}"
    attrs = f'n="{n}" source="{escape(reading.source)}" lines="{_range(shown)}"'
    if pages:
        attrs += f' page="{pages[0]}"'
    head = f'<document tool="{escape(tool)}" source="{escape(reading.source)}"'
    if stored.title:
        head += f' title="{escape(stored.title)}"'
    head += f' part="{_attr(reading.part)}">'
    out = [head, *reading.notes, f"<result {attrs}>", escape(text, quote=False), "</result>"]
    left = asked[len(shown) :]
    if left:
        rest = f"{left[0].n}-{left[-1].n}"
        out.append(
            f"Shown: {where}. Not yet shown: lines {rest} of this part. For the rest call "
            f'{tool}(source="{reading.source}", lines="{rest}").'
        )
    else:
        out.append(f"Shown: {where}. This is the end of {reading.part}.")
    out.append("</document>")
    passage: Passage = {
        "rank": 1,
        "score": 1.0,
        "source": reading.source,
        "chunk_id": _chunk_at(stored, reading.first),
        "text": text,
        "metadata": {
            **({"lines": [shown[0].n, shown[-1].n]} if stored.file_lines else {}),
            **({"page": pages[0]} if pages else {}),
            **({"sheet": shown[0].sheet} if shown[0].sheet else {}),
            "read": True,
        },
    }
    return "\n".join(out), passage


def _attr(text: str) -> str:
    """A value for a double-quoted attribute: markup and double quotes escaped."""
    from html import escape

    return escape(text, quote=False).replace('"', "&quot;")


def _with_page_marks(lines: Sequence[Line]) -> str:
    out, page = [], lines[0].page if lines else None
    for line in lines:
        if line.page != page and line.page is not None:
            out.append(f"[page {line.page}]")
            page = line.page
        out.append(line.text)
    return "\n".join(out)


def _range_of(values: Sequence[int]) -> str:
    return str(values[0]) if len(values) == 1 else f"{values[0]}-{values[-1]}"


def _chunk_at(stored: StoredSource, index: int) -> str:
    """The id of the chunk the line at `index` is in."""
    best, at = "", -1
    for chunk_id, start in stored.chunk_lines.items():
        if at < start <= index or (not best):
            best, at = chunk_id, start
    return best


# --- listing -------------------------------------------------------------------------------


def list_documents(
    store: KnowledgeStore,
    path: str | None = None,
    contains: str | None = None,
    case_sensitive: bool = False,
) -> list[Listed]:
    """The sources whose name fits `path` (a name, a folder, a prefix or a glob) and whose
    stored text holds `contains`: every one, with exact counts. DocumentError when `path`
    names nothing (with the closest names)."""
    names = None
    if path and path.strip() not in ("", "*", "/", ".", "all"):
        pattern = path.strip()
        if _GLOB.search(pattern):
            import fnmatch

            names = [
                n
                for n in store.source_names()
                if fnmatch.fnmatch(n.casefold(), pattern.casefold())
                or fnmatch.fnmatch(n.rsplit("/", 1)[-1].casefold(), pattern.casefold())
            ]
        else:
            names = store.match_sources(pattern)
        if not names:
            close = difflib.get_close_matches(pattern, store.source_names(), n=3, cutoff=0.6)
            hint = f" Did you mean {' or '.join(close)}?" if close else ""
            raise DocumentError(
                f"No source in '{store.name}' matches path '{pattern}'.{hint} Leave `path` out "
                "to list every source."
            )
    return list_sources(store, names, contains or None, case_sensitive, LISTED_PLACES)


def _entry_text(entry: Listed, contains: str | None) -> str:
    bits = [entry.kind or "document"]
    if entry.size is not None:
        bits.append(f"{entry.size:,} bytes")
    else:
        bits.append(f"{entry.chunks} chunks")
    text = entry.source
    if entry.title:
        text += f" — {entry.title}"
    text += f" ({', '.join(bits)})"
    if entry.match is not None:
        places = ", ".join(_place_words(line) for line in entry.match.places)
        times = "once" if entry.match.count == 1 else f"{entry.match.count} times"
        text += f": '{contains}' {times}, at {places}"
    return text


def _place_words(line: Line) -> str:
    if line.page is not None:
        return f"page {line.page} line {line.n}"
    if line.sheet is not None:
        return f"sheet {line.sheet} line {line.n}"
    return f"line {line.n}"


def render_listing(
    entries: Sequence[Listed],
    tool: str,
    args: dict[str, Any],
    first_n: int,
    budget: int | None,
) -> tuple[str, list[Passage]]:
    """One page of a listing for the model (entries numbered from `first_n`), within `budget`
    tokens: the totals first, then the entries, then how to see the rest."""
    from html import escape

    budget = min(budget or PAGE_TOKENS, MAX_PAGE_TOKENS)
    contains = args.get("contains") or None
    page = max(int(args.get("page") or 1), 1)
    texts = [_entry_text(e, contains) for e in entries]
    per_page = max(page_of([Line(0, t) for t in texts], budget - 60), 1) if texts else 1
    start = (page - 1) * per_page
    shown = list(range(start, min(start + per_page, len(entries))))
    total = len(entries)
    attrs = f'tool="{escape(tool)}" total="{total}"'
    if contains:
        occurrences = sum(e.match.count for e in entries if e.match)
        attrs += f' contains="{escape(contains)}" occurrences="{occurrences}"'
    if args.get("path"):
        attrs += f' path="{escape(str(args["path"]))}"'
    out = [f"<source_list {attrs}>"]
    if contains:
        occurrences = sum(e.match.count for e in entries if e.match)
        out.append(
            f"{_sources(total)} {'contains' if total == 1 else 'contain'} '{contains}', "
            f"{occurrences} {'time' if occurrences == 1 else 'times'} in all "
            "(exact counts over the stored text)."
            if total
            else f"No source contains '{contains}' (searched the whole stored text)."
        )
    else:
        out.append(f"{_sources(total)} in all." if total else "No source matches.")
    passages: list[Passage] = []
    for i, index in enumerate(shown):
        entry, n = entries[index], first_n + i
        out.append(f'<result n="{n}" source="{escape(entry.source)}">')
        out.append(escape(texts[index], quote=False))
        out.append("</result>")
        places = entry.match.places if entry.match else []
        metadata: dict[str, Any] = {"listed": True}
        if places:
            metadata.update({k: v for k, v in place_of(places[0]).items() if k != "line"})
        passages.append(
            {
                "rank": index + 1,
                "score": float(entry.match.count if entry.match else 0),
                "source": entry.source,
                "chunk_id": "",
                "text": texts[index],
                "metadata": metadata,
            }
        )
    if total and shown and shown[-1] + 1 < total:
        call = ", ".join(f'{k}="{v}"' for k, v in args.items() if v and k != "page")
        more = f"{call}, " if call else ""
        out.append(
            f"Shown: {shown[0] + 1}-{shown[-1] + 1} of {total}. For more call "
            f"{tool}({more}page={page + 1})."
        )
    elif total and not shown:
        out.append(f"Page {page} is past the end: the listing has {total} entries.")
    out.append("</source_list>")
    return "\n".join(out), passages


def _sources(n: int) -> str:
    return "1 source" if n == 1 else f"{n:,} sources"


# --- without a tool-calling model -------------------------------------------------------

_QUOTED = re.compile(r"[\"'`“‘「]([^\"'`”’」]{1,80})[\"'`”’」]")
_COUNTING = re.compile(
    r"\b(?:how many|how often|which|what|list|count|find all|all the)\b.*?"
    r"\b(?:mention|mentions|contain|contains|say|says|include|includes|refer to|use|uses)\b"
    r"\s*(.*?)[?.!]*$",
    re.IGNORECASE,
)
_SUMMARY = re.compile(
    r"\b(?:summari[sz]e|summary of|outline|what does)\s+(?:the\s+)?(.+?)"
    r"(?:\s+(?:say|says|cover|covers))?[?.!]*$",
    re.IGNORECASE,
)


def planned_calls(question: str, tools: Sequence[BaseTool]) -> list[tuple[BaseTool, dict]]:
    """The list and read calls a question asks for, as a capable model would make them: which
    or how many documents mention a text (`list` with `contains`, the text quoted or after the
    verb), a summary of a named document (`read`); none for other questions. For
    retrieve-then-answer, where no model chooses tools."""
    planned: list[tuple[BaseTool, dict]] = []
    kinds = [(tool, (tool.metadata or {}).get(TOOL_KIND)) for tool in tools]
    if counting := _COUNTING.search(question):
        quoted = _QUOTED.search(question)
        term = (quoted.group(1) if quoted else counting.group(1)).strip(" \"'`")
        if term:
            planned += [(t, {"contains": term}) for t, kind in kinds if kind == "list"]
    elif summary := _SUMMARY.search(question):
        name = summary.group(1).strip(" \"'`")
        planned += [(t, {"source": name}) for t, kind in kinds if kind == "read"]
    return planned


def described_call(call: dict[str, Any]) -> str:
    """A list or read call in words, for a block of results that has no query."""
    args = call.get("args") or {}
    if args.get("contains"):
        total = sum(int(r.get("score", 0)) for r in call.get("results", []))
        found = len(call.get("results", []))
        return (
            f"sources containing '{args['contains']}': {_sources(found)}, {total} times in all "
            "(exact counts)"
        )
    shown = ", ".join(f"{k}={v}" for k, v in args.items() if v not in (None, ""))
    return f"read {shown}" if shown else call.get("name", "")


# --- the tools -----------------------------------------------------------------------------


class DocumentReply(list):
    """A list or read tool's artifact: its passages, with how to render a page of it within a
    token budget (the agent renders it to the room its window leaves, numbering the passages
    for the turn)."""

    def __init__(self, render: Callable[[int, int | None], tuple[str, list[Passage]]]) -> None:
        super().__init__()
        self.render = render


def make_list_tool(store: KnowledgeStore) -> BaseTool:
    """Build the `list_<store>` tool."""
    from langchain_core.tools import ToolException

    from archivist.agent.document_args import ListArgs

    name = list_name(store.name)

    def run(
        path: str | None = None,
        contains: str | None = None,
        page: int | str | None = None,
    ) -> tuple[str, DocumentReply]:
        try:
            entries = list_documents(store, path, contains)
        except DocumentError as exc:
            raise ToolException(str(exc)) from None
        args = {"path": path, "contains": contains, "page": page}

        def render(first: int, budget: int | None) -> tuple[str, list[Passage]]:
            return render_listing(entries, name, args, first, budget)

        return replied(render)

    return document_tool(run, name, describe_list(store), ListArgs, "list")


def make_read_tool(store: KnowledgeStore) -> BaseTool:
    """Build the `read_<store>` tool."""
    from langchain_core.tools import ToolException

    from archivist.agent.document_args import ReadArgs

    name = read_name(store.name)

    def run(
        source: str | None = None,
        lines: str | list[int] | None = None,
        page: int | str | None = None,
        heading: str | None = None,
        around: int | str | None = None,
        turn: list[dict[str, Any]] | None = None,
    ) -> tuple[str, DocumentReply]:
        try:
            passage = None
            if around not in (None, ""):
                passage = cited_passage(turn or [], around, name)  # type: ignore[arg-type]
            elif not source:
                raise DocumentError(f"Name the document to read in `source`. {list_name_of(name)}")
            reading = read_document(store, source or "", lines, page, heading, passage, tool=name)
        except (DocumentError, ArchivistError) as exc:
            raise ToolException(str(exc)) from None

        def render(first: int, budget: int | None) -> tuple[str, list[Passage]]:
            content, shown = render_reading(reading, name, first, budget)
            return content, [shown]

        return replied(render)

    return document_tool(run, name, describe_read(store), ReadArgs, "read")


def replied(render: Callable[[int, int | None], tuple[str, list[Passage]]]) -> tuple[str, Any]:
    """A document tool's answer: its text rendered whole, and the reply the turn renders again
    to its budget and numbering (`render_reply`)."""
    reply = DocumentReply(render)
    content, passages = render(1, None)
    reply.extend(passages)
    return content, reply


def document_tool(run: Callable, name: str, description: str, schema: type, kind: str) -> Any:
    """A list or read tool as LangChain runs it: its text for the model, its reply as the
    artifact, its kind in its metadata."""
    from langchain_core.tools import StructuredTool

    return StructuredTool.from_function(
        func=run,
        name=name,
        description=description,
        args_schema=schema,
        response_format="content_and_artifact",
        metadata={TOOL_KIND: kind},
    )


def describe_list(store: KnowledgeStore) -> str:
    """Tell the model what `list_<store>` does and when to use it."""
    return (
        f"List the documents in the knowledge base '{store.name}': every source whose name "
        "fits `path` and whose text contains `contains` (exact words, case ignored), with "
        "exact counts and where they occur. Use it to find which or how many documents "
        f"mention something, or what the store holds; {tool_hint(store.name)}"
    )


def describe_read(store: KnowledgeStore) -> str:
    """Tell the model what `read_<store>` does and when to use it."""
    return (
        f"Read one document of the knowledge base '{store.name}' in order, as stored: the "
        "whole of it, or `lines` ('10-40'), a `page` (PDF page or sheet), a `heading`'s "
        "section, or `around` a passage number [n] found earlier. Use it to summarize a "
        "document or to see what comes before or after a passage. Long parts come a page at "
        "a time; the reply says how to read the rest. Cite it as [n]."
    )


def tool_hint(store: str) -> str:
    return f"then read one with read_{store}. For a specific fact, use search_{store}."


def document_tools(store: KnowledgeStore) -> list[BaseTool]:
    """The list and read tools of a store."""
    return [make_list_tool(store), make_read_tool(store)]


def is_document_tool(tool: BaseTool) -> bool:
    """Whether a tool is a store's list or read tool (not its search)."""
    return (tool.metadata or {}).get(TOOL_KIND) in ("list", "read")


def takes_turn(tool: BaseTool) -> bool:
    """Whether a tool is handed the turn's passages (a read, for `around`)."""
    return (tool.metadata or {}).get(TOOL_KIND) == "read"


def render_reply(artifact: Any, first: int, budget: int | None) -> tuple[str, list[Passage]] | None:
    """A document tool's reply rendered for the turn (None: the artifact is a search's)."""
    if not isinstance(artifact, DocumentReply):
        return None
    return artifact.render(first, budget)


def person_error(exc: DocumentError, store: str, flag: str) -> ArchivistError:
    """A tool's error worded for a person at the command line."""
    message = re.sub(r" ?Call \w+ .*$", "", str(exc)).strip()
    return ArchivistError(
        message, f"Try again with {flag}; archivist sources --store {store} lists every source."
    )
