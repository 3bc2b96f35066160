"""Web pages and sites: fetched politely, their main content kept as files the loaders read.

`crawl` reads one page, or a site under the starting URL's folder (its *prefix*): the pages
its sitemap lists (robots.txt `Sitemap:` lines, else `/sitemap.xml`), or else the pages its
links reach, breadth first, up to `max_pages` and `max_depth` links away. robots.txt is
obeyed (RFC 9309: the longest matching rule wins, `*` and `$` patterns, its first 500 KiB
read, and its `Crawl-delay`), one request is made at a time, a 429 or 503 is waited out
(its `Retry-After`, within bounds), redirects are followed only under the prefix, and
nothing on another host is fetched. Links and sitemap entries with a query string (`?…`)
are not followed: a site's pages are told apart by their paths, and a query can name
endless pages.

Every request ends within `WebOptions.deadline` from its first byte to its answer's last,
however slowly its bytes come, and a crawl stops once three pages in a row have timed out
(what it stored is kept); an answer's bytes are counted as they are unpacked (gzip,
deflate, stacked or not), so a small compressed body that unpacks to gigabytes is cut at the
limit, holding at most the limit in memory.

An HTML page's main content (without navigation, headers, footers and ads) is extracted by
trafilatura (the `archivist[web]` extra) into a Markdown file; a PDF or another document a
loader reads is kept as it came. The files live in an HTTP cache with each page's ETag and
Last-Modified, so the next crawl asks with a conditional GET and a page answered 304 is
read from the cache: its content hash is unchanged, so nothing is embedded again. A page's
source name is its URL (without its fragment): unique in any store, and a citation a user
can open.
"""

import codecs
import contextlib
import hashlib
import json
import logging
import os
import tempfile
import time
import zlib
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any
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
"""The sitemaps' size at most, unpacked, all of a crawl's together (the sitemap protocol's
limit for one): a sitemap is read as it comes, and no further once it has listed
`max_pages` pages under the prefix."""
MAX_ROBOTS_BYTES = 500 * 1024
"""How much of a robots.txt is read (RFC 9309 asks for at least 500 KiB; the rest is left)."""
ROBOTS_AGENT = "archivist"
"""The product token robots.txt groups are matched against."""
CODINGS = "gzip, deflate"
"""The content encodings asked for, and the only ones read (each unpacked by a bounded
stream); a server answering in another one fails the page, naming it."""
PIECE = 64 * 1024
"""The most one unpacking step gives at once: what an answer holds in memory is its size
so far plus one piece per encoding."""
# Text encodings a page may declare that are not a page's charset: decoding by them is
# meaningless, and slow (punycode is quadratic) or unsafe (UTF-7 hides markup).
NOT_CHARSETS = frozenset(
    "punycode idna unicode_escape raw_unicode_escape utf_7 undefined unicode_internal "
    "string_escape".split()
)
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


class _TooSlow(_PageFailed):
    """A page whose answer did not come, or not whole, in time."""


# Pages in a row that time out before a crawl stops: a site that drips on every page would
# otherwise hold the home's write lock for `max_pages` deadlines (200 × 120 s: hours).
SLOW_IN_A_ROW = 3


class _Unpacker:
    """An answer's body unpacked as it comes, through its content encodings (in the order
    they were applied), its size counted piece by piece against `limit`."""

    def __init__(
        self,
        codings: str,
        limit: int,
        cut: bool = False,
        over: str = "",
        sink: Callable[[bytes], bool] | None = None,
    ) -> None:
        self.limit = limit
        self.sink = sink
        """Given each piece as it is unpacked, instead of `body`; True from it stops."""
        self.over = over or f"over the {_size(limit)} limit"
        self.cut = cut
        """At the limit: stop and keep what came (robots.txt), rather than fail."""
        self.body = bytearray()
        self.size = 0
        """The bytes unpacked so far (a sink may have taken some out of `body`)."""
        self.full = False
        self.stages: list[Any] = []
        for coding in reversed([c.strip().lower() for c in codings.split(",") if c.strip()]):
            if coding in ("gzip", "x-gzip"):
                self.stages.append(zlib.decompressobj(16 + zlib.MAX_WBITS))
            elif coding == "deflate":
                self.stages.append(_Deflate())
            elif coding != "identity":
                raise _PageFailed(
                    f"content encoding '{coding}', which Archivist does not read (it asks "
                    f"for {CODINGS})"
                )

    def feed(self, data: bytes, level: int = 0) -> None:
        """Pass raw bytes through the stages from `level` on; the last adds to the body."""
        if self.full:
            return
        if level == len(self.stages):
            room = self.limit - self.size
            if len(data) > room:
                if not self.cut:
                    raise _PageFailed(self.over)
                data, self.full = data[:room], True
            self.size += len(data)
            if self.sink is None:
                self.body += data
            elif data and self.sink(data):
                self.full = True
            return
        stage = self.stages[level]
        try:
            while data and not self.full:
                piece = stage.decompress(data, PIECE)
                data = stage.unconsumed_tail
                if stage.eof:
                    data = b""  # what follows the compressed stream is not the page's
                self.feed(piece, level + 1)
                # Output held back inside the stream: drained a piece at a time.
                while len(piece) == PIECE and not data and not stage.eof and not self.full:
                    piece = stage.decompress(b"", PIECE)
                    data = stage.unconsumed_tail
                    self.feed(piece, level + 1)
        except zlib.error as exc:
            raise _PageFailed(f"damaged compressed content ({exc})") from None

    def close(self) -> bytes:
        """The body, once the raw bytes are all in."""
        for level, stage in enumerate(self.stages):
            if self.full:
                break
            try:
                rest = stage.flush(PIECE)
            except zlib.error as exc:
                raise _PageFailed(f"damaged compressed content ({exc})") from None
            self.feed(rest, level + 1)
        return bytes(self.body)


class _Deflate:
    """HTTP's `deflate`: zlib-wrapped as the standard says, or raw as some servers send it."""

    def __init__(self) -> None:
        self.inner: Any = None

    def decompress(self, data: bytes, size: int) -> bytes:
        if self.inner is None:
            try:
                self.inner = zlib.decompressobj()
                return self.inner.decompress(data, size)
            except zlib.error:
                self.inner = zlib.decompressobj(-zlib.MAX_WBITS)
        return self.inner.decompress(data, size)

    @property
    def unconsumed_tail(self) -> bytes:
        return self.inner.unconsumed_tail if self.inner is not None else b""

    @property
    def eof(self) -> bool:
        return self.inner is not None and self.inner.eof

    def flush(self, size: int) -> bytes:
        return self.inner.flush(size) if self.inner is not None else b""


class Crawler:
    """One crawl of a site: its robots rules, its pacing, and the HTTP cache."""

    def __init__(
        self,
        options: WebOptions,
        cache: Path,
        notify: ProgressFn = ignore,
    ) -> None:
        import httpx

        from archivist.tools.deadline import DeadlineTransport

        self.options = options
        self.cache = cache
        self.notify = notify
        self.agent = user_agent()

        def transport(proxy: str | None = None) -> httpx.HTTPTransport:
            return DeadlineTransport(options.deadline, renew_streams=False, proxy=proxy)

        self.client = httpx.Client(
            headers={"User-Agent": self.agent, "Accept-Encoding": CODINGS},
            timeout=httpx.Timeout(options.timeout, connect=min(10.0, options.timeout)),
            follow_redirects=False,
            transport=transport(),
            mounts={
                pattern: transport(proxy) if proxy else None
                for pattern, proxy in _environment_proxies().items()
            },
        )
        self.delay = options.delay
        self._last = 0.0
        self.robots: Any = None
        """The site's robots.txt rules (protego's parser), once read."""
        self.sitemap_bytes = 0
        """The sitemaps' bytes read so far, unpacked."""
        self.result = Crawl()
        self.slow_in_a_row = 0  # pages that timed out since the last that answered
        self.reached: set[str] = set()
        """The pages answered, by their URL after redirects."""

    def close(self) -> None:
        self.client.close()

    def crawl(self, start: str, known: Iterable[str] = ()) -> Crawl:
        """Crawl from `start`; `known` are the pages the store holds, asked for again so
        that a page gone is noticed."""
        start = check_url(start)
        result = self.result
        held = list(known)
        robots_problem = self._read_robots(start)
        if robots_problem:
            result.failed.append(Failure(start, robots_problem))
            result.kept += held
            return result
        queue: deque[tuple[str, int]] = deque([(start, 0)])
        seen = {start}
        prefix: str | None = None
        follow = True
        pages = 0
        known = [k for k in held if k != start]
        read_known = False
        while queue and pages < self.options.max_pages:
            url, depth = queue.popleft()
            if not self._allowed(url):
                result.skipped.append(Failure(url, "disallowed by robots.txt"))
                continue
            pages += 1
            try:
                page = self._page(url, prefix, held)
            except Exception as exc:  # noqa: BLE001 - whatever a page does fails it alone
                result.failed.append(Failure(url, _unexpected(exc)))
                page = None
            if self.slow_in_a_row >= SLOW_IN_A_ROW:
                result.failed.append(
                    Failure(
                        start,
                        f"the site stopped answering in time ({SLOW_IN_A_ROW} pages in a row "
                        "timed out): the crawl stopped there, the pages stored are kept; "
                        "sync tries again",
                    )
                )
                break
            if prefix is None:
                # The starting page settles the prefix (a redirect of `/docs` to `/docs/`
                # moves it), then the sitemap, if any, lists the pages.
                prefix = prefix_of(page.url if page else url)
                listed = []
                if self.options.max_depth > 0:
                    try:
                        listed = [u for u in self._sitemap_pages(prefix) if u not in seen]
                    except Exception:  # noqa: BLE001 - an unreadable sitemap: links are followed
                        listed = []
                follow = not listed
                for link in listed:
                    seen.add(link)
                    queue.append((link, 1))
            if page is not None and follow and depth < self.options.max_depth:
                for link in page.links:
                    if link not in seen and _under(link, prefix) and not _queried(link):
                        seen.add(link)
                        queue.append((link, depth + 1))
            if not queue and not read_known:
                read_known = True
                for link in known:
                    if link not in seen:
                        seen.add(link)
                        queue.append((link, self.options.max_depth))
        if held and result.gone and not self.options.prune_vanished:
            # A start page gone, or every page the store held gone at once, is more likely a
            # site moved or down than pages deleted: removed only when asked.
            gone = set(result.gone)
            if start in gone or gone >= set(held):
                result.failed.append(
                    Failure(
                        start,
                        f"{'the starting page' if start in gone else 'every page stored'} "
                        f"answered 404 or 410: the {len(held)} pages stored are kept (a site "
                        "moved, or down?); sync --prune removes them",
                    )
                )
                result.gone = [g for g in result.gone if g not in held]
        # Every page the store held that this crawl did not read, the starting page too
        # (failing, or now disallowed), keeps what the store holds of it.
        done = {f.source for f in result.files} | set(result.gone)
        result.kept += [k for k in held if k not in done]
        return result

    # Pages

    def _page(self, url: str, prefix: str | None, known: Iterable[str]) -> "_Page | None":
        """Fetch one page and file it in the result: read, unchanged, gone, skipped or
        failed; return it when it was read (its links and final URL). `prefix` is None for
        the starting page, which may be redirected anywhere on its host."""
        result = self.result
        try:
            answer = self._follow(url, prefix)
        except _PageFailed as exc:
            result.failed.append(Failure(url, str(exc)))
            self.slow_in_a_row = self.slow_in_a_row + 1 if isinstance(exc, _TooSlow) else 0
            return None
        self.slow_in_a_row = 0
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
            answer = self._get(url, headers, limit, html_limit=self.options.max_page_bytes)
            if answer.status not in (301, 302, 303, 307, 308):
                return answer
            target = _location(url, answer)
            if prefix is None:
                # The starting page may move anywhere on its site, http to https too.
                if not _same_site(target, url):
                    raise _PageFailed(f"redirected off the site, to {target} (not followed)")
            elif not _same_host(target, url) or not _under(target, prefix):
                raise _PageFailed(f"redirected off the site, to {target} (not followed)")
            if not self._allowed(target):
                raise _PageFailed(f"redirected to {target}, which robots.txt disallows")
            url = target
        raise _PageFailed(f"more than {MAX_REDIRECTS} redirects")

    def _get(
        self,
        url: str,
        headers: dict[str, str],
        limit: int,
        html_limit: int | None = None,
        cut: bool = False,
        sink: Callable[[bytes], bool] | None = None,
    ) -> _Answer:
        """One GET, paced, with 429 and 503 waited out; the body unpacked up to `limit`
        bytes (`html_limit` for an HTML page; with `cut`, what came up to the limit is
        kept). With `sink`, the body's pieces are handed to it as they come (not kept) until
        it returns True."""
        import httpx

        for attempt in range(MAX_RETRIES + 1):
            wait = self.delay - (time.monotonic() - self._last)
            if wait > 0:
                pause(wait)
            began = time.monotonic()
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
                    if html_limit is not None and _content_type(response.headers) in HTML_TYPES:
                        limit, over = html_limit, f"a page over the {_size(html_limit)} limit"
                    else:
                        over = f"over the {_size(limit)} limit"
                    if sink is not None and response.status_code != 200:
                        sink = None  # an error page is not a sitemap
                    unpacker = _Unpacker(
                        response.headers.get("content-encoding", ""), limit, cut, over, sink
                    )
                    for block in response.iter_raw():
                        unpacker.feed(block)
                        if unpacker.full:
                            break
                    body = unpacker.close() if not unpacker.full else bytes(unpacker.body)
                    return _Answer(response.status_code, url, response.headers, body)
            except httpx.TimeoutException:
                self._last = time.monotonic()
                if time.monotonic() - began >= self.options.deadline * 0.99:
                    raise _TooSlow(
                        f"not whole within {self.options.deadline:g} s (the limit for one page)"
                    ) from None
                raise _TooSlow(f"no answer within {self.options.timeout:g} s") from None
            except (httpx.HTTPError, httpx.InvalidURL) as exc:
                self._last = time.monotonic()
                raise _PageFailed(f"cannot fetch: {exc}") from None
        raise AssertionError("unreachable")  # the last attempt returns or raises

    # Robots and sitemaps

    def _read_robots(self, start: str) -> str | None:
        """Read the site's robots.txt; return why nothing may be fetched, if so."""
        from protego import Protego

        parts = urlsplit(start)
        url = urlunsplit((parts.scheme, parts.netloc, "/robots.txt", "", ""))
        try:
            answer = self._get(url, {}, MAX_ROBOTS_BYTES, cut=True)
            for _ in range(MAX_REDIRECTS):  # as the robots.txt standard asks: up to five
                if answer.status not in (301, 302, 303, 307, 308):
                    break
                target = _location(answer.url, answer)
                if not _same_site(target, url):
                    return (
                        f"robots.txt is redirected off the site, to {target} (not followed): "
                        "nothing fetched"
                    )
                answer = self._get(target, {}, MAX_ROBOTS_BYTES, cut=True)
        except _PageFailed as exc:
            return f"robots.txt could not be read ({exc}): nothing fetched; try again later"
        if answer.status >= 500:
            return (
                f"robots.txt could not be read (HTTP {answer.status}): nothing fetched, as "
                "robots.txt asks of a server that fails it; try again later"
            )
        text = ""
        if answer.status == 200:
            body = answer.body
            if len(body) >= MAX_ROBOTS_BYTES:  # the rest is left: cut at the last whole line
                body = body[: body.rfind(b"\n") + 1]
            text = body.decode("utf-8", errors="replace")
        # Anything else (4xx, or a redirect too many): no robots.txt, everything allowed.
        try:
            self.robots = Protego.parse(text)
        except Exception as exc:  # noqa: BLE001 - whatever the parser meets refuses the crawl
            return f"robots.txt could not be read ({_unexpected(exc)}): nothing fetched"
        asked = self.robots.crawl_delay(ROBOTS_AGENT)
        if asked:
            self.delay = max(self.delay, min(float(asked), MAX_CRAWL_DELAY))
        return None

    def _allowed(self, url: str) -> bool:
        return self.robots is None or self.robots.can_fetch(url, ROBOTS_AGENT)

    def _sitemap_pages(self, prefix: str) -> list[str]:
        """The pages under `prefix` the site's sitemaps list, in their order: up to
        `max_pages` of them, read from at most MAX_SITEMAPS files and MAX_SITEMAP_BYTES."""
        parts = urlsplit(prefix)
        root = urlunsplit((parts.scheme, parts.netloc, "/", "", ""))
        listed = list(self.robots.sitemaps) if self.robots is not None else []
        maps = listed or [root + "sitemap.xml"]
        todo = deque(normalise(m) for m in maps if _same_host(normalise(m), prefix))
        read: set[str] = set()
        pages: list[str] = []
        found: set[str] = set()
        wanted = self.options.max_pages
        while todo and len(read) < MAX_SITEMAPS and len(pages) < wanted:
            url = todo.popleft()
            if url in read or not self._allowed(url):
                continue
            read.add(url)
            left = MAX_SITEMAP_BYTES - self.sitemap_bytes
            if left <= 0:
                break
            reader = _SitemapReader(prefix, found, pages, todo, wanted, left)
            try:
                answer = self._get(url, {}, left, cut=True, sink=reader.feed)
            except _PageFailed:
                continue
            finally:
                self.sitemap_bytes += reader.size
            if answer.status == 200:
                reader.close()
        return pages[:wanted]

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
    try:
        title, text = html_to_markdown(html)
    except RecursionError:
        title, text = "", ""
    if text.strip():
        return title, text
    # Markup nested deeper than the converters go (a few hundred <div>s: one recurses, the
    # others stop at 256 levels): the page's text, read without recursion, line by line.
    return _plain_text(html)


def _plain_text(html: str) -> tuple[str, str]:
    """A page's title and text without its markup, its scripts and styles."""
    import lxml.html

    document = lxml.html.document_fromstring(html, parser=lxml.html.HTMLParser(huge_tree=True))
    for element in list(document.iter("script", "style", "nav", "header", "footer")):
        element.drop_tree()
    title = (document.findtext(".//title") or "").strip()
    lines = (line.strip() for line in "".join(document.itertext()).splitlines())
    return title, "\n\n".join(line for line in lines if line)


# Helpers


def _size(limit: int) -> str:
    return f"{limit // 2**20} MB" if limit >= 2**20 else f"{limit // 1024} KB"


def _under(url: str, prefix: str) -> bool:
    return url.startswith(prefix) or url + "/" == prefix


def _same_host(a: str, b: str) -> bool:
    one, two = urlsplit(a), urlsplit(b)
    return (one.scheme, one.netloc) == (two.scheme, two.netloc)


def _environment_proxies() -> dict[str, str | None]:
    """The proxies the environment names (HTTP_PROXY, HTTPS_PROXY, ALL_PROXY, NO_PROXY), as
    httpx mounts them: a transport of its own replaces the ones httpx would make from them."""
    import urllib.request

    found = urllib.request.getproxies()
    mounts: dict[str, str | None] = {}
    for scheme in ("http", "https"):
        proxy = found.get(scheme) or found.get("all")
        if proxy:
            mounts[f"{scheme}://"] = proxy if "://" in proxy else f"http://{proxy}"
    for host in (found.get("no") or "").split(","):
        host = host.strip()
        if host == "*":
            return {}
        if not host:
            continue
        if "://" in host:
            mounts[host] = None
        elif ":" in host:  # an IPv6 address
            mounts[f"all://[{host.strip('[]')}]"] = None
        elif host.replace(".", "").isdigit() or host.lower() == "localhost":
            mounts[f"all://{host}"] = None
        else:  # a domain and its subdomains
            mounts[f"all://*{host}"] = None
    return mounts


def _same_site(target: str, url: str) -> bool:
    """Whether a redirect from `url` stays on its site: the same scheme, host and port, or
    http moving to https on the same host (to the default port, or the same one)."""
    if _same_host(target, url):
        return True
    one, two = urlsplit(url), urlsplit(target)
    return (
        one.scheme == "http"
        and two.scheme == "https"
        and one.hostname == two.hostname
        and (two.port is None or two.port == one.port)
    )


def _queried(url: str) -> bool:
    """Whether a URL carries a query: such links are not followed (see the module doc)."""
    return bool(urlsplit(url).query)


def _location(url: str, answer: "_Answer") -> str:
    """Where a redirect points, checked: an http(s) URL naming a host."""
    location = answer.headers.get("location")
    if not location:
        raise _PageFailed(f"HTTP {answer.status} without a Location")
    try:
        target = normalise(urljoin(url, location.strip()))
        parts = urlsplit(target)
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError:
        raise _PageFailed(f"redirected to {location!r}, which is not a URL") from None
    if parts.scheme not in ("http", "https"):
        raise _PageFailed(f"redirected to {target}, which is not http(s)")
    if not parts.hostname:
        raise _PageFailed(f"redirected to {location!r}, which names no host")
    return target


def _unexpected(exc: BaseException) -> str:
    """The reason a page failed in a way no check foresaw."""
    if isinstance(exc, RecursionError):
        return "nested too deeply to read"
    if isinstance(exc, MemoryError):
        return "too large to read in memory"
    return f"cannot read ({type(exc).__name__}: {exc})"


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
    if charset and _is_charset(charset):
        with contextlib.suppress(LookupError, UnicodeError):
            return body.decode(charset)
    from archivist.ingest.loaders import LoadError, decode_text

    try:
        return decode_text(body)
    except LoadError:
        return body.decode("utf-8", errors="replace")


def _is_charset(name: str) -> bool:
    """Whether a declared charset names a text encoding a page can be in (not punycode, not
    an unknown name); else the page's encoding is detected as a file's is."""
    try:
        info = codecs.lookup(name)
    except (LookupError, ValueError):
        return False
    return getattr(info, "_is_text_encoding", True) and info.name.replace("-", "_") not in (
        NOT_CHARSETS
    )


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


class _SitemapReader:
    """A sitemap (XML, maybe gzipped) parsed as it comes: the pages under `prefix` it lists
    added to `pages` (and `found`), the sitemaps it names to `todo`; `feed` says when
    `wanted` pages are found, or the sitemap is unreadable, so the rest is not read."""

    def __init__(
        self,
        prefix: str,
        found: set[str],
        pages: list[str],
        todo: deque,
        wanted: int,
        budget: int,
    ) -> None:
        from lxml import etree

        self.prefix, self.found, self.pages, self.todo = prefix, found, pages, todo
        self.wanted = wanted
        self.budget = budget
        """The bytes it may unpack and parse."""
        self.size = 0
        self.gunzip: _Unpacker | None = None
        self.first = True
        self.broken = False
        self.parser = etree.XMLPullParser(
            events=("end",), resolve_entities=False, no_network=True, load_dtd=False
        )

    def feed(self, data: bytes) -> bool:
        if self.broken or not data:
            return self.broken
        if self.first:
            self.first = False
            if data[:2] == b"\x1f\x8b":  # a sitemap.xml.gz served as it is
                self.gunzip = _Unpacker("gzip", self.budget, cut=True, sink=self._take)
        if self.gunzip is None:
            return self._take(data)
        try:
            self.gunzip.feed(data)
        except _PageFailed:
            self.broken = True
        return self.broken or self.gunzip.full

    def _take(self, data: bytes) -> bool:
        self.size += len(data)
        return self._parse(data) or self.size >= self.budget

    def _parse(self, data: bytes) -> bool:
        from lxml import etree

        try:
            self.parser.feed(data)
            events = list(self.parser.read_events())
        except etree.XMLSyntaxError:
            self.broken = True
            return True
        for _, element in events:
            if not isinstance(element.tag, str):
                continue
            name = etree.QName(element).localname
            if name == "loc":
                text = (element.text or "").strip()
                parent = element.getparent()
                kind = etree.QName(parent).localname if parent is not None else ""
                if text and kind == "sitemap":
                    if _same_host(normalise(text), self.prefix):
                        self.todo.append(normalise(text))
                elif text:
                    page = normalise(text)
                    if page not in self.found and _under(page, self.prefix) and not _queried(page):
                        self.found.add(page)
                        self.pages.append(page)
            elif name in ("url", "sitemap"):
                element.clear()  # what is read is let go: memory stays that of one entry
                while element.getprevious() is not None:
                    del element.getparent()[0]
        return len(self.pages) >= self.wanted

    def close(self) -> None:
        if not self.broken:
            with contextlib.suppress(Exception):
                self.parser.close()
