"""Text formats: Markdown, MDX, reStructuredText, plain text, HTML, Jupyter notebooks."""

import json
import re
from pathlib import Path
from typing import Any

from archivist.ingest.loaders.base import (
    LoaderOptions,
    LoadError,
    Section,
    clean_metadata,
    jsonable,
    read_text,
)
from archivist.ingest.loaders.includes import expand_includes, read_demos

_FRONT_MATTER = re.compile(r"\A---[ \t]*\r?\n(.*?)\r?\n(?:---|\.\.\.)[ \t]*(?:\r?\n|\Z)", re.S)
_HTML_DROPPED = ["nav", "header", "footer", "script", "style", "noscript", "template", "svg"]
_FENCE = re.compile(r"^\s{0,3}(`{3,}|~{3,})")
# A JSX component's tag (capitalised name), possibly over several lines, and its attributes.
# Each part can match only one way (no two quantifiers over the same characters), so a tag
# that never closes costs one pass, not one per way of sharing its spaces out.
_JSX_TAG = re.compile(r"</?([A-Z][\w.]*)(\s[^<>]*)?>")
_JSX_LABEL = re.compile(r"\b(?:title|label)\s*=\s*(?:\"([^\"]*)\"|'([^']*)')")
MAX_FRONT_MATTER_VALUES = 10_000
"""The most values (scalars, lists, mappings) YAML front matter may hold once its aliases are
expanded: a few hundred bytes of nested aliases can stand for billions."""
MAX_FRONT_MATTER_DEPTH = 64
MAX_FRONT_MATTER_CHARS = 64 * 1024
"""The most characters front matter may hold as JSON: it is copied into every chunk's payload,
and read back with every search result."""
# An ES import or export statement at a line's start, as MDX pages hold them.
_MDX_STATEMENT = re.compile(
    r"^(?:import\s+[\w{*][^\n]*\bfrom\s+[\"']|export\s+(?:default\s+)?(?:const|function)\b)", re.M
)
_HIDDEN_BLOCK = re.compile(r"^\s*<(script|style)\b", re.I)
_HTML_COMMENT = re.compile(r"<!--.*?-->")
# `::: tip Title`, `:::warning`, `:::note[Title]`, `::: code-group`, and the closing `:::`.
_CONTAINER = re.compile(r"^\s{0,3}:{3,}\s*([A-Za-z][\w-]*)?\s*(.*?)\s*$")
_UNTITLED = frozenset({"code-group", "raw", "v-pre", "details"})
# A line holding nothing but HTML tags (`<div class="options-api">`, `</div>`, `<br/>`): HTML's
# own elements, components (`<VueSchoolLink … />`) and custom elements (`<vue-demo>`); a line
# of other tags is text the page shows (or quotes) as written.
_TAGS_ONLY = re.compile(r"\s*(?:</?[a-zA-Z][\w:-]*(?:\s+[^<>]*)?/?>\s*)+")
_TAG_NAME = re.compile(r"</?([a-zA-Z][\w:-]*)")
_INLINE_TAG = re.compile(r"</?(?P<name>[a-zA-Z][\w-]*)(?P<attributes>\s[^<>]*)?/?>")
_INLINE_ABBR = re.compile(
    r"<abbr\s+title=(?P<q>[\"'])(?P<title>[^\"'<>]*)(?P=q)\s*>(?P<text>[^<]*)</abbr>"
)
_HTML_ELEMENTS = frozenset(
    "a abbr article aside b blockquote br caption center code dd details div dl dt em figcaption "
    "figure font h1 h2 h3 h4 h5 h6 hr i img kbd li main nav ol p picture pre section small "
    "source span strong sub summary sup table tbody td th thead tr u ul video".split()
)
_LIST_ITEM = re.compile(r"^\s*([-*+]|\d+[.)])\s")
_RST_ADORNMENT = re.compile(r"^([!-/:-@\[-`{-~])\1{2,}\s*$")
_RST_DIRECTIVE = re.compile(r"^\.\.\s+([\w:-]+)::\s*(.*)$")


def split_front_matter(text: str) -> tuple[dict[str, Any], str]:
    """Split YAML front matter off a Markdown text: (metadata, the rest)."""
    match = _FRONT_MATTER.match(text)
    if not match:
        return {}, text
    import yaml

    try:
        loader = yaml.SafeLoader(match.group(1))
        try:
            node = loader.get_single_node()
            if node is not None:
                _check_expansion(node)
            front = loader.construct_document(node) if node is not None else None
        finally:
            loader.dispose()
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 2})" if mark else ""
        raise LoadError(f"invalid YAML front matter{where}") from None
    metadata = {}
    if isinstance(front, dict):
        metadata = {str(k): jsonable(v) for k, v in front.items() if v is not None}
    size = len(json.dumps(metadata, ensure_ascii=False, default=str))
    if size > MAX_FRONT_MATTER_CHARS:
        raise LoadError(
            f"YAML front matter of {size // 1024} KB, over the {MAX_FRONT_MATTER_CHARS // 1024} KB "
            "limit (it is copied into every chunk): shorten it"
        )
    return metadata, text[match.end() :]


def _check_expansion(root: Any) -> None:
    """Refuse a YAML node graph that stands for too many values or too deep a nesting once its
    aliases are expanded, counting each shared node once (linear in the nodes written)."""
    import yaml

    sizes: dict[int, tuple[int, int]] = {}  # node id -> (values, depth) once expanded

    def measure(node: Any, depth: int) -> tuple[int, int]:
        known = sizes.get(id(node))
        if depth + (known[1] if known else 0) > MAX_FRONT_MATTER_DEPTH:
            raise LoadError(
                f"YAML front matter nested more than {MAX_FRONT_MATTER_DEPTH} levels deep"
            )
        if known is not None:
            return known
        sizes[id(node)] = (MAX_FRONT_MATTER_VALUES + 1, depth)  # a cycle counts as too many
        if isinstance(node, yaml.SequenceNode):
            children = node.value
        elif isinstance(node, yaml.MappingNode):
            children = [part for pair in node.value for part in pair]
        else:
            children = []
        values, deepest = 1, 0
        for child in children:
            count, below = measure(child, depth + 1)
            values += count
            deepest = max(deepest, below + 1)
            if values > MAX_FRONT_MATTER_VALUES:
                break
        sizes[id(node)] = (values, deepest)
        return values, deepest

    values, _ = measure(root, 0)
    if values > MAX_FRONT_MATTER_VALUES:
        raise LoadError(
            f"YAML front matter expands to more than {MAX_FRONT_MATTER_VALUES:,} values "
            "(nested aliases): write the values out, or remove the front matter"
        )


def load_markdown(path: Path, options: LoaderOptions) -> list[Section]:
    """Load Markdown; YAML front matter becomes metadata; include directives are read, and
    documentation frameworks' markup (dumi demos, VitePress and Docusaurus containers, MDX
    in a Docusaurus page, HTML comments, scripts and tag-only lines) becomes text.

    Lines are counted from the file's own (`first_line`) only when nothing was included: an
    included file's lines are not the page's. The framework markup is read line for line."""
    whole = read_text(path)
    metadata, text = split_front_matter(whole)
    front = whole[: len(whole) - len(text)]
    expanded = expand_includes(path, text, options.include_root)
    first_line = 1 + front.count("\n") if expanded == text else None
    if _MDX_STATEMENT.search(expanded):
        # Docusaurus reads `.md` pages as MDX: `import Tabs from '@theme/Tabs'` and `<Tabs>`.
        expanded, first_line = mdx_to_markdown(expanded), None
    expanded = framework_markup(read_demos(path, expanded, options.include_root))
    return [Section(expanded, metadata, first_line=first_line)]


def _only_html_tags(line: str) -> bool:
    if not line.strip() or not _TAGS_ONLY.fullmatch(line):
        return False
    return all(
        name.lower() in _HTML_ELEMENTS or name[0].isupper() or "-" in name
        for name in _TAG_NAME.findall(line)
    )


def _inline_html(line: str) -> str:
    """A line of text without the tags of HTML elements (and of components written with
    attributes: `<Badge type="tip">`) around its words, code spans left as they are; an
    abbreviation keeps its expansion (`<abbr title="Application Programming Interface">API`
    → `API (Application Programming Interface)`)."""
    if "<" not in line:
        return line
    parts = re.split(r"(`+[^`]*`+)", line)
    for n in range(0, len(parts), 2):
        if "<" in parts[n]:
            parts[n] = _INLINE_ABBR.sub(_expanded_abbr, parts[n])
            parts[n] = _INLINE_TAG.sub(_dropped_tag, parts[n])
    return "".join(parts)


def _expanded_abbr(match: re.Match) -> str:
    return f"{match['text']} ({match['title']})" if match["title"] != match["text"] else match[0]


def _dropped_tag(match: re.Match) -> str:
    name, attributes = match["name"], match["attributes"] or ""
    if name.lower() in _HTML_ELEMENTS or (name[0].isupper() and "=" in attributes):
        return ""
    return match[0]


def framework_markup(text: str) -> str:
    """Markdown with documentation frameworks' markup read as text, line for line (so a
    page's lines stay its own): a `::: tip Title` / `:::note[Title]` container's opening line
    becomes its title in bold and its closing line goes; HTML comments, `<script>` and
    `<style>` blocks (VitePress pages) and lines holding only HTML tags become blank lines,
    and HTML tags inside a line of text go, their words kept. Code is left as it is."""
    out: list[str] = []
    fence = ""
    hidden = ""  # the closing tag of a <script> or <style> block being blanked
    comment = False
    for line in text.split("\n"):
        if fence:
            out.append(line)
            if line.strip().startswith(fence):
                fence = ""
            continue
        if hidden:
            out.append("")
            if hidden in line.lower():
                hidden = ""
            continue
        if comment:
            end = line.find("-->")
            if end == -1:
                out.append("")
                continue
            comment, line = False, line[end + 3 :]
        if match := _FENCE.match(line):
            fence = match.group(1)
            out.append(line)
            continue
        if block := _HIDDEN_BLOCK.match(line):
            closing = f"</{block.group(1).lower()}>"
            out.append("")
            if closing not in line.lower():
                hidden = closing
            continue
        line = _HTML_COMMENT.sub("", line)
        if (opened := line.find("<!--")) != -1:
            comment, line = True, line[:opened]
        if container := _CONTAINER.match(line):
            kind, title = container.group(1) or "", (container.group(2) or "").strip()
            title = title.strip("[]{} ").strip() or (kind if kind not in _UNTITLED else "")
            out.append(f"**{title[:1].upper() + title[1:]}**" if title else "")
            continue
        out.append("" if _only_html_tags(line) else _inline_html(line))
    return "\n".join(out)


def load_mdx(path: Path, options: LoaderOptions) -> list[Section]:
    """Load MDX as Markdown: front matter kept, import/export statements and JSX component
    tags dropped, the text inside components kept (a tab's or admonition's title too)."""
    metadata, text = split_front_matter(read_text(path))
    text = expand_includes(path, text, options.include_root)
    return [Section(mdx_to_markdown(text), metadata)]


def mdx_to_markdown(text: str) -> str:
    """Turn MDX into plain Markdown, leaving code blocks as they are."""
    out: list[str] = []
    prose: list[str] = []
    fence = ""
    statement_depth = 0

    def flush() -> None:
        if prose:
            out.append(_strip_jsx("\n".join(prose)))
            prose.clear()

    for line in text.splitlines():
        if fence:
            out.append(line)
            if line.strip().startswith(fence):
                fence = ""
            continue
        if match := _FENCE.match(line):
            flush()
            fence = match.group(1)
            out.append(line)
            continue
        if statement_depth or re.match(r"(import|export)\b", line):
            # An ES statement runs until its brackets close (objects and lists span lines).
            statement_depth = max(0, statement_depth + _bracket_balance(line))
            continue
        prose.append(line)
    flush()
    return re.sub(r"\n{3,}", "\n\n", "\n".join(out)).strip()


def _bracket_balance(line: str) -> int:
    return sum(line.count(c) for c in "{[(") - sum(line.count(c) for c in "}])")


def _strip_jsx(text: str) -> str:
    def replace(match: re.Match) -> str:
        if match.group(0).startswith("</"):
            return ""
        labels = [a or b for a, b in _JSX_LABEL.findall(match.group(2) or "")]
        return f"\n\n**{labels[0]}**\n\n" if labels else ""

    text = _drop_jsx_comments(text)
    text = _JSX_TAG.sub(replace, text)
    # Component children are usually indented; unindented, they read as paragraphs again
    # rather than as code blocks (MDX has no indented code). List items keep their nesting.
    return "\n".join(line if _LIST_ITEM.match(line) else line.strip() for line in text.splitlines())


def _drop_jsx_comments(text: str) -> str:
    """Drop `{/* … */}` comments; an opener that never closes is kept as text. One scan
    forward (a pattern searching from every opener to the end would cost the square)."""
    out, cursor = [], 0
    while (start := text.find("{/*", cursor)) != -1:
        end = text.find("*/}", start + 3)
        if end == -1:
            break
        out.append(text[cursor:start])
        cursor = end + 3
    out.append(text[cursor:])
    return "".join(out)


def load_rst(path: Path, options: LoaderOptions) -> list[Section]:
    """Load reStructuredText: section titles become Markdown headings (levels in the order the
    document first uses each adornment), comments and link targets are dropped."""
    lines = expand_includes(path, read_text(path), options.include_root).splitlines()
    styles: list[tuple[str, bool]] = []
    out: list[str] = []
    title = None
    i = 0
    while i < len(lines):
        line = lines[i]
        over = bool(_RST_ADORNMENT.match(line))
        text_at = i + 1 if over else i
        if text_at + 1 < len(lines) and lines[text_at].strip():
            heading = lines[text_at].strip()
            under = lines[text_at + 1]
            if (
                _RST_ADORNMENT.match(under)
                and len(under.strip()) >= len(heading)
                and not _RST_ADORNMENT.match(lines[text_at])
                and (not over or line.strip()[0] == under.strip()[0])
            ):
                style = (under.strip()[0], over)
                if style not in styles:
                    styles.append(style)
                level = min(styles.index(style) + 1, 6)
                title = title or heading
                out += ["", f"{'#' * level} {heading}", ""]
                i = text_at + 2
                continue
        directive = _RST_DIRECTIVE.match(line)
        if directive:
            name, argument = directive.groups()
            if name in ("code-block", "code", "sourcecode"):
                out.append(f"Code ({argument}):" if argument else "Code:")
            elif name not in ("image", "figure", "toctree", "include", "raw"):
                out.append(
                    f"{name.capitalize()}: {argument}" if argument else f"{name.capitalize()}:"
                )
            i += 1
            continue
        if line.startswith(".. ") or line.strip() == "..":
            i += 1  # a comment or a link target
            while i < len(lines) and (not lines[i].strip() or lines[i].startswith(" ")):
                if not lines[i].strip() and (i + 1 >= len(lines) or lines[i + 1][:1] != " "):
                    break
                i += 1
            continue
        out.append(line.replace("::", ":") if line.rstrip().endswith("::") else line)
        i += 1
    text = re.sub(r"\n{3,}", "\n\n", "\n".join(out)).strip()
    return [Section(text, {"title": title} if title else {})]


def load_plain(path: Path, options: LoaderOptions) -> list[Section]:
    """Load a plain text file (source code and other text types named with --text-ext too)."""
    return [Section(read_text(path), first_line=1)]


def html_to_markdown(html: str) -> tuple[str, str]:
    """Convert HTML to Markdown without navigation, page header and footer, scripts and
    styles: (the page title, the text)."""
    from bs4 import BeautifulSoup
    from markdownify import MarkdownConverter

    soup = BeautifulSoup(html, "html.parser")
    title = soup.title.get_text(" ", strip=True) if soup.title else ""
    for element in soup.find_all(_HTML_DROPPED):
        element.decompose()
    root = soup.find("main") or soup.body or soup
    converter = MarkdownConverter(
        heading_style="ATX",
        bullets="-",
        strip=["a", "img"],
        escape_asterisks=False,
        escape_underscores=False,
        table_infer_header=True,
    )
    return title, re.sub(r"\n{3,}", "\n\n", converter.convert_soup(root)).strip()


def load_html(path: Path, options: LoaderOptions) -> list[Section]:
    """Load HTML as Markdown, without navigation, page header and footer, scripts and styles."""
    title, text = html_to_markdown(read_text(path))
    return [Section(text, {"title": title} if title else {})]


def load_notebook(path: Path, options: LoaderOptions) -> list[Section]:
    """Load a Jupyter notebook: Markdown cells as they are, code cells as code blocks in the
    kernel's language; outputs are dropped (they repeat or bloat what the code says)."""
    try:
        notebook = json.loads(read_text(path))
    except json.JSONDecodeError as exc:
        raise LoadError(f"invalid notebook JSON at line {exc.lineno}") from None
    if not isinstance(notebook, dict) or not isinstance(notebook.get("cells"), list):
        raise LoadError("not a Jupyter notebook (no cells)")
    meta = notebook.get("metadata") or {}
    language = (meta.get("language_info") or {}).get("name") or (meta.get("kernelspec") or {}).get(
        "language", ""
    )
    blocks = []
    for cell in notebook["cells"]:
        source = cell.get("source", "")
        text = "".join(source) if isinstance(source, list) else str(source)
        if not text.strip():
            continue
        if cell.get("cell_type") == "code":
            blocks.append(f"```{language}\n{text.rstrip()}\n```")
        elif cell.get("cell_type") == "markdown":
            blocks.append(text.strip())
    title = (meta.get("title") or "") if isinstance(meta.get("title"), str) else ""
    return [Section("\n\n".join(blocks), clean_metadata({"title": title, "language": language}))]
