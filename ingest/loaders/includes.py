"""Include directives of documentation tools, read from the file they name.

Documentation often shows its examples by reference: MkDocs snippets (`--8<-- "path"`),
markdown-include (`{!path!}`), FastAPI's code includes (`{* path ln[3:9] *}`), MDX imports of
raw files (`import Code from '!!raw-loader!./app.py'` shown as `{Code}`, and imported
Markdown partials shown as `<Partial />`), and reStructuredText's `literalinclude` and
`include`, VitePress's `<<< @/file` snippets and dumi's `<embed src>`. A page whose answer is its
example can only be found if the example is read, so
the directive is replaced by the file's text when that file lies inside the root being
ingested; otherwise, or when it is missing, too large or binary, the directive stays as it is.

Bounded: files of at most MAX_INCLUDE_BYTES, at most MAX_INCLUDES per page, nested includes
MAX_DEPTH deep, a file never included inside itself, and never a path outside the root
(`..` or a symbolic link leading out).
"""

import re
from pathlib import Path

from archivist.ingest.loaders.base import INCLUDING_SUFFIXES, LoadError, decode_text

MAX_INCLUDE_BYTES = 256 * 1024
MAX_INCLUDES = 100
MAX_DEPTH = 3

# `--8<-- "file.md"` on a line of its own; `;--8<--` is the escaped form, left alone. A path
# may end in `:start:end` (lines). A block of paths between two bare `--8<--` lines too.
_SNIPPET = re.compile(
    r"^(?P<indent>[ \t]*)--8<--[ \t]+(?P<q>[\"'])(?P<path>[^\"'\n]+)(?P=q)[ \t]*$", re.M
)
_SNIPPET_BLOCK = re.compile(
    r"^[ \t]*--8<--[ \t]*\n(?P<body>(?:[^\n]*\n)*?)[ \t]*--8<--[ \t]*$", re.M
)
# markdown-include: `{!path!}`, `{!> path!}`.
_MARKDOWN_INCLUDE = re.compile(r"\{!>?\s*(?P<path>[^!{}\n]+?)\s*!\}")
# FastAPI's `{* path hl[...] ln[a:b] *}`: the file, or the lines `ln` names.
_CODE_INCLUDE = re.compile(r"\{\*\s*(?P<path>\S+)(?P<options>[^*\n]*?)\*\}")
_LINES_OPTION = re.compile(r"\bln\[(?P<ranges>[\d:, ]+)\]")
# MDX: `import Name from '!!raw-loader!./file'` or `'./file?raw'`, and Markdown partials.
_MDX_IMPORT = re.compile(
    r"^import\s+(?P<name>[A-Za-z_$][\w$]*)\s+from\s+(?P<q>[\"'])(?P<spec>[^\"'\n]+)(?P=q);?[ \t]*$",
    re.M,
)
# VitePress `<<< @/path/file.ts#region{2,3} [label]` (`@` is the site's source folder).
_VITEPRESS_SNIPPET = re.compile(
    r"^(?P<indent>[ \t]*)<<<[ \t]+(?P<path>[^\s{#\[]+)(?:#(?P<region>[\w-]+))?[^\n]*$", re.M
)
# dumi's `<embed src="./part.md"></embed>`: another Markdown file's text in place.
_DUMI_EMBED = re.compile(
    r"<embed\s+(?:[^<>]*?\s)?src=(?P<q>[\"'])(?P<path>[^\"'\n]+)(?P=q)[^<>]*?(?:/>|>\s*</embed>)"
)
# dumi's demos: `<code src="./demo/basic.tsx" version="5.2">Title</code>` (or self-closing).
_DUMI_DEMO = re.compile(
    r"<code\s+(?P<attributes>[^<>]*?\bsrc=[\"'][^\"'\n]+[\"'][^<>]*?)"
    r"(?:/>|>(?P<title>[^<\n]*)</code>)"
)
_ATTRIBUTE = re.compile(r"(?P<name>[\w-]+)(?:=(?P<q>[\"'])(?P<value>[^\"'\n]*)(?P=q))?")
_DEMO_SUFFIXES = ("", ".tsx", ".jsx", ".ts", ".js", ".vue")
# A demo's own title and description: YAML front matter of its Markdown, or a JSDoc block
# opening its code (`/** title: … description: … */`).
_JSDOC = re.compile(r"\A\s*/\*\*(?P<body>.*?)\*/", re.S)
_LOCALE_HEADING = re.compile(r"^##[ \t]+(?P<locale>[a-z]{2}-[A-Z]{2})[ \t]*$", re.M)
_PAGE_LOCALE = re.compile(r"\.(?P<locale>[a-z]{2}-[A-Z]{2})$")
# reST `.. literalinclude:: path` / `.. include:: path` and their indented options.
_RST_INCLUDE = re.compile(
    r"^(?P<indent>[ \t]*)\.\.[ \t]+(?P<kind>literalinclude|include)::[ \t]*(?P<path>\S+)[ \t]*\n"
    r"(?P<options>(?:(?P=indent)[ \t]+:[\w-]+:[^\n]*\n)*)",
    re.M,
)
_RST_OPTION = re.compile(r":(?P<name>[\w-]+):[ \t]*(?P<value>[^\n]*)")
_LANGUAGES = {
    ".py": "python",
    ".js": "javascript",
    ".jsx": "jsx",
    ".ts": "typescript",
    ".tsx": "tsx",
    ".sh": "bash",
    ".toml": "toml",
    ".yml": "yaml",
    ".yaml": "yaml",
    ".json": "json",
    ".html": "html",
    ".css": "css",
    ".sql": "sql",
    ".go": "go",
    ".rs": "rust",
    ".java": "java",
    ".rb": "ruby",
    ".c": "c",
    ".cpp": "cpp",
    ".ini": "ini",
    ".dockerfile": "dockerfile",
}
# The formats whose loaders read include directives (in included files too).


class _Includer:
    """Resolves and reads the files one page includes, within its limits."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        self.count = 0
        self.read: list[Path] = []

    def resolve(self, page: Path, name: str) -> Path | None:
        """The file `name` refers to from `page`: relative to the page's folder, else to each
        folder above it up to the root (documentation tools resolve from their base folder),
        and only inside the root."""
        name = name.strip()
        if not name or "://" in name or "\0" in name:
            return None
        relative = name.lstrip("/")
        folders = [] if name.startswith("/") else [page.parent]
        folder = page.parent
        while True:
            try:
                folder.resolve().relative_to(self.root)
            except ValueError:
                break
            if folder not in folders:
                folders.append(folder)
            if folder.resolve() == self.root or folder.parent == folder:
                break
            folder = folder.parent
        for base in folders:
            candidate = (base / relative).resolve()
            try:
                candidate.relative_to(self.root)
            except ValueError:
                continue
            if candidate.is_file():
                return candidate
        return None

    def text(self, page: Path, name: str, chain: tuple[Path, ...]) -> str | None:
        """The text of the file `name` (None: not to be included)."""
        if self.count >= MAX_INCLUDES:
            return None
        path = self.resolve(page, name)
        if path is None or path in chain or len(chain) > MAX_DEPTH:
            return None
        try:
            if path.stat().st_size > MAX_INCLUDE_BYTES:
                return None
            text = decode_text(path.read_bytes())
        except (OSError, LoadError):
            return None
        self.count += 1
        self.read.append(path)
        if path.suffix.lower() in INCLUDING_SUFFIXES:
            text = self.expand(path, text, (*chain, path))
        return text.rstrip("\n")

    def expand(self, page: Path, text: str, chain: tuple[Path, ...]) -> str:
        """Replace the include directives in `text`, a page at `page`."""
        suffix = page.suffix.lower()
        if suffix == ".rst":
            return _RST_INCLUDE.sub(lambda m: self._rst(page, m, chain), text)
        if suffix == ".mdx":
            text = self._mdx(page, text, chain)
        else:
            text = _VITEPRESS_SNIPPET.sub(lambda m: self._vitepress(page, m, chain), text)
            text = _DUMI_EMBED.sub(lambda m: self._plain(page, m, chain), text)
        text = _SNIPPET_BLOCK.sub(lambda m: self._snippet_block(page, m, chain), text)
        text = _SNIPPET.sub(lambda m: self._snippet(page, m, chain), text)
        text = _MARKDOWN_INCLUDE.sub(lambda m: self._plain(page, m, chain), text)
        return _CODE_INCLUDE.sub(lambda m: self._code(page, m, chain), text)

    def _snippet(self, page: Path, match: re.Match, chain: tuple[Path, ...]) -> str:
        name, lines = _line_suffix(match["path"])
        included = self.text(page, name, chain)
        if included is None:
            return match[0]
        return _indent(_select(included, lines), match["indent"])

    def _snippet_block(self, page: Path, match: re.Match, chain: tuple[Path, ...]) -> str:
        parts = []
        for line in match["body"].splitlines():
            if line.strip() and not line.strip().startswith(";"):
                name, lines = _line_suffix(line.strip())
                included = self.text(page, name, chain)
                if included is not None:
                    parts.append(_select(included, lines))
        return "\n\n".join(parts) if parts else match[0]

    def _plain(self, page: Path, match: re.Match, chain: tuple[Path, ...]) -> str:
        included = self.text(page, match["path"], chain)
        return match[0] if included is None else included

    def _code(self, page: Path, match: re.Match, chain: tuple[Path, ...]) -> str:
        included = self.text(page, match["path"], chain)
        if included is None:
            return match[0]
        option = _LINES_OPTION.search(match["options"])
        if option:
            included = _select_ranges(included, option["ranges"])
        return _fence(included, match["path"])

    def _vitepress(self, page: Path, match: re.Match, chain: tuple[Path, ...]) -> str:
        name = match["path"]
        name = "/" + name[2:] if name.startswith("@/") else name
        included = self.text(page, name, chain)
        if included is None:
            return match[0]
        if match["region"]:
            included = _region(included, match["region"])
        return _indent(_fence(included, match["path"]), match["indent"])

    def demos(self, page: Path, text: str) -> str:
        """dumi's demo tags replaced line for line by each demo's title and description;
        demos marked `debug` (hidden on the built site) and the demos' code are left out."""
        locale = _PAGE_LOCALE.search(page.stem)
        return _DUMI_DEMO.sub(
            lambda m: self._demo(page, m, locale["locale"] if locale else None), text
        )

    def _demo(self, page: Path, match: re.Match, locale: str | None) -> str:
        attributes = {a["name"]: a["value"] or "" for a in _ATTRIBUTE.finditer(match["attributes"])}
        if "debug" in attributes:
            return ""
        title = (match["title"] or "").strip() or attributes.get("title", "").strip()
        description = attributes.get("description", "").strip()
        source = attributes.get("src", "")
        stem = source
        for suffix in _DEMO_SUFFIXES[1:]:
            stem = stem.removesuffix(suffix)
        notes = self.text(page, stem + ".md", (page.resolve(),))
        if notes is not None:
            from archivist.ingest.loaders.text import split_front_matter

            try:
                front, notes = split_front_matter(notes)
            except LoadError:
                front = {}
            title = title or str(front.get("title") or "").strip()
            description = description or _locale_section(notes, locale)
        elif not (title and description):
            for suffix in _DEMO_SUFFIXES:
                code = self.text(page, stem + suffix, (page.resolve(),))
                if code is not None:
                    doc = _jsdoc(code)
                    title = title or doc.get("title", "")
                    description = description or doc.get("description", "")
                    break
        line = " ".join(description.split())
        if title:
            return f"- **{title}**: {line}" if line else f"- **{title}**"
        return f"- {line}" if line else ""

    def _mdx(self, page: Path, text: str, chain: tuple[Path, ...]) -> str:
        for match in list(_MDX_IMPORT.finditer(text)):
            spec, name = match["spec"], match["name"]
            raw = spec.startswith("!!raw-loader!") or spec.endswith("?raw")
            target = spec.removeprefix("!!raw-loader!").removesuffix("?raw")
            if not (raw or Path(target).suffix.lower() in (".md", ".mdx")):
                continue
            if not target.startswith((".", "/")):
                continue  # a package, not a file of the site
            included = self.text(page, target, chain)
            if included is None:
                continue
            if raw:
                # `<CodeBlock ...>{Name}</CodeBlock>`: the expression becomes the code.
                block = "\n" + _fence(included, target) + "\n"
                text = re.sub(r"\{\s*" + re.escape(name) + r"\s*\}", lambda _, b=block: b, text)
            else:
                partial = "\n\n" + included + "\n\n"
                text = re.sub(r"<" + re.escape(name) + r"\s*/>", lambda _, b=partial: b, text)
        return text

    def _rst(self, page: Path, match: re.Match, chain: tuple[Path, ...]) -> str:
        included = self.text(page, match["path"], chain)
        if included is None:
            return match[0]
        options = dict(_RST_OPTION.findall(match["options"]))
        indent = match["indent"]
        if match["kind"] == "include":
            return _indent(included, indent) + "\n"
        if "lines" in options:
            included = _select_ranges(included, options["lines"].replace("-", ":"))
        language = options.get("language") or _LANGUAGES.get(Path(match["path"]).suffix, "")
        body = _indent(included, indent + "   ")
        return f"{indent}.. code-block:: {language}\n\n{body}\n\n"


def expand_includes(page: Path, text: str, root: Path | None) -> str:
    """`text` (the page at `page`) with its include directives replaced by the files they
    name inside `root` (None: the page's own folder)."""
    includer = _Includer(root or page.parent)
    return includer.expand(page, text, (page.resolve(),))


def read_demos(page: Path, text: str, root: Path | None) -> str:
    """`text` (the page at `page`) with dumi's demo tags (`<code src="./demo/x.tsx">`)
    replaced, each by one line: `- **title**: description`, from the demo's Markdown (the
    page's locale section, `## zh-CN`, of `demo/x.md`) or its code's JSDoc block. Line for
    line, so the page's lines stay the file's own."""
    if "<code" not in text:
        return text
    return _Includer(root or page.parent).demos(page, text)


def included_files(page: Path, text: str, root: Path | None) -> list[Path]:
    """The files a page's include directives and demos read (for the page's version hash: a
    change in an included example is a change of the page)."""
    includer = _Includer(root or page.parent)
    includer.demos(page, includer.expand(page, text, (page.resolve(),)))
    return includer.read


def _locale_section(notes: str, locale: str | None) -> str:
    """A demo note's section for `locale` (`## zh-CN` … up to the next such heading); the
    English one, else the first, for a page of no locale; the whole note without them."""
    parts = _LOCALE_HEADING.split(notes)
    if len(parts) < 3:
        return notes.strip()
    sections = dict(zip(parts[1::2], parts[2::2], strict=True))
    chosen = sections.get(locale or "") or sections.get("en-US") or parts[2]
    return chosen.strip()


def _jsdoc(code: str) -> dict[str, str]:
    """`title:` and `description:` of a JSDoc block opening a demo's code."""
    match = _JSDOC.match(code)
    found: dict[str, str] = {}
    if match:
        for line in match["body"].splitlines():
            key, colon, value = line.strip().lstrip("*").strip().partition(":")
            if colon and key.strip() in ("title", "description") and value.strip():
                found.setdefault(key.strip(), value.strip())
    return found


def _region(text: str, name: str) -> str:
    """The lines between `#region name` and `#endregion` markers (in any comment style);
    the whole text when there is no such region."""
    lines = text.splitlines()
    start = next(
        (i for i, line in enumerate(lines) if re.search(rf"#region\s+{re.escape(name)}\b", line)),
        None,
    )
    if start is None:
        return text
    end = next((i for i in range(start + 1, len(lines)) if "#endregion" in lines[i]), len(lines))
    return "\n".join(lines[start + 1 : end])


def _line_suffix(name: str) -> tuple[str, tuple[int, int] | None]:
    """`file.py:3:9` → (`file.py`, (3, 9)); a name without line numbers → (name, None)."""
    match = re.fullmatch(r"(?P<name>.+?):(?P<start>\d+)(?::(?P<end>\d+))?", name)
    if not match:
        return name, None
    return match["name"], (int(match["start"]), int(match["end"] or match["start"]))


def _select(text: str, lines: tuple[int, int] | None) -> str:
    if lines is None:
        return text
    start, end = lines
    return "\n".join(text.splitlines()[max(start - 1, 0) : end])


def _select_ranges(text: str, ranges: str) -> str:
    """Lines by 1-based ranges `3:9,12` (`a:b` inclusive, an open end to the file's end)."""
    all_lines = text.splitlines()
    kept: list[str] = []
    for part in ranges.split(","):
        start, colon, end = (s.strip() for s in part.partition(":"))
        if not start.isdigit():
            continue
        first = int(start)
        last = int(end) if end.isdigit() else len(all_lines) if colon else first
        kept += all_lines[max(first - 1, 0) : last]
    return "\n".join(kept) if kept else text


def _fence(code: str, name: str) -> str:
    language = _LANGUAGES.get(Path(name).suffix.lower(), "")
    ticks = "````" if "```" in code else "```"
    return f"{ticks}{language}\n{code}\n{ticks}"


def _indent(text: str, indent: str) -> str:
    return "\n".join(indent + line if line.strip() else line for line in text.splitlines())
