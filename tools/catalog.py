"""What a store holds of its sources: their versions, names and chunks, found by counting
(a facet of one indexed payload value per version) rather than reading; and the writes that
concern whole sources: removing one, renaming some, removing versions a newer one replaced.

`KnowledgeStore` has these methods (`SourceCatalog` is one of its bases); they use its engine
client, its name and its filters.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any

import orjson

from archivist.tools.engine import Engine, scroll_pages, turn_taking
from archivist.tools.passage import heading_path

if TYPE_CHECKING:
    from qdrant_client import models

SOURCE_FIELDS = ("source", "doc_hash", "doc_chunks", "ingested_at")


@dataclass
class SourceInfo:
    """What a store holds of one source."""

    source: str
    doc_hash: str
    chunks: int
    expected_chunks: int
    ingested_at: float

    @property
    def complete(self) -> bool:
        """Whether every chunk of the source's current version is stored."""
        return self.chunks == self.expected_chunks


class SourceMatch(list):
    """The sources a `source` filter refers to (a list of names), with `places`: the folders
    (`components/form/`) and files a name or path found, more than one when it is ambiguous
    (empty for a root label or a name prefix)."""

    def __init__(self, names: Iterable[str], places: Iterable[str] = ()) -> None:
        super().__init__(names)
        self.places = list(places)


def _named_places(wanted: str, names: list[str]) -> list[str]:
    """The folders whose path ends with `wanted` (lower case, no trailing `/`), each as
    `path/`, and the files whose name without its extension is `wanted`; none at all when no
    folder is named so (a file name alone is matched as a name prefix)."""
    folders: set[str] = set()
    files: list[str] = []
    for name in names:
        low = name.lower()
        at = -1
        while (at := low.find(wanted + "/", at + 1)) != -1:
            if at == 0 or low[at - 1] == "/":
                folders.add(name[: at + len(wanted)] + "/")
                break
        if low.rsplit("/", 1)[-1].rpartition(".")[0] == wanted:
            files.append(name)
    if not folders:
        return []
    return sorted(folders) + [f for f in files if not any(_under(f, d) for d in folders)]


def _under(name: str, place: str) -> bool:
    """Whether source `name` is the file `place`, or inside the folder `place` (`…/`)."""
    return name.startswith(place) if place.endswith("/") else name == place


class SourceCatalog:
    """A store's sources, their versions and chunks: a part of `KnowledgeStore`, whose
    `count`, `info`, `_match` (a payload condition) and `_held` (the store kept through a
    block) it uses."""

    client: Engine
    name: str
    records: ModuleType
    """The request records its engine takes (see `engine.records`)."""
    _partial: tuple[Any, list[str]] | None
    """(store generation, the versions stored in part), counted again when the first moves."""

    def delete_stale(self, source: str, doc_hash: str) -> None:
        """Remove a source's chunks from versions other than `doc_hash`."""
        self.client.delete(
            self.name,
            points_selector=self.records.Filter(
                must=[self._match("source", source)], must_not=[self._match("doc_hash", doc_hash)]
            ),
            wait=True,
        )

    def delete_source(self, source: str) -> int:
        """Remove every chunk of `source`; return how many there were."""
        selector = self.records.Filter(must=[self._match("source", source)])
        removed = self.client.count(self.name, count_filter=selector, exact=True).count
        if removed:
            self.client.delete(self.name, points_selector=selector, wait=True)
        return removed

    def rename_sources(self, renames: dict[str, str], batch: int = 256) -> int:
        """Give sources new names (old → new), their chunks kept as they are: vectors, ids and
        everything else; nothing is embedded again. Return how many chunks were renamed.

        Done by writing the points again, a layer at a time (`rename_layers`), so it can be
        cut short: running it again with the renames of the layers not yet done finishes it
        (a chunk already renamed is no longer found by its old name).
        """
        moved = 0
        for olds in rename_layers(renames):
            moved += self._rename_layer(olds, renames, batch)
        return moved

    def _rename_layer(self, olds: list[str], renames: dict[str, str], batch: int) -> int:
        moved = 0
        for start in range(0, len(olds), 512):
            m = self.records
            selector = m.Filter(must=[self._match("source", olds[start : start + 512])])
            while True:
                # Always the first page: the points renamed no longer match the filter.
                points, _ = self.client.scroll(
                    self.name,
                    scroll_filter=selector,
                    limit=batch,
                    with_payload=True,
                    with_vectors=True,
                )
                if not points:
                    break
                rewritten = []
                for p in points:
                    payload = dict(p.payload or {})
                    name = renames[payload["source"]]
                    payload["source"] = name
                    if "version" in payload:
                        payload["version"] = version_key(
                            name, payload["doc_hash"], payload["doc_chunks"], payload["ingested_at"]
                        )
                    rewritten.append(m.PointStruct(id=p.id, vector=p.vector, payload=payload))
                self.client.upsert(self.name, points=rewritten, wait=True)
                moved += len(rewritten)
        return moved

    def find_source(self, name: str) -> str | None:
        """Return the source called `name`: exactly, else its one Unicode twin (the same name
        composed or decomposed, as macOS writes file names), else None."""
        names = self.source_names()
        if name in names:
            return name
        twins = [n for n in names if _nfc(n) == _nfc(name)]
        return twins[0] if len(twins) == 1 else None

    def sources(self) -> dict[str, SourceInfo]:
        """Return each source's newest complete version (else its newest), from the payloads.

        Counted, not read: every chunk carries its version (source, content hash, chunk
        count, time) in one indexed payload value, and a facet counts the chunks per value.
        A store with chunks from before that field (or without its index) is read chunk by
        chunk instead.
        """
        return _newest(self._versions().values())

    def finish_replacements(self) -> list[str]:
        """Remove the versions older than a source's newest complete one (a run that stopped
        between storing a new version and removing the old one leaves both); return those
        sources. A newer, partly stored version is kept for the next run to finish."""
        superseded = self.superseded()
        for source, older in superseded.items():
            self.client.delete(
                self.name,
                points_selector=self.records.Filter(
                    must=[self._match("source", source), self._match("doc_hash", older)]
                ),
                wait=True,
            )
        return sorted(superseded)

    def superseded(self) -> dict[str, list[str]]:
        """The versions older than a source's newest complete one, which `finish_replacements`
        removes: their content hashes, by source."""
        return self.source_versions()[1]

    def source_versions(self) -> tuple[dict[str, SourceInfo], dict[str, list[str]]]:
        """`sources()` and `superseded()` together, from one count of the versions (a store
        of 100,000 sources counts them in half a second)."""
        versions = self._versions().values()
        newest = _newest(versions)
        superseded: dict[str, list[str]] = {}
        for v in versions:
            kept = newest[v.source]
            if kept.complete and v.ingested_at < kept.ingested_at:
                superseded.setdefault(v.source, []).append(v.doc_hash)
        return newest, superseded

    def _versions(self) -> dict[tuple[str, str], SourceInfo]:
        """Every version the store holds chunks of, by (source, content hash)."""
        versions: dict[tuple[str, str], SourceInfo] = {}
        with self._held():  # counted and checked against the total with no write in between
            counted = list(self._version_counts())
        for source, doc_hash, expected, ingested_at, chunks in counted:
            info = versions.get((source, doc_hash))
            if info is None:
                info = versions[source, doc_hash] = SourceInfo(source, doc_hash, 0, expected, 0.0)
            info.chunks += chunks
            info.ingested_at = max(info.ingested_at, ingested_at)
        return versions

    def _version_counts(self) -> Iterator[tuple[str, str, int, float, int]]:
        """(source, content hash, chunk count, time, chunks stored) per version value: from
        the facet when every chunk carries one, else a chunk at a time."""
        indexed = self.client.get_collection(self.name).payload_schema or {}
        counted = self._facet("version") if "version" in indexed else {}
        if counted and sum(counted.values()) == self.count():
            for value, chunks in zip(read_version_keys(counted), counted.values(), strict=True):
                yield (*value, chunks)
        else:
            for p in self._payloads(None):
                yield p["source"], p["doc_hash"], p["doc_chunks"], p["ingested_at"], 1

    def _facet(self, key: str, exact: bool = True) -> dict[str, int]:
        response = self.client.facet(self.name, key=key, limit=1_000_000_000, exact=exact)
        # Edge can still list a value whose points were all deleted, with a count of 0.
        return {str(hit.value): hit.count for hit in response.hits if hit.count}

    def _payloads(
        self, selector: models.Filter | None, fields: Sequence[str] | bool = SOURCE_FIELDS
    ) -> Iterator[dict[str, Any]]:
        """The payloads of the chunks `selector` picks (all: None), with `fields` (all: True)."""
        for points in scroll_pages(self.client, self.name, 2048, selector, fields):
            for point in points:
                yield point.payload or {}

    def chunks(self, sources: Iterable[str] | None = None) -> list[dict[str, Any]]:
        """Return the stored chunks (of `sources`, else all) as flat records for a table,
        ordered by source and position: source, chunk_index, heading, start, end, size, text."""
        selector = (
            self.records.Filter(must=[self._match("source", list(sources))]) if sources else None
        )
        records = []
        for p in self._payloads(selector, True):
            metadata = p.get("metadata", {})
            records.append(
                {
                    "source": p["source"],
                    "chunk_index": p["chunk_index"],
                    "heading": heading_path(metadata),
                    "start": metadata.get("start"),
                    "end": metadata.get("end"),
                    "size": len(p["text"]),
                    "text": p["text"],
                }
            )
        return sorted(records, key=lambda r: (r["source"], r["chunk_index"]))

    def payloads(self) -> Iterator[dict[str, Any]]:
        """Yield every stored chunk's whole payload: text, source, position, version, metadata."""
        yield from self._payloads(None, True)

    def sample_texts(self, n: int = 256) -> list[str]:
        """The texts of up to `n` stored chunks (the first the engine lists): what a store
        holds, for a look at its language. The embedded store keeps them until its next
        write: a listing of stores then need not open any store's shard."""
        taking = turn_taking(self.client)
        if taking is None:
            return self._sample_texts(n)
        return taking.remembered(self.name, f"sample texts {n}", lambda: self._sample_texts(n))

    def _sample_texts(self, n: int) -> list[str]:
        for points in scroll_pages(self.client, self.name, n, None, ("text",)):
            return [str((point.payload or {}).get("text", "")) for point in points]
        return []

    def source_names(self) -> list[str]:
        """Return the names of every source in the store (from the payload index)."""
        return sorted(self._facet("source"))

    def match_sources(self, pattern: str) -> SourceMatch:
        """Return the sources a root label, file name, path, folder or name prefix refers to.

        Forgiving on purpose, since a model fills it in: case is ignored, and "refund",
        "refund.md", "policies/refund.md" and "policies/" all find "policies/refund.md". A
        name that is a folder's ("form", "components/form") finds that folder's sources (and
        a file named so, `form.md`), not the names that merely start with it (`format.md`);
        the match's `places` say which folders and files it found.
        """
        wanted = pattern.strip().replace("\\", "/").removeprefix("./").lstrip("/").lower()
        if not wanted:
            return SourceMatch([])
        names = self.source_names()
        typed = pattern.strip().replace("\\", "/").removeprefix("./").strip("/")
        if labelled := self._root_sources(wanted.rstrip("/"), names, typed):
            return SourceMatch(labelled)
        exact = [n for n in names if n.lower() == wanted or n.lower().endswith("/" + wanted)]
        if exact:
            return SourceMatch(exact, exact)
        if named := _named_places(wanted.rstrip("/"), names):
            return SourceMatch([n for n in names if any(_under(n, p) for p in named)], named)
        return SourceMatch(
            [
                n
                for n in names
                if n.lower().startswith(wanted) or n.lower().rsplit("/", 1)[-1].startswith(wanted)
            ]
        )

    def _root_sources(self, label: str, names: list[str], typed: str = "") -> list[str]:
        """The sources of the root labelled `label` (case ignored), when the store records
        its roots (`roots` in its metadata, each with a `label` and the `files` it holds):
        in a store of several roots they are named `label/…` (a file root: `label`). Of
        labels differing only in case (`Docs`, `docs`), the one written as `typed` is meant;
        else all of them."""
        roots = self.info().get("roots") or []
        found = [r for r in roots if str(r.get("label", "")).lower() == label]
        if not found:
            return []
        if len(roots) == 1:
            return names
        found = [r for r in found if r.get("label") == typed] or found
        chosen: list[str] = []
        for root in found:
            prefix = str(root["label"])
            if root.get("kind") == "file":
                chosen += [n for n in names if n == prefix or n.startswith(prefix + "#")]
            else:
                chosen += [n for n in names if n.startswith(prefix + "/")]
        return sorted(chosen)

    def partial_versions(self) -> list[str]:
        """The versions (`version_key`) of documents stored only in part, which searches leave
        out: an ingest is writing them, or stopped half-way (the next ingest completes them).

        Counted again only when the embedded store changed (its `generation`), and kept with
        it until its next write: a search in a process of its own reads them back instead of
        counting every version again. A server's stores are not checked: they are written
        and read as before.
        """
        taking = turn_taking(self.client)
        if taking is None:
            return []
        generation = taking.generation
        if self._partial is None or self._partial[0] != generation:
            found = taking.remembered(self.name, "partial versions", self._count_partial)
            self._partial = (generation, found)
        return self._partial[1]

    def _count_partial(self) -> list[str]:
        indexed = self.client.get_collection(self.name).payload_schema or {}
        if "version" not in indexed:
            return []
        total = self.count()
        # The index's counts (~20x faster than counting points at 100k chunks) are exact
        # unless deleted points are still counted; then their sum exceeds the points.
        counted = self._facet("version", exact=False)
        if sum(counted.values()) != total:
            counted = self._facet("version")
        # Chunks from before the version field cannot be told apart: nothing is left out.
        if sum(counted.values()) != total:
            return []
        values = read_version_keys(counted)
        return [
            key
            for (key, chunks), value in zip(counted.items(), values, strict=True)
            if chunks < value[2]
        ]


def rename_layers(renames: dict[str, str]) -> list[list[str]]:
    """The old names of `renames` in layers, each renamed before the next: a name that is also
    another's new name (`b` in a→b, b→c) is renamed away first, so that no chunk is renamed
    twice. A cycle's names come last, together."""
    pending = dict(renames)
    layers = []
    while pending:
        layer = [old for old, new in pending.items() if new not in pending]
        if not layer:
            layer = list(pending)
        layers.append(layer)
        for old in layer:
            del pending[old]
    return layers


def _nfc(text: str) -> str:
    return unicodedata.normalize("NFC", text)


def _newest(versions: Iterable[SourceInfo]) -> dict[str, SourceInfo]:
    """Each source's newest complete version (else its newest), by source name."""
    found: dict[str, SourceInfo] = {}
    for info in versions:
        best = found.get(info.source)
        if best is None or (info.complete, info.ingested_at) > (best.complete, best.ingested_at):
            found[info.source] = info
    return dict(sorted(found.items()))


def version_key(source: str, doc_hash: str, doc_chunks: int, ingested_at: float) -> str:
    """One payload value naming a chunk's source version (JSON: any source name is safe)."""
    return json.dumps([source, doc_hash, doc_chunks, ingested_at], ensure_ascii=False)


def read_version_keys(keys: Iterable[str]) -> list[list[Any]]:
    """The `version_key` values read back, [source, doc_hash, doc_chunks, ingested_at] each:
    parsed as one JSON document, not one call a key (a store holds thousands)."""
    return json.loads("[" + ",".join(keys) + "]")


def packed_records(records: dict[str, list[Any]]) -> str:
    """A root's records of its files (path → [size, mtime, …]) as the store's metadata keeps
    them: one JSON text, which whoever parses the metadata reads as one string. At 63,000
    files, as objects they made parsing the store's settings cost 0.09 s in every command
    that opens the store; as text, 0.01 s, parsed only by what reads them (sync, status,
    the sizes `sources` shows)."""
    return orjson.dumps(records, option=orjson.OPT_SORT_KEYS).decode()


def unpacked_records(value: Any) -> dict[str, list[Any]]:
    """The records `packed_records` made, or those a store of an earlier release keeps as an
    object; what is neither reads as none."""
    if isinstance(value, str):
        try:
            value = orjson.loads(value)
        except ValueError:
            return {}
    return dict(value) if isinstance(value, dict) else {}
