"""URLs as ingest inputs: what is one, its normal form (a page's source name), the folder a
crawl keeps to, and the bounds of a crawl. The crawler itself (`archivist.ingest.web`) is
imported only where a site is crawled; commands that only check or name a store's roots
(`sources`, an unchanged `sync`) need just this.
"""

import importlib.util
from dataclasses import dataclass
from urllib.parse import urldefrag, urlsplit, urlunsplit

from archivist.tools.errors import ArchivistError

MAX_PAGES = 200
MAX_DEPTH = 10
MAX_PAGE_BYTES = 10 * 1024 * 1024
"""The most an HTML page may weigh; another document may weigh as much as a file may."""
TIMEOUT = 20.0
"""Seconds one network operation (connecting, one read) may take."""
DEADLINE = 120.0
"""Seconds one request (a page, robots.txt, a sitemap) may take from its first byte to its
answer's last, however its bytes come."""


def is_url(text: str) -> bool:
    """Whether an ingest path is a URL (`scheme://…`) rather than a file or folder."""
    scheme, sep, _ = str(text).partition("://")
    return bool(sep) and scheme.isascii() and scheme.replace("+", "").isalpha()


def check_url(text: str) -> str:
    """The URL, normalised, or an error naming what can be ingested."""
    parts = urlsplit(text.strip())
    if parts.scheme.lower() not in ("http", "https"):
        raise ArchivistError(
            f"Cannot ingest {text}: only http:// and https:// URLs are read.",
            "Give a web page's address, or the path of a file or folder.",
        )
    if not parts.hostname:
        raise ArchivistError(f"{text} names no host.", "Write it as https://example.com/docs/.")
    return normalise(text)


def available() -> bool:
    """Whether the web extra (trafilatura, which extracts a page's main content) is installed."""
    return importlib.util.find_spec("trafilatura") is not None


def normalise(url: str) -> str:
    """A URL as a source name: without its fragment, scheme and host in lower case, without
    the default port, and `/` for an empty path."""
    url, _ = urldefrag(url.strip())
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower()
    if ":" in host:  # an IPv6 address keeps its brackets
        host = f"[{host}]"
    if parts.port and (scheme, parts.port) not in (("http", 80), ("https", 443)):
        host = f"{host}:{parts.port}"
    if parts.username:
        host = f"{parts.username}@{host}"
    return urlunsplit((scheme, host, without_dots(parts.path) or "/", parts.query, ""))


def without_dots(path: str) -> str:
    """A URL's path with its `.` and `..` segments resolved (RFC 3986, 5.2.4), `%2e` read as
    the dot it encodes: `/docs/../admin` is `/admin`, never a page under `/docs/`."""
    if "." not in path and "%2" not in path:
        return path
    segments = path.split("/")
    out: list[str] = []
    for n, segment in enumerate(segments):
        plain = segment.replace("%2e", ".").replace("%2E", ".")
        last = n == len(segments) - 1
        if plain == ".":
            if last:
                out.append("")
        elif plain == "..":
            if len(out) > 1:
                out.pop()
            if last:
                out.append("")
        else:
            out.append(segment)
    return "/".join(out) if out != [""] else "/"


def prefix_of(url: str) -> str:
    """The folder a crawl stays in: the URL up to the last `/` of its path."""
    parts = urlsplit(url)
    folder = parts.path[: parts.path.rfind("/") + 1] or "/"
    return urlunsplit((parts.scheme, parts.netloc, folder, "", ""))


@dataclass(frozen=True)
class WebOptions:
    """How a site is crawled."""

    max_pages: int = MAX_PAGES
    """Pages asked for at most (each request of a page counts, whatever its answer)."""
    max_depth: int = MAX_DEPTH
    """Links followed at most from the starting page."""
    cache: str | None = None
    """The folder of the HTTP cache (None: a temporary one for the run, so nothing is
    asked for conditionally)."""
    delay: float = 0.0
    """Seconds at least between two requests (robots.txt's `Crawl-delay` may ask for more)."""
    timeout: float = TIMEOUT
    deadline: float = DEADLINE
    max_page_bytes: int = MAX_PAGE_BYTES
    prune_vanished: bool = False
    """Remove the pages stored even when the starting page, or every page stored, is gone
    (404, 410) at once (else they are kept and the crawl fails, saying so)."""
