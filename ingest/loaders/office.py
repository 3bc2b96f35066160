"""Office and e-book formats: DOCX, PPTX, spreadsheets (XLSX, XLSM, XLSB, XLS, ODS), ODT,
EPUB, RTF.

The zip packages are checked before any part is parsed (see `open_package`): their XML is
what costs memory, and a small file can unpack to gigabytes.
"""

import posixpath
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from archivist.ingest.loaders.base import (
    MAX_STREAMED_BYTES,
    SPREADSHEETS,
    LoaderOptions,
    LoadError,
    Section,
    clean_metadata,
    open_package,
)
from archivist.ingest.loaders.text import html_to_markdown

_ODF = {
    "text": "urn:oasis:names:tc:opendocument:xmlns:text:1.0",
    "table": "urn:oasis:names:tc:opendocument:xmlns:table:1.0",
    "office": "urn:oasis:names:tc:opendocument:xmlns:office:1.0",
    "dc": "http://purl.org/dc/elements/1.1/",
    "meta": "urn:oasis:names:tc:opendocument:xmlns:meta:1.0",
}
# Slides with less text than this are joined with their neighbours (see _merge_small_slides).
MIN_SLIDE_CHARS = 40
_OPF = {
    "c": "urn:oasis:names:tc:opendocument:xmlns:container",
    "opf": "http://www.idpf.org/2007/opf",
    "dc": "http://purl.org/dc/elements/1.1/",
}


def load_docx(path: Path, options: LoaderOptions) -> list[Section]:
    """Load a Word document as Markdown: headings, list items, paragraphs and tables."""
    import docx
    from docx.table import Table

    open_package(path, "DOCX").close()
    try:
        document = docx.Document(str(path))
    except Exception as exc:
        raise LoadError(f"damaged DOCX: {exc}") from None
    # Style names by id, read once: python-docx looks each paragraph's style up with an XPath
    # query over all styles, which made a large document take minutes.
    names = {style.style_id: style.name for style in document.styles}
    blocks = []
    numbers: list[int] = []  # the running number of each level of the current numbered list
    for item in document.iter_inner_content():
        if isinstance(item, Table):
            blocks.append(_markdown_table([[c.text for c in row.cells] for row in item.rows]))
            numbers = []
        else:
            blocks.append(_docx_paragraph(item, names, numbers))
    title = document.core_properties.title
    text = "\n\n".join(b for b in blocks if b.strip())
    return [Section(text, {"title": title} if title else {})]


def _docx_paragraph(paragraph, names: dict[str, str], numbers: list[int]) -> str:
    """A paragraph as Markdown; `numbers` carries a numbered list's count from item to item
    (a blank paragraph keeps it, anything else ends the list)."""
    text = paragraph.text.strip()
    if not text:
        return ""
    style = names.get(paragraph._p.style or "Normal", "") or ""
    if match := re.match(r"List Number(?: (\d))?$", style):
        level = int(match.group(1) or 1)
        del numbers[level:]
        numbers.extend([0] * (level - len(numbers)))
        numbers[level - 1] += 1
        return f"{'   ' * (level - 1)}{numbers[level - 1]}. {text}"
    numbers.clear()
    if style == "Title":
        return f"# {text}"
    if match := re.match(r"Heading (\d)", style):
        return f"{'#' * min(int(match.group(1)), 6)} {text}"
    if style.startswith("List"):
        return f"- {text}"
    return text


def _markdown_table(rows: list[list[str]]) -> str:
    """A table as Markdown, without the rows and columns that hold nothing (a form's empty
    grid is no text worth retrieving; a table with no text at all becomes nothing)."""
    rows = [[" ".join(cell.split()) for cell in row] for row in rows]
    rows = [row for row in rows if any(row)]
    if not rows:
        return ""
    width = max(len(row) for row in rows)
    rows = [row + [""] * (width - len(row)) for row in rows]
    kept = [i for i in range(width) if any(row[i] for row in rows)]
    rows = [[row[i] for i in kept] for row in rows]
    lines = ["| " + " | ".join(rows[0]) + " |", "|" + "---|" * len(rows[0])]
    lines += ["| " + " | ".join(row) + " |" for row in rows[1:]]
    return "\n".join(lines)


def load_pptx(path: Path, options: LoaderOptions) -> list[Section]:
    """Load a presentation: one section per slide (its title as the heading, its text boxes
    and tables, then its speaker notes)."""
    from pptx import Presentation

    open_package(path, "PPTX").close()
    try:
        deck = Presentation(str(path))
    except Exception as exc:
        raise LoadError(f"damaged PPTX: {exc}") from None
    title = deck.core_properties.title
    sections = []
    for number, slide in enumerate(deck.slides, start=1):
        heading_shape = slide.shapes.title
        heading = heading_shape.text_frame.text.strip() if heading_shape is not None else ""
        blocks = [f"# {heading}"] if heading else []
        for shape in slide.shapes:
            if heading_shape is not None and shape.shape_id == heading_shape.shape_id:
                continue
            blocks += _shape_text(shape)
        if slide.has_notes_slide:
            notes = slide.notes_slide.notes_text_frame
            if notes is not None and notes.text.strip():
                blocks.append(f"Notes: {notes.text.strip()}")
        text = "\n\n".join(b for b in blocks if b.strip())
        if text:
            sections.append(
                Section(
                    text,
                    clean_metadata(
                        {"title": title, "page": number, "slide": number, "slide_title": heading}
                    ),
                )
            )
    return _merge_small_slides(sections)


def _merge_small_slides(sections: list[Section]) -> list[Section]:
    """Join runs of slides holding less than MIN_SLIDE_CHARS of text with their neighbours: a
    title slide or a section divider alone is a chunk that answers nothing. A joined section
    names its first slide in `slide` (and `page`) and its last in `slide_last` (`page_last`)."""
    merged: list[Section] = []
    run: list[Section] = []

    def close() -> None:
        if not run:
            return
        first, last = run[0].metadata, run[-1].metadata
        metadata = first
        if len(run) > 1:
            metadata = {**first, "page_last": last["slide"], "slide_last": last["slide"]}
        if len(run) > 1 and not first.get("slide_title"):
            titles = [s.metadata["slide_title"] for s in run if s.metadata.get("slide_title")]
            metadata = clean_metadata({**metadata, "slide_title": titles[0] if titles else None})
        merged.append(Section("\n\n".join(s.text for s in run), metadata))
        run.clear()

    for section in sections:
        run.append(section)
        if sum(len(s.text) for s in run) >= MIN_SLIDE_CHARS:
            close()
    if run and merged:
        run.insert(0, merged.pop())  # small last slides join the one before them
    close()
    return merged


def _shape_text(shape) -> list[str]:
    if shape.shape_type is not None and shape.shape_type == 6:  # a group: its shapes
        return [t for inner in shape.shapes for t in _shape_text(inner)]
    if getattr(shape, "has_table", False) and shape.has_table:
        rows = [[cell.text for cell in row.cells] for row in shape.table.rows]
        return [_markdown_table(rows)]
    if getattr(shape, "has_text_frame", False) and shape.has_text_frame:
        lines = []
        for paragraph in shape.text_frame.paragraphs:
            text = "".join(run.text for run in paragraph.runs).strip()
            if text:
                lines.append(("  " * paragraph.level + "- " if paragraph.level else "") + text)
        return ["\n".join(lines)] if lines else []
    return []


# Spreadsheet formats python-calamine reads; the zip-based ones are size-checked first.
_OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
_CORE = {"dc": "http://purl.org/dc/elements/1.1/"}


def load_spreadsheet(path: Path, options: LoaderOptions) -> list[Section]:
    """Load a workbook (.xlsx, .xlsm, .xlsb, .xls, .ods): one section per sheet, a row per
    line; under a header row of labels, each row reads `label: value; label: value`.

    The cells are read by python-calamine (Rust), which reads the cells a sheet holds rather
    than the range it declares: a sheet claiming `A1:XFD1048576` over a million empty styled
    rows costs what its few real cells cost.
    """
    import python_calamine as calamine

    kind = SPREADSHEETS.get(path.suffix.lower(), "spreadsheet")
    title = _workbook_title(path, kind)
    try:
        book = calamine.CalamineWorkbook.from_path(str(path))
    except calamine.PasswordError:
        raise LoadError(
            f"encrypted {kind} (password-protected): save a copy without the password in "
            "your spreadsheet program and ingest that"
        ) from None
    except Exception as exc:  # calamine's errors: zip, XML, CFB, unsupported sheet types
        raise LoadError(f"damaged {kind}: {exc}") from None
    try:
        sections = []
        for meta in book.sheets_metadata:
            if meta.typ != calamine.SheetTypeEnum.WorkSheet:
                continue  # chart and macro sheets hold no cells to read
            try:
                values = book.get_sheet_by_name(meta.name).to_python(skip_empty_area=True)
            except Exception as exc:
                raise LoadError(f"damaged {kind}: sheet {meta.name!r}: {exc}") from None
            if text := _sheet_text(meta.name, values):
                sections.append(Section(text, clean_metadata({"title": title, "sheet": meta.name})))
    finally:
        book.close()
    return sections


def _sheet_text(name: str, values: list[list[Any]]) -> str:
    """A sheet as text: its non-empty rows, labelled by a header row of labels if it has one."""
    rows = [[_cell(v) for v in row] for row in values]
    rows = [row for row in rows if any(row)]
    if not rows:
        return ""
    header = rows[0]
    labelled = len(rows) > 1 and all(isinstance(v, str) and v for v in header if v)
    lines = []
    for row in rows[1:] if labelled else rows:
        if labelled:
            cells = [f"{h}: {v}" for h, v in zip(header, row, strict=False) if h and v]
            lines.append("; ".join(cells))
        else:
            lines.append(" | ".join(v for v in row if v))
    return f"# {name}\n\n" + "\n".join(line for line in lines if line)


def _workbook_title(path: Path, kind: str) -> str | None:
    """The workbook's title from its document properties (zip packages only), checked for
    size like every package; None when it has none. An OLE file (legacy .xls, or an
    encrypted OOXML package) is left to calamine."""
    with path.open("rb") as handle:
        if handle.read(len(_OLE_MAGIC)) == _OLE_MAGIC:
            return None
    with open_package(path, kind, MAX_STREAMED_BYTES) as package:
        # Part names are case-insensitive in practice (`docProps/Core.xml` exists).
        names = {name.lower(): name for name in package.namelist()}
        part = names.get("docprops/core.xml") or names.get("meta.xml")
        if part is None:
            return None
        try:
            root = ET.fromstring(package.read(part))
        except ET.ParseError:
            return None  # the properties are optional: the cells may still read
    return root.findtext(".//dc:title", default="", namespaces=_CORE).strip() or None


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return " ".join(str(value).split())


def load_odt(path: Path, options: LoaderOptions) -> list[Section]:
    """Load an OpenDocument text as Markdown: headings by outline level, lists, tables."""
    with open_package(path, "ODT") as package:
        try:
            content = ET.fromstring(package.read("content.xml"))
            meta = (
                ET.fromstring(package.read("meta.xml"))
                if "meta.xml" in package.namelist()
                else None
            )
        except (KeyError, ET.ParseError) as exc:
            raise LoadError(f"damaged ODT: {exc}") from None
    body = content.find("office:body/office:text", _ODF)
    if body is None:
        raise LoadError("damaged ODT: no text body")
    blocks: list[str] = []
    _odf_blocks(body, blocks, depth=0)
    title = (
        meta.findtext(".//dc:title", default="", namespaces=_ODF).strip()
        if meta is not None
        else ""
    )
    text = "\n\n".join(b for b in blocks if b.strip())
    return [Section(text, {"title": title} if title else {})]


def _odf_blocks(element: ET.Element, blocks: list[str], depth: int) -> None:
    for child in element:
        tag = child.tag
        if tag == f"{{{_ODF['text']}}}h":
            level = int(child.get(f"{{{_ODF['text']}}}outline-level", "1") or 1)
            blocks.append(f"{'#' * min(max(level, 1), 6)} {_odf_text(child).strip()}")
        elif tag == f"{{{_ODF['text']}}}p":
            blocks.append(_odf_text(child).strip())
        elif tag == f"{{{_ODF['text']}}}list":
            items = []
            for item in child.findall("text:list-item", _ODF):
                inner: list[str] = []
                _odf_blocks(item, inner, depth + 1)
                items += [
                    "  " * depth + "- " + b if not b.startswith(" ") else b for b in inner if b
                ]
            blocks.append("\n".join(items))
        elif tag == f"{{{_ODF['table']}}}table":
            rows = [
                [_odf_text(cell).strip() for cell in row.findall("table:table-cell", _ODF)]
                for row in child.iter(f"{{{_ODF['table']}}}table-row")
            ]
            blocks.append(_markdown_table(rows))
        elif tag == f"{{{_ODF['text']}}}section":
            _odf_blocks(child, blocks, depth)


def _odf_text(element: ET.Element) -> str:
    parts = [element.text or ""]
    for child in element:
        name = child.tag.rsplit("}", 1)[-1]
        if name == "s":
            parts.append(" " * int(child.get(f"{{{_ODF['text']}}}c", "1") or 1))
        elif name == "tab":
            parts.append("\t")
        elif name == "line-break":
            parts.append("\n")
        elif name not in ("note", "annotation"):
            parts.append(_odf_text(child))
        parts.append(child.tail or "")
    return "".join(parts)


def load_epub(path: Path, options: LoaderOptions) -> list[Section]:
    """Load an EPUB book: its chapters in reading order, as Markdown, one section each."""
    with open_package(path, "EPUB") as package:
        try:
            container = ET.fromstring(package.read("META-INF/container.xml"))
            rootfile = container.find(".//c:rootfile", _OPF)
            if rootfile is None:
                raise LoadError("damaged EPUB: no package document")
            opf_path = rootfile.get("full-path", "")
            opf = ET.fromstring(package.read(opf_path))
            manifest = {
                item.get("id"): item.get("href", "")
                for item in opf.findall("opf:manifest/opf:item", _OPF)
            }
            spine = [ref.get("idref") for ref in opf.findall("opf:spine/opf:itemref", _OPF)]
            base = posixpath.dirname(opf_path)
            chapters = [
                package.read(posixpath.normpath(posixpath.join(base, manifest[idref])))
                for idref in spine
                if idref in manifest
            ]
        except (KeyError, ET.ParseError) as exc:
            raise LoadError(f"damaged EPUB: {exc}") from None
    book = {
        "title": opf.findtext(".//dc:title", default="", namespaces=_OPF).strip(),
        "author": opf.findtext(".//dc:creator", default="", namespaces=_OPF).strip(),
        "language": opf.findtext(".//dc:language", default="", namespaces=_OPF).strip(),
    }
    sections = []
    for number, chapter in enumerate(chapters, start=1):
        heading, text = html_to_markdown(chapter.decode("utf-8", errors="replace"))
        if text.strip():
            sections.append(
                Section(text, clean_metadata({**book, "chapter": number, "chapter_title": heading}))
            )
    return sections


def load_rtf(path: Path, options: LoaderOptions) -> list[Section]:
    """Load an RTF document's text (its title from the document information, if any)."""
    from striprtf.striprtf import rtf_to_text

    # RTF is 7-bit: other characters are escapes, and the code page is read from the file.
    raw = path.read_bytes().decode("latin-1")
    if not raw.lstrip().startswith("{\\rtf"):
        raise LoadError("not an RTF document (no {\\rtf header)")
    codepage = re.search(r"\\ansicpg(\d+)", raw[:4096])
    encoding = f"cp{codepage.group(1)}" if codepage else "cp1252"
    try:
        text = rtf_to_text(raw, encoding=encoding, errors="replace")
    except LookupError:
        text = rtf_to_text(raw, errors="replace")
    title = re.search(r"\{\\title\s+([^{}]*)\}", raw)
    text = re.sub(r"\n{3,}", "\n\n", text).strip()
    return [Section(text, {"title": title.group(1).strip()} if title else {})]
