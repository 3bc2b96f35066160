"""Web pages and sites: fetched politely, their main content kept as files the loaders read.

`crawl` reads one page, or a site under the starting URL's folder (its *prefix*): the pages
its sitemap lists (robots.txt `Sitemap:` lines, else `/sitemap.xml`), or else the pages its
links reach, breadth first, up to `max_pages` and `max_depth` links away. robots.txt is
obeyed (and its `Crawl-delay`), one request is made at a time, a 429 or 503 is waited out
(its `Retry-After`, within bounds), redirects are followed only under the prefix, and
nothing on another host is fetched.

An HTML page's main content (without navigation, headers, footers and ads) is extracted by
trafilatura (the `archivist[web]` extra) into a Markdown file; a PDF or another document a
loader reads is kept as it came. The files live in an HTTP cache with each page's ETag and
Last-Modified, so the next crawl asks with a conditional GET and a page answered 304 is
read from the cache: its content hash is unchanged, so nothing is embedded again. A page's
source name is its URL (without its fragment): unique in any store, and a citation a user
can open.
"""

import contextlib
import gzip
import hashlib
import io
import json
import logging
import os
import tempfile
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any
from urllib.parse import urljoin, urlsplit, urlunsplit

from archivist.ingest.discovery import Failure, SourceFile
from archivist.ingest.loaders import LOADERS, MAX_FILE_BYTES
from archivist.ingest.urls import (
    WebOptions,
    check_url,
    is_url,
    normalise,
    prefix_of,
)
from archivist.tools.errors import ArchivistError, install_command
from archivist.tools.progress import Fetched, ProgressFn, ignore

# The crawler's own libraries are imported where a site is crawled.
if TYPE_CHECKING:
    import urllib.robotparser

MAX_REDIRECTS = 5
MAX_RETRIES = 3
"""Times a page answered 429 or 503 is asked for again before it fails."""
MAX_RETRY_WAIT = 60.0
"""The longest wait a `Retry-After` is honoured for; a server asking for more fails the page."""
MAX_CRAWL_DELAY = 60.0
"""The longest robots.txt `Crawl-delay` honoured between two requests."""
MAX_SITEMAPS = 20
"""Sitemap files read at most (a sitemap index names others)."""
MAX_SITEMAP_BYTES = 50 * 1024 * 1024
"""A sitemap's size at most, unpacked (the sitemap protocol's own limit)."""
HTML_TYPES = ("text/html", "application/xhtml+xml")
# Content types whose documents a loader reads, with the extension the file is kept under.
CONTENT_TYPES = {
    "application/pdf": ".pdf",
    "text/plain": ".txt",
    "text/markdown": ".md",
    "text/x-markdown": ".md",
    "application/rtf": ".rtf",
    "text/rtf": ".rtf",
    "application/epub+zip": ".epub",
    "application/vnd.oasis.opendocument.text": ".odt",
    "application/vnd.oasis.opendocument.spreadsheet": ".ods",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document": ".docx",
    "application/vnd.openxmlformats-officedocument.presentationml.presentation": ".pptx",
    "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet": ".xlsx",
    "application/vnd.ms-excel": ".xls",
}
# Links to these are not pages: not fetched (a site's stylesheets, scripts, media, archives).
NOT_PAGES = frozenset(
    ".css .js .mjs .map .png .jpg .jpeg .gif .svg .webp .ico .bmp .tif .tiff .woff .woff2 .ttf "
    ".otf .eot .mp3 .mp4 .m4a .wav .ogg .webm .avi .mov .zip .gz .tgz .bz2 .xz .7z .rar .tar "
    ".exe .dmg .msi .deb .rpm .apk .iso .bin".split()
)


def pause(seconds: float) -> None:
    """Wait between two requests (a function of its own: tests count the waits)."""
    time.sleep(seconds)


def user_agent() -> str:
    """Archivist's User-Agent: its name and version, and where to read about it."""
    from importlib.metadata import PackageNotFoundError, metadata

    try:
        meta = metadata("archivist")
    except PackageNotFoundError:
        return "archivist/0 (local-first RAG; obeys robots.txt)"
    urls = [u.split(",", 1)[-1].strip() for u in meta.get_all("Project-URL") or []]
    about = f"+{urls[0]}" if urls else "local-first RAG; obeys robots.txt"
    return f"archivist/{meta['Version']} ({about})"


@dataclass
class Crawl:
    """What one crawl found."""

    files: list[SourceFile] = field(default_factory=list)
    """The pages read (or found unchanged), as files of the cache, named by their URLs."""
    failed: list[Failure] = field(default_factory=list)
    skipped: list[Failure] = field(default_factory=list)
    gone: list[str] = field(default_factory=list)
    """Pages the store held that the site says are gone (404, 410): to remove."""
    kept: list[str] = field(default_factory=list)
    """Pages the store held that were not read this time (not reached within the bounds, or
    a failure): what the store holds of them is kept."""


@dataclass
class _Answer:
    status: int
    url: str
    headers: Any
    body: bytes


class _PageFailed(Exception):
    """A page that could not be fetched; the message is the reason."""


class Crawler:
    """One crawl of a site: its robots rules, its pacing, and the HTTP cache."""

    def __init__(
        self,
        options: WebOptions,
        cache: Path,
        notify: ProgressFn = ignore,
    ) -> None:
        import httpx

        self.options = options
        self.cache = cache
        self.notify = notify
        self.agent = user_agent()
        self.client = httpx.Client(
            headers={"User-Agent": self.agent},
            timeout=httpx.Timeout(options.timeout, connect=min(10.0, options.timeout)),
            follow_redirects=False,
        )
        self.delay = options.delay
        self._last = 0.0
        self.robots: urllib.robotparser.RobotFileParser | None = None
        self.result = Crawl()
        self.reached: set[str] = set()
        """The pages answered, by their URL after redirects."""

    def close(self) -> None:
        self.client.close()

    def crawl(self, start: str, known: Iterable[str] = ()) -> Crawl:
        """Crawl from `start`; `known` are the pages the store holds, asked for again so
        that a page gone is noticed."""
        start = check_url(start)
        result = self.result
        robots_problem = self._read_robots(start)
        if robots_problem:
            result.failed.append(Failure(start, robots_problem))
            result.kept += list(known)
            return result
        queue: deque[tuple[str, int]] = deque([(start, 0)])
        seen = {start}
        prefix: str | None = None
        follow = True
        pages = 0
        known = [k for k in known if k != start]
        read_known = False
        while queue and pages < self.options.max_pages:
            url, depth = queue.popleft()
            if not self._allowed(url):
                result.skipped.append(Failure(url, "disallowed by robots.txt"))
                continue
            pages += 1
            page = self._page(url, prefix, known)
            if prefix is None:
                # The starting page settles the prefix (a redirect of `/docs` to `/docs/`
                # moves it), then the sitemap, if any, lists the pages.
                prefix = prefix_of(page.url if page else url)
                listed = []
                if self.options.max_depth > 0:
                    listed = [u for u in self._sitemap_pages(prefix) if u not in seen]
                follow = not listed
                for link in listed:
                    seen.add(link)
                    queue.append((link, 1))
            if page is not None and follow and depth < self.options.max_depth:
                for link in page.links:
                    if link not in seen and _under(link, prefix):
                        seen.add(link)
                        queue.append((link, depth + 1))
            if not queue and not read_known:
                read_known = True
                for link in known:
                    if link not in seen:
                        seen.add(link)
                        queue.append((link, self.options.max_depth))
        done = {f.source for f in result.files} | set(result.gone)
        result.kept += [k for k in known if k not in done]
        return result

    # Pages

    def _page(self, url: str, prefix: str | None, known: list[str]) -> "_Page | None":
        """Fetch one page and file it in the result: read, unchanged, gone, skipped or
        failed; return it when it was read (its links and final URL). `prefix` is None for
        the starting page, which may be redirected anywhere on its host."""
        result = self.result
        try:
            answer = self._follow(url, prefix)
        except _PageFailed as exc:
            result.failed.append(Failure(url, str(exc)))
            return None
        final = answer.url
        self.notify(Fetched(final, answer.status))
        if final in self.reached:
            return None  # a redirect to a page read already
        self.reached.add(final)
        if answer.status == 304:
            entry = self._entry(final)
            path = self._content_path(final, entry)
            if entry is None or path is None:  # the cache was emptied during the crawl
                result.failed.append(Failure(final, "HTTP 304 without a cached copy"))
                return None
            result.files.append(SourceFile(path, final))
            return _Page(final, [link for link in entry.get("links", []) if isinstance(link, str)])
        if answer.status in (404, 410):
            self._forget(final)
            if url in known or final in known:
                result.gone.append(final if final in known else url)
            elif prefix is None:
                result.failed.append(Failure(url, f"HTTP {answer.status}: no such page"))
            else:
                result.skipped.append(Failure(url, f"HTTP {answer.status}: a broken link"))
            return None
        if answer.status in (429, 503):
            result.failed.append(
                Failure(url, f"HTTP {answer.status}: still refused after {MAX_RETRIES} retries")
            )
            return None
        if answer.status >= 500:
            result.failed.append(Failure(url, f"HTTP {answer.status}: the server failed"))
            return None
        if answer.status != 200:
            result.skipped.append(Failure(url, f"HTTP {answer.status}"))
            return None
        try:
            return self._keep(answer, prefix)
        except _PageFailed as exc:
            result.failed.append(Failure(final, str(exc)))
        except _Skip as exc:
            result.skipped.append(Failure(final, str(exc)))
        return None

    def _keep(self, answer: _Answer, prefix: str | None) -> "_Page":
        """Write a page's content to the cache with its validators and links."""
        kind = _content_type(answer.headers)
        robots = answer.headers.get("x-robots-tag", "").lower()
        links: list[str] = []
        if kind in HTML_TYPES or (not kind and answer.body.lstrip()[:1] == b"<"):
            html = _decode_html(answer.body, answer.headers)
            meta, links = _read_html(html, answer.url)
            robots += " " + meta
            if "noindex" in robots:
                raise _Skip("the page asks not to be indexed (robots noindex)")
            if "nofollow" in robots:
                links = []
            links = [link for link in links if _under(link, prefix or prefix_of(answer.url))]
            title, text = page_markdown(html, answer.url)
            if not text.strip():
                raise _Skip("no text in the page")
            import yaml

            # Front matter: the Markdown loader reads it into the chunks' metadata.
            front = {"title": title, "url": answer.url} if title else {"url": answer.url}
            content = f"---\n{yaml.safe_dump(front, allow_unicode=True)}---\n{text}\n"
            content = content.encode("utf-8")
            suffix = ".md"
        else:
            suffix = CONTENT_TYPES.get(kind) or _suffix_of(answer.url, kind)
            if suffix not in LOADERS:
                raise _Skip(f"content type '{kind or 'unknown'}' is not a document Archivist reads")
            content = answer.body
        key = _key(answer.url)
        path = self.cache / f"{key}{suffix}"
        _write(path, content)
        entry = {
            "url": answer.url,
            "file": path.name,
            "etag": answer.headers.get("etag"),
            "last_modified": answer.headers.get("last-modified"),
            "links": links,
        }
        _write(self._entry_path(answer.url), json.dumps(entry).encode())
        self.result.files.append(SourceFile(path, answer.url))
        return _Page(answer.url, links)

    def _follow(self, url: str, prefix: str | None) -> _Answer:
        """GET a page, conditionally when the cache holds it, following redirects that stay
        under the prefix (the starting page's: on its host)."""
        for _ in range(MAX_REDIRECTS + 1):
            headers = {}
            entry = self._entry(url)
            if entry is not None and self._content_path(url, entry) is not None:
                if entry.get("etag"):
                    headers["If-None-Match"] = entry["etag"]
                if entry.get("last_modified"):
                    headers["If-Modified-Since"] = entry["last_modified"]
            limit = max(self.options.max_page_bytes, MAX_FILE_BYTES)
            answer = self._get(url, headers, limit)
            if answer.status not in (301, 302, 303, 307, 308):
                if (
                    _content_type(answer.headers) in HTML_TYPES
                    and len(answer.body) > self.options.max_page_bytes
                ):
                    raise _PageFailed(f"a page over the {_size(self.options.max_page_bytes)} limit")
                return answer
            location = answer.headers.get("location")
            if not location:
                raise _PageFailed(f"HTTP {answer.status} without a Location")
            target = normalise(urljoin(url, location))
            if urlsplit(target).scheme not in ("http", "https"):
                raise _PageFailed(f"redirected to {target}, which is not http(s)")
            if not _same_host(target, url) or (prefix is not None and not _under(target, prefix)):
                raise _PageFailed(f"redirected off the site, to {target} (not followed)")
            if not self._allowed(target):
                raise _PageFailed(f"redirected to {target}, which robots.txt disallows")
            url = target
        raise _PageFailed(f"more than {MAX_REDIRECTS} redirects")

    def _get(self, url: str, headers: dict[str, str], limit: int) -> _Answer:
        """One GET, paced, with 429 and 503 waited out; the body read up to `limit` bytes."""
        import httpx

        for attempt in range(MAX_RETRIES + 1):
            wait = self.delay - (time.monotonic() - self._last)
            if wait > 0:
                pause(wait)
            try:
                with self.client.stream("GET", url, headers=headers) as response:
                    self._last = time.monotonic()
                    if response.status_code in (429, 503) and attempt < MAX_RETRIES:
                        asked = _retry_after(response.headers.get("retry-after"), attempt)
                        if asked > MAX_RETRY_WAIT:
                            raise _PageFailed(
                                f"HTTP {response.status_code}: the server asks to wait "
                                f"{asked:.0f} s, over the {MAX_RETRY_WAIT:.0f} s limit"
                            )
                        response.close()
                        pause(asked)
                        continue
                    body = bytearray()
                    for block in response.iter_bytes():
                        body += block
                        if len(body) > limit:
                            raise _PageFailed(f"over the {_size(limit)} limit")
                    return _Answer(response.status_code, url, response.headers, bytes(body))
            except httpx.TimeoutException:
                self._last = time.monotonic()
                raise _PageFailed(f"no answer within {self.options.timeout:g} s") from None
            except httpx.HTTPError as exc:
                self._last = time.monotonic()
                raise _PageFailed(f"cannot fetch: {exc}") from None
        raise AssertionError("unreachable")  # the last attempt returns or raises

    # Robots and sitemaps

    def _read_robots(self, start: str) -> str | None:
        """Read the site's robots.txt; return why nothing may be fetched, if so."""
        parts = urlsplit(start)
        url = urlunsplit((parts.scheme, parts.netloc, "/robots.txt", "", ""))
        import urllib.robotparser

        rules = urllib.robotparser.RobotFileParser(url)
        try:
            answer = self._get(url, {}, 512 * 1024)
            for _ in range(MAX_REDIRECTS):  # as the robots.txt standard asks: up to five
                location = answer.headers.get("location")
                if answer.status not in (301, 302, 303, 307, 308) or not location:
                    break
                answer = self._get(normalise(urljoin(url, location)), {}, 512 * 1024)
        except _PageFailed as exc:
            return f"robots.txt could not be read ({exc}): nothing fetched; try again later"
        if answer.status >= 500:
            return (
                f"robots.txt could not be read (HTTP {answer.status}): nothing fetched, as "
                "robots.txt asks of a server that fails it; try again later"
            )
        if answer.status == 200:
            rules.parse(answer.body.decode("utf-8", errors="replace").splitlines())
            asked = rules.crawl_delay(self.agent)
            if asked:
                self.delay = max(self.delay, min(float(asked), MAX_CRAWL_DELAY))
        else:  # no robots.txt (4xx): everything is allowed
            rules.parse([])
        self.robots = rules
        return None

    def _allowed(self, url: str) -> bool:
        return self.robots is None or self.robots.can_fetch(self.agent, url)

    def _sitemap_pages(self, prefix: str) -> list[str]:
        """The pages under `prefix` the site's sitemaps list, in their order."""
        parts = urlsplit(prefix)
        root = urlunsplit((parts.scheme, parts.netloc, "/", "", ""))
        maps = (self.robots.site_maps() if self.robots else None) or [root + "sitemap.xml"]
        todo = deque(normalise(m) for m in maps if _same_host(normalise(m), prefix))
        read: set[str] = set()
        pages: list[str] = []
        found: set[str] = set()
        while todo and len(read) < MAX_SITEMAPS:
            url = todo.popleft()
            if url in read or not self._allowed(url):
                continue
            read.add(url)
            try:
                answer = self._get(url, {}, MAX_SITEMAP_BYTES)
            except _PageFailed:
                continue
            if answer.status != 200:
                continue
            pages_in, maps_in = _read_sitemap(answer.body)
            todo.extend(m for m in maps_in if _same_host(m, prefix))
            for page in pages_in:
                if page not in found and _under(page, prefix):
                    found.add(page)
                    pages.append(page)
        return pages

    # The cache

    def _forget(self, url: str) -> None:
        """Drop a page gone from the cache (its entry and its file)."""
        entry = self._entry(url)
        for path in (self._content_path(url, entry), self._entry_path(url)):
            if path is not None:
                with contextlib.suppress(OSError):
                    path.unlink()

    def _entry_path(self, url: str) -> Path:
        return self.cache / f"{_key(url)}.json"

    def _entry(self, url: str) -> dict[str, Any] | None:
        try:
            entry = json.loads(self._entry_path(url).read_bytes())
        except (OSError, ValueError):
            return None
        return entry if isinstance(entry, dict) and entry.get("url") == url else None

    def _content_path(self, url: str, entry: dict[str, Any] | None) -> Path | None:
        if not entry or not isinstance(entry.get("file"), str):
            return None
        path = self.cache / PurePosixPath(entry["file"]).name
        return path if path.is_file() else None


@dataclass
class _Page:
    url: str
    links: list[str]


class _Skip(Exception):
    """A page that is not a document to store; the message is the reason."""


def crawl(
    starts: Iterable[str],
    options: WebOptions,
    known: Iterable[str] = (),
    notify: ProgressFn = ignore,
    cache: Path | None = None,
) -> Crawl:
    """Crawl each starting URL; `known` are the sources the store holds (the URLs under a
    start's prefix are asked for again). Files are written to `cache`, else `options.cache`."""
    folder = Path(cache or options.cache or tempfile.mkdtemp(prefix="archivist-web-"))
    folder.mkdir(parents=True, exist_ok=True)
    known = list(known)
    total = Crawl()
    for start in starts:
        start = check_url(start)
        crawler = Crawler(options, folder, notify)
        try:
            mine = [k for k in known if is_url(k) and _under(k, prefix_of(start))]
            found = crawler.crawl(start, mine)
        finally:
            crawler.close()
        names = {f.source for f in total.files}
        total.files += [f for f in found.files if f.source not in names]  # sites overlapping
        for name in ("failed", "skipped", "gone", "kept"):
            getattr(total, name).extend(getattr(found, name))
    return total


def page_markdown(html: str, url: str) -> tuple[str, str]:
    """A page's title and main content as Markdown: trafilatura's extraction, else (a page
    too short or too unusual for it) the whole page without navigation, header and footer."""
    try:
        import trafilatura
    except ImportError:
        raise ArchivistError(
            "Reading web pages needs the web extra (trafilatura extracts a page's main content).",
            f"Install it: {install_command('web')}",
        ) from None
    from archivist.ingest.loaders.text import html_to_markdown, split_front_matter

    # Its notices on unusual pages are not the user's to read; what matters is in the report.
    logging.getLogger("trafilatura").setLevel(logging.ERROR)
    extracted = trafilatura.extract(
        html,
        url=url,
        output_format="markdown",
        # Precision: on a short page, recall keeps the navigation links as text.
        favor_precision=True,
        include_tables=True,
        include_links=False,
        include_images=False,
        include_formatting=True,
        with_metadata=True,
        deduplicate=False,
    )
    if extracted:
        meta, text = split_front_matter(extracted)
        if text.strip():
            return str(meta.get("title") or ""), text.strip()
    return html_to_markdown(html)


# Helpers


def _size(limit: int) -> str:
    return f"{limit // 2**20} MB" if limit >= 2**20 else f"{limit // 1024} KB"


def _under(url: str, prefix: str) -> bool:
    return url.startswith(prefix) or url + "/" == prefix


def _same_host(a: str, b: str) -> bool:
    one, two = urlsplit(a), urlsplit(b)
    return (one.scheme, one.netloc) == (two.scheme, two.netloc)


def _key(url: str) -> str:
    return hashlib.sha256(url.encode("utf-8", "surrogatepass")).hexdigest()[:40]


def _write(path: Path, data: bytes) -> None:
    """Write a cache file whole or not at all (a crawl interrupted leaves no half page)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _content_type(headers: Any) -> str:
    return headers.get("content-type", "").split(";")[0].strip().lower()


def _suffix_of(url: str, kind: str) -> str:
    """The extension a document is kept under: its type's, else (a server that does not say)
    its URL's."""
    if kind in ("", "application/octet-stream", "binary/octet-stream"):
        return PurePosixPath(urlsplit(url).path).suffix.lower()
    import mimetypes

    return mimetypes.guess_extension(kind) or ""


def _retry_after(value: str | None, attempt: int) -> float:
    """Seconds to wait before asking again: the server's `Retry-After` (seconds, or a date),
    else 1, 2, 4… s."""
    if value:
        value = value.strip()
        if value.isdigit():
            return float(value)
        with contextlib.suppress(TypeError, ValueError):
            import email.utils

            when = email.utils.parsedate_to_datetime(value)
            return max(0.0, when.timestamp() - time.time())
    return float(2**attempt)


def _decode_html(body: bytes, headers: Any) -> str:
    charset = None
    for part in headers.get("content-type", "").split(";")[1:]:
        name, _, value = part.partition("=")
        if name.strip().lower() == "charset":
            charset = value.strip().strip('"')
    if charset:
        with contextlib.suppress(LookupError, UnicodeDecodeError):
            return body.decode(charset)
    from archivist.ingest.loaders import LoadError, decode_text

    try:
        return decode_text(body)
    except LoadError:
        return body.decode("utf-8", errors="replace")


def _read_html(html: str, url: str) -> tuple[str, list[str]]:
    """A page's robots meta directives, and the links it holds (absolute, normalised, not
    `rel=nofollow`, not to stylesheets, scripts or media)."""
    import lxml.html

    try:
        document = lxml.html.document_fromstring(html)
    except (ValueError, lxml.etree.ParserError):
        return "", []
    base = url
    for element in document.iter("base"):
        if element.get("href"):
            base = urljoin(url, element.get("href"))
            break
    robots = " ".join(
        (meta.get("content") or "").lower()
        for meta in document.iter("meta")
        if (meta.get("name") or "").lower() in ("robots", "archivist")
    )
    links = []
    for anchor in document.iter("a"):
        href = anchor.get("href")
        if not href or "nofollow" in (anchor.get("rel") or "").lower():
            continue
        link = normalise(urljoin(base, href.strip()))
        parts = urlsplit(link)
        if parts.scheme not in ("http", "https"):
            continue
        if PurePosixPath(parts.path).suffix.lower() in NOT_PAGES:
            continue
        links.append(link)
    return robots, links


def _read_sitemap(body: bytes) -> tuple[list[str], list[str]]:
    """The pages and the nested sitemaps a sitemap (XML, maybe gzipped) lists."""
    from lxml import etree

    if body[:2] == b"\x1f\x8b":
        try:
            with gzip.GzipFile(fileobj=io.BytesIO(body)) as packed:
                body = packed.read(MAX_SITEMAP_BYTES + 1)
        except (OSError, EOFError):
            return [], []
        if len(body) > MAX_SITEMAP_BYTES:
            return [], []
    parser = etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False)
    try:
        root = etree.fromstring(body, parser)
    except etree.XMLSyntaxError:
        return [], []
    pages, maps = [], []
    for element in root.iter("{*}loc"):
        text = (element.text or "").strip()
        if not text:
            continue
        parent = element.getparent()
        name = etree.QName(parent).localname if parent is not None else ""
        (maps if name == "sitemap" else pages).append(normalise(text))
    return pages, maps
