"""Record formats: JSON, JSON Lines and CSV; each record is a section, and a record with an id
is its own source `file#id`."""

import csv
import datetime
import io
import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from archivist.ingest.loaders.base import (
    SNIFF_BYTES,
    LoaderOptions,
    LoadError,
    NotADocument,
    Section,
    decode_text,
    jsonable,
    read_text,
)

AUTO_TEXT_FIELDS = ("text", "content", "body")


def load_json(path: Path, options: LoaderOptions) -> list[Section]:
    """Load a JSON document: an array of records, an object holding one, or one record.

    A JSON file that holds no records (a list of plain values, or one object without a text
    field: a config file such as package.json) is not a document and is skipped."""
    try:
        data = json.loads(read_text(path))
    except json.JSONDecodeError as exc:
        raise LoadError(f"invalid JSON at line {exc.lineno}, column {exc.colno}") from None
    if isinstance(data, dict) and not _has_text_field(data, options):
        lists = [v for v in data.values() if isinstance(v, list) and v and _all_dicts(v)]
        if len(lists) == 1:
            data = lists[0]
        else:
            field = options.text_field or "text, content or body"
            raise NotADocument(
                f"JSON without a text field ({field}): a config file? Name the field with "
                "--text-field to ingest it"
            )
    if isinstance(data, list) and not (data and _all_dicts(data)):
        raise NotADocument("JSON that holds no records (objects)")
    if not isinstance(data, list | dict):
        raise NotADocument("JSON that holds a single value, no records")
    records = data if isinstance(data, list) else [data]
    return list(_records(((n, r) for n, r in enumerate(records, start=1)), options, "record"))


def iter_jsonl(path: Path, options: LoaderOptions) -> Iterator[Section]:
    """Read JSON Lines one record at a time: the file is never held whole in memory."""
    with path.open("rb") as handle:
        head = handle.read(SNIFF_BYTES)
        handle.seek(0)
        if head.startswith((b"\xff\xfe", b"\xfe\xff")) or b"\0" in head:
            # UTF-16/32 (or binary): decoded whole, as the text formats are.
            lines: Iterable[bytes] = decode_text(handle.read()).encode().splitlines()
        else:
            lines = handle

        def records() -> Iterator[tuple[int, Any]]:
            for number, raw in enumerate(lines, start=1):
                line = decode_text(raw) if raw.strip() else ""
                if not line.strip():
                    continue
                try:
                    yield number, json.loads(line)
                except json.JSONDecodeError as exc:
                    raise LoadError(f"invalid JSON on line {number}: {exc.msg}") from None

        yield from _records(records(), options, "line")


def load_jsonl(path: Path, options: LoaderOptions) -> list[Section]:
    """Load JSON Lines: one record a line."""
    return list(iter_jsonl(path, options))


def load_csv(path: Path, options: LoaderOptions) -> list[Section]:
    """Load CSV with a header row; each row becomes one record."""
    text = read_text(path)
    try:
        dialect = csv.Sniffer().sniff(text[:SNIFF_BYTES], delimiters=",;\t|")
    except csv.Error:
        dialect = csv.excel
    try:
        reader = csv.DictReader(io.StringIO(text), dialect=dialect)
        rows = list(reader)
    except csv.Error as exc:
        raise LoadError(f"invalid CSV: {exc}") from None
    # A row longer than the header would lose values or pin them to the wrong column (often
    # a delimiter inside an unquoted field); a shorter row simply leaves its last fields empty.
    for number, row in enumerate(rows, start=2):
        if None in row:
            width = len(reader.fieldnames or [])
            raise LoadError(f"row {number} has {width + len(row[None])} fields, the header {width}")
    records = (
        (n, {k: v for k, v in row.items() if k is not None and v not in (None, "")})
        for n, row in enumerate(rows, start=2)
    )
    return list(_records(records, options, "row"))


def _records(
    records: Iterable[tuple[int, Any]], options: LoaderOptions, unit: str
) -> Iterator[Section]:
    """Turn records into sections: the text field (or all fields as sentences) is the text,
    the other scalar fields are metadata, and an id field names the record's source."""
    seen: dict[str, int] = {}
    for number, record in records:
        if not isinstance(record, dict):
            raise LoadError(f"{unit} {number} is not an object")
        text_field = _text_field(record, options)
        metadata = {
            str(k): jsonable(v) for k, v in record.items() if k != text_field and _is_metadata(v)
        }
        if text_field is None:
            text = " ".join(_sentence(k, v) for k, v in record.items() if _is_metadata(v))
        else:
            value = record.get(text_field)
            text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        key = record.get(options.id_field)
        if key is not None and not isinstance(key, dict | list):
            key = str(key)
            if key in seen:
                raise LoadError(
                    f"duplicate {options.id_field} '{key}' ({unit}s {seen[key]} and {number})"
                )
            seen[key] = number
        if text.strip():
            yield Section(text, metadata, key)


def _has_text_field(record: dict, options: LoaderOptions) -> bool:
    names = [options.text_field] if options.text_field else AUTO_TEXT_FIELDS
    return any(name in record for name in names)


def _text_field(record: dict, options: LoaderOptions) -> str | None:
    if options.text_field:
        if options.text_field not in record:
            return None
        return options.text_field
    return next((name for name in AUTO_TEXT_FIELDS if isinstance(record.get(name), str)), None)


def _all_dicts(values: list) -> bool:
    return all(isinstance(v, dict) for v in values)


def _is_metadata(value: Any) -> bool:
    """Scalars and lists of scalars become metadata; nested objects are left out."""
    if isinstance(value, list):
        return all(_is_metadata(v) and not isinstance(v, list) for v in value)
    return isinstance(value, str | int | float | bool | datetime.date) and value != ""


def _sentence(key: str, value: Any) -> str:
    text = ", ".join(map(str, value)) if isinstance(value, list) else str(value)
    text = " ".join(text.split())
    return f"{key}: {text}" + ("" if text.endswith((".", "!", "?", "。", "！", "？")) else ".")
