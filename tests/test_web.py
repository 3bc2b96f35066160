"""Web pages and sites, crawled from a server on 127.0.0.1 that logs every request."""

import http.server
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

import pytest
from samples import make_pdf

from archivist.ingest import web
from archivist.ingest.request import IngestRequest
from archivist.tools.errors import ArchivistError, install_command
from archivist.tools.progress import Fetched


def page(title: str, body: str, links: tuple[str, ...] = (), head: str = "") -> bytes:
    """An HTML page with navigation and a footer around its main content."""
    nav = " | ".join(f'<a href="{link}">{link}</a>' for link in links)
    return (
        f"<!doctype html><html><head><title>{title}</title>{head}</head><body>"
        f"<nav>{nav}</nav><main><h1>{title}</h1>"
        + "".join(f"<p>{para}</p>" for para in body.split("\n\n"))
        + "</main><footer>Copyright Example Widgets. All rights reserved.</footer>"
        "</body></html>"
    ).encode()


@dataclass
class Route:
    body: bytes
    status: int = 200
    kind: str = "text/html; charset=utf-8"
    etag: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    gap: float = 0.0
    """Set: the body is sent a byte at a time, this many seconds apart (a site dripping)."""


class Site:
    """A small web site served on 127.0.0.1: routes by path, and the log of requests."""

    def __init__(self) -> None:
        self.routes: dict[str, Route | list[Route]] = {}
        self.log: list[tuple[str, dict[str, str]]] = []
        site = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                site.log.append((self.path, {k.lower(): v for k, v in self.headers.items()}))
                route = site.routes.get(self.path)
                if isinstance(route, list):  # answered in turn, the last one from then on
                    route = route.pop(0) if len(route) > 1 else route[0]
                if route is None:
                    route = Route(b"not here", 404, "text/plain")
                if route.delay:
                    time.sleep(route.delay)
                if route.etag and self.headers.get("If-None-Match") == route.etag:
                    self.send_response(304)
                    self.send_header("ETag", route.etag)
                    self.end_headers()
                    return
                self.send_response(route.status)
                self.send_header("Content-Type", route.kind)
                self.send_header("Content-Length", str(len(route.body)))
                if route.etag:
                    self.send_header("ETag", route.etag)
                for name, value in route.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                if not route.gap:
                    self.wfile.write(route.body)
                    return
                for n in range(len(route.body)):
                    try:
                        self.wfile.write(route.body[n : n + 1])
                        self.wfile.flush()
                    except OSError:  # the crawler gave up on it
                        return
                    time.sleep(route.gap)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        # Polled every 0.05 s for the shutdown, as the fake Ollama is (the default 0.5 s
        # kept each test waiting up to half a second as it closed its site).
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def paths(self) -> list[str]:
        return [path for path, _ in self.log]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def site() -> Iterator[Site]:
    found = Site()
    yield found
    found.close()


INSTALL_TEXT = (
    "To install the widget, download the installer from the releases page and run it; "
    "the installer asks for the folder to install into and checks the disk space first.\n\n"
    "The widget needs forty megabytes of disk space and a network connection for updates."
)
REFUND_TEXT = (
    "Refunds are paid within thirty days of the return reaching our warehouse, to the card "
    "the order was paid with.\n\nA refund for a gift goes to the person who bought it."
)
SHIPPING_TEXT = (
    "Standard shipping takes three to five business days inside the country; express "
    "shipping arrives the next business day when ordered before noon.\n\n"
    "Parcels are tracked from the moment they leave the warehouse."
)


def docs_site(site: Site, sitemap: bool = False) -> None:
    """A docs folder of three pages linked from its index, and pages outside it."""
    site.routes.update(
        {
            "/robots.txt": Route(b"User-agent: *\nDisallow: /docs/private/\n", kind="text/plain"),
            "/docs/": Route(
                page(
                    "Widget documentation",
                    "Everything about the widget: installing it, refunds and shipping.",
                    (
                        "install.html",
                        "refunds.html",
                        "/docs/shipping.html",
                        "private/keys.html",
                        "/blog/news.html",
                        "https://elsewhere.example/page.html",
                        "style.css",
                    ),
                ),
                etag='"index-1"',
            ),
            "/docs/install.html": Route(
                page("Installing the widget", INSTALL_TEXT, ("/docs/",)), etag='"install-1"'
            ),
            "/docs/refunds.html": Route(page("Refunds", REFUND_TEXT), etag='"refunds-1"'),
            "/docs/shipping.html": Route(page("Shipping", SHIPPING_TEXT), etag='"ship-1"'),
            "/docs/private/keys.html": Route(page("Keys", "The secret keys of the site.")),
            "/blog/news.html": Route(page("News", "News from the blog, outside the docs.")),
        }
    )
    if sitemap:
        listed = ["/docs/install.html", "/docs/refunds.html", "/blog/news.html"]
        urls = "".join(f"<url><loc>{site.url}{path}</loc></url>" for path in listed)
        site.routes["/sitemap.xml"] = Route(
            b'<?xml version="1.0" encoding="UTF-8"?>'
            b'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
            + urls.encode()
            + b"</urlset>",
            kind="application/xml",
        )


def ingest(archivist, *urls: str, **options):
    request = IngestRequest.build(list(urls), "docs", **options)
    return archivist.ingest(request)


def embedded_texts(fake_models) -> list[str]:
    return [t for request in fake_models.embed_requests() for t in request]


def test_a_site_is_crawled_under_its_prefix_by_its_links(fake_models, archivist, site):
    docs_site(site)
    report = ingest(archivist, f"{site.url}/docs/")
    stored = sorted(s["source"] for s in report.stored)
    assert stored == [
        f"{site.url}/docs/",
        f"{site.url}/docs/install.html",
        f"{site.url}/docs/refunds.html",
        f"{site.url}/docs/shipping.html",
    ]
    assert report.failed == []
    # robots.txt read first; the disallowed page, the page outside the prefix, the other host
    # and the stylesheet never asked for.
    assert site.paths()[0] == "/robots.txt"
    assert "/docs/private/keys.html" not in site.paths()
    assert "/blog/news.html" not in site.paths()
    assert "/docs/style.css" not in site.paths()
    assert {
        "source": f"{site.url}/docs/private/keys.html",
        "reason": "disallowed by robots.txt",
    } in (report.skipped)
    # One honest User-Agent on every request.
    agents = {headers["user-agent"] for _, headers in site.log}
    assert len(agents) == 1 and agents.pop().startswith("archivist/")
    # The main content, without navigation or footer, with the page's title and URL.
    results = archivist.search("how long do refunds take", "docs", k=5)
    refund = next(r for r in results if r["source"].endswith("refunds.html"))
    assert "thirty days" in refund["text"]
    assert "Copyright" not in " ".join(r["text"] for r in results)
    assert refund["metadata"]["title"] == "Refunds"
    assert refund["metadata"]["url"] == f"{site.url}/docs/refunds.html"


def test_a_sitemap_lists_the_pages_and_robots_txt_names_it(fake_models, archivist, site):
    docs_site(site, sitemap=True)
    site.routes["/robots.txt"] = Route(
        f"User-agent: *\nDisallow: /docs/private/\nSitemap: {site.url}/maps/site.xml\n".encode(),
        kind="text/plain",
    )
    site.routes["/maps/site.xml"] = site.routes.pop("/sitemap.xml")
    report = ingest(archivist, f"{site.url}/docs/")
    assert sorted(s["source"] for s in report.stored) == [
        f"{site.url}/docs/",
        f"{site.url}/docs/install.html",
        f"{site.url}/docs/refunds.html",
    ]
    # The sitemap decides: the page only linked is not fetched, nor the listed one outside
    # the prefix.
    assert "/maps/site.xml" in site.paths()
    assert "/docs/shipping.html" not in site.paths()
    assert "/blog/news.html" not in site.paths()


def test_a_recrawl_asks_conditionally_prunes_gone_pages_and_re_embeds_changed_ones(
    fake_models, archivist, site
):
    docs_site(site)
    first = ingest(archivist, f"{site.url}/docs/")
    assert len(first.stored) == 4
    site.log.clear()
    fake_models.clear_requests()
    del site.routes["/docs/shipping.html"]  # now a 404
    changed = REFUND_TEXT.replace("thirty days", "fourteen days")
    site.routes["/docs/refunds.html"] = Route(page("Refunds", changed), etag='"refunds-2"')
    site.routes["/docs/"].body = page(  # the link to the shipping page is gone, the page not
        "Widget documentation",
        "Everything about the widget: installing it, refunds and shipping.",
        ("install.html", "refunds.html"),
    )
    site.routes["/docs/"].etag = '"index-2"'
    second = ingest(archivist, f"{site.url}/docs/")
    assert [s["source"] for s in second.stored] == [f"{site.url}/docs/refunds.html"]
    assert second.removed == [f"{site.url}/docs/shipping.html"]
    assert f"{site.url}/docs/install.html" in second.unchanged
    assert f"{site.url}/docs/" in second.unchanged  # a new ETag, the same main content
    # The unchanged page was asked for with its ETag and answered 304.
    install = [h for path, h in site.log if path == "/docs/install.html"]
    assert install and install[0].get("if-none-match") == '"install-1"'
    # Only the changed page was embedded again.
    texts = embedded_texts(fake_models)
    assert texts and all("fourteen days" in t or "Refunds" in t for t in texts)
    assert f"{site.url}/docs/shipping.html" not in archivist.store("docs").source_names()
    # Nor is it kept in the web cache.
    cached = [p.read_text() for p in (archivist.settings.web_cache).glob("*.md")]
    assert len(cached) == 3 and not any("Parcels are tracked" in text for text in cached)
    results = archivist.search("refunds", "docs", k=3)
    assert any("fourteen days" in r["text"] for r in results)


def test_max_pages_bounds_the_crawl(fake_models, archivist, site):
    docs_site(site)
    report = ingest(archivist, f"{site.url}/docs/", max_pages=2)
    assert len(report.stored) == 2
    pages = [p for p in site.paths() if p.startswith("/docs/")]
    assert len(pages) == 2


def test_a_429_is_waited_out_as_retry_after_asks(fake_models, archivist, site, monkeypatch):
    waits: list[float] = []
    monkeypatch.setattr(web, "pause", waits.append)
    docs_site(site)
    site.routes["/docs/install.html"] = [
        Route(b"slow down", 429, "text/plain", headers={"Retry-After": "7"}),
        Route(page("Installing the widget", INSTALL_TEXT)),
    ]
    report = ingest(archivist, f"{site.url}/docs/")
    assert f"{site.url}/docs/install.html" in {s["source"] for s in report.stored}
    assert waits == [7.0]
    assert site.paths().count("/docs/install.html") == 2


def test_a_server_asking_too_long_a_wait_fails_the_page_not_the_crawl(
    fake_models, archivist, site, monkeypatch
):
    monkeypatch.setattr(web, "pause", lambda s: None)
    docs_site(site)
    site.routes["/docs/install.html"] = Route(
        b"later", 503, "text/plain", headers={"Retry-After": "3600"}
    )
    report = ingest(archivist, f"{site.url}/docs/")
    assert report.failed == [
        {
            "source": f"{site.url}/docs/install.html",
            "reason": "HTTP 503: the server asks to wait 3600 s, over the 60 s limit",
        }
    ]
    assert len(report.stored) == 3


def test_a_pdf_is_read_by_its_loader_and_other_types_are_skipped_with_a_reason(
    fake_models, archivist, site
):
    site.routes.update(
        {
            "/docs/": Route(page("Manuals", "The manuals of the widget.", ("manual", "logo"))),
            "/docs/manual": Route(
                make_pdf(
                    [["The widget manual, page one: unpacking."], ["Page two: switching on."]]
                ),
                kind="application/pdf",
            ),
            "/docs/logo": Route(b"GIF89a", kind="image/gif"),
        }
    )
    report = ingest(archivist, f"{site.url}/docs/")
    assert f"{site.url}/docs/manual" in {s["source"] for s in report.stored}
    assert {
        "source": f"{site.url}/docs/logo",
        "reason": "content type 'image/gif' is not a document Archivist reads",
    } in report.skipped
    results = archivist.search("switching on", "docs", k=5)
    manual = [r for r in results if r["source"] == f"{site.url}/docs/manual"]
    assert {r["metadata"]["page"] for r in manual} <= {1, 2} and manual


def test_redirects_stay_under_the_prefix(fake_models, archivist, site):
    site.routes.update(
        {
            "/docs": Route(b"", 301, headers={"Location": "/docs/"}),
            "/docs/": Route(page("Index", INSTALL_TEXT, ("moved.html", "away.html"))),
            "/docs/moved.html": Route(b"", 302, headers={"Location": "/docs/new.html"}),
            "/docs/new.html": Route(page("New", REFUND_TEXT)),
            "/docs/away.html": Route(b"", 302, headers={"Location": "/blog/news.html"}),
            "/blog/news.html": Route(page("News", SHIPPING_TEXT)),
        }
    )
    report = ingest(archivist, f"{site.url}/docs")
    assert sorted(s["source"] for s in report.stored) == [
        f"{site.url}/docs/",
        f"{site.url}/docs/new.html",
    ]
    assert "/blog/news.html" not in site.paths()
    assert report.failed == [
        {
            "source": f"{site.url}/docs/away.html",
            "reason": f"redirected off the site, to {site.url}/blog/news.html (not followed)",
        }
    ]


def test_a_robots_txt_that_disallows_everything_fetches_nothing(fake_models, archivist, site):
    docs_site(site)
    site.routes["/robots.txt"] = Route(b"User-agent: archivist\nDisallow: /\n", kind="text/plain")
    report = ingest(archivist, f"{site.url}/docs/")
    assert report.stored == []
    assert site.paths() == ["/robots.txt"]
    assert report.skipped == [{"source": f"{site.url}/docs/", "reason": "disallowed by robots.txt"}]


def test_progress_reports_each_page_fetched(fake_models, archivist, site):
    docs_site(site)
    events = []
    request = IngestRequest.build([f"{site.url}/docs/"], "docs")
    archivist.ingest(request, on_progress=events.append)
    fetched = [e for e in events if isinstance(e, Fetched)]
    assert [(e.url, e.status) for e in fetched][0] == (f"{site.url}/docs/", 200)
    assert len(fetched) == 4


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("ftp://example.com/docs/", "only http:// and https:// URLs are read"),
        ("file:///etc/passwd", "only http:// and https:// URLs are read"),
    ],
)
def test_only_http_urls_are_taken(url, expected):
    with pytest.raises(ArchivistError, match=expected):
        IngestRequest.build([url], "docs")


def test_without_the_web_extra_the_message_names_the_install(monkeypatch):
    monkeypatch.setattr("archivist.ingest.request.available", lambda: False)
    with pytest.raises(ArchivistError) as caught:
        IngestRequest.build(["https://example.com/docs/"], "docs")
    assert caught.value.fix == f"Install it: {install_command('web')}"


def test_source_names_are_normalised_urls():
    assert web.normalise("HTTPS://Example.COM:443/docs/a.html#part") == (
        "https://example.com/docs/a.html"
    )
    assert web.normalise("http://example.com") == "http://example.com/"
    assert web.prefix_of("https://example.com/docs/intro.html") == "https://example.com/docs/"
    assert replace(web.WebOptions(), max_pages=3).max_pages == 3


def test_the_command_line_takes_a_url_and_its_bounds(ollama, home, site):
    import json

    from conftest import run_cli

    docs_site(site)
    done = run_cli(
        "ingest",
        f"{site.url}/docs/",
        "--store",
        "docs",
        "--max-pages",
        "2",
        "--json",
        ollama_url=ollama.url,
        home=home,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert [s["source"] for s in report["stored"]][0] == f"{site.url}/docs/"
    assert len(report["stored"]) == 2
    # The pages are cached in the home, for the next crawl's conditional requests.
    assert list((home / "web").glob("*.md"))
    refused = run_cli(
        "ingest", "ftp://example.com/x/", "--store", "docs", ollama_url=ollama.url, home=home
    )
    assert refused.returncode == 1
    assert "only http:// and https:// URLs are read" in refused.stderr
    assert "Traceback" not in refused.stderr


def test_a_page_reached_twice_by_redirects_is_stored_once_and_depth_zero_reads_one_page(
    fake_models, archivist, site
):
    site.routes.update(
        {
            "/docs/": Route(page("Index", INSTALL_TEXT, ("old.html", "new.html", "other.html"))),
            "/docs/old.html": Route(b"", 301, headers={"Location": "/docs/new.html"}),
            "/docs/new.html": Route(page("New", REFUND_TEXT)),
            "/docs/other.html": Route(page("Other", SHIPPING_TEXT)),
        }
    )
    report = ingest(archivist, f"{site.url}/docs/")
    sources = [s["source"] for s in report.stored]
    assert sorted(sources) == [
        f"{site.url}/docs/",
        f"{site.url}/docs/new.html",
        f"{site.url}/docs/other.html",
    ]
    site.log.clear()
    one = ingest(archivist, f"{site.url}/docs/", max_depth=0)
    assert f"{site.url}/docs/" in one.unchanged
    # The pages the store holds are asked for again (to notice one gone), not their links.
    assert "/docs/old.html" not in site.paths()


def test_a_site_is_recorded_as_a_root_beside_a_folder(fake_models, archivist, site, tmp_path):
    from archivist.ingest.roots import RootSet

    docs_site(site)
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "warranty.md").write_text("# Warranty\n\nTwo years on every widget.\n")
    report = ingest(archivist, f"{site.url}/docs/", str(folder), max_pages=10)
    assert report.failed == []
    store = archivist.store("docs")
    roots = RootSet.of(store.info())
    site_root = next(r for r in roots.roots if r.kind == "url")
    assert site_root.location == f"{site.url}/docs/"
    assert IngestRequest.from_recorded(site_root, "docs").web.max_pages == 10
    # Its pages are recorded by their paths under the prefix; their names stay their URLs
    # while the folder's files get the folder's label in a store of two roots.
    assert set(site_root.files) == {"", "install.html", "refunds.html", "shipping.html"}
    names = set(store.source_names())
    assert f"{site.url}/docs/install.html" in names and "notes/warranty.md" in names
    # A page gone is removed from the store and from its root's record.
    del site.routes["/docs/shipping.html"]
    again = ingest(archivist, f"{site.url}/docs/", max_pages=10)
    assert again.removed == [f"{site.url}/docs/shipping.html"]
    site_root = next(r for r in RootSet.of(store.info()).roots if r.kind == "url")
    assert "shipping.html" not in site_root.files
    assert "notes/warranty.md" in store.source_names()


def test_a_slow_page_and_a_page_too_large_fail_alone(site, tmp_path):
    docs_site(site)
    site.routes["/docs/install.html"] = Route(page("Install", INSTALL_TEXT), delay=1.5)
    site.routes["/docs/refunds.html"] = Route(page("Refunds", REFUND_TEXT * 60))
    options = web.WebOptions(timeout=0.5, max_page_bytes=4096)
    found = web.crawl([f"{site.url}/docs/"], options, cache=tmp_path / "cache")
    failed = {f.source: f.reason for f in found.failed}
    assert failed == {
        f"{site.url}/docs/install.html": "no answer within 0.5 s",
        f"{site.url}/docs/refunds.html": "a page over the 4 KB limit",
    }
    assert sorted(f.source for f in found.files) == [
        f"{site.url}/docs/",
        f"{site.url}/docs/shipping.html",
    ]


def test_robots_txt_is_followed_through_a_redirect(site, tmp_path):
    docs_site(site)
    site.routes["/robots.txt"] = Route(b"", 301, headers={"Location": "/real-robots.txt"})
    site.routes["/real-robots.txt"] = Route(
        b"User-agent: *\nDisallow: /docs/refunds", kind="text/plain"
    )
    found = web.crawl([f"{site.url}/docs/"], web.WebOptions(), cache=tmp_path / "cache")
    assert "/docs/refunds.html" not in site.paths()
    assert f"{site.url}/docs/install.html" in {f.source for f in found.files}


def test_sync_crawls_a_recorded_site_again_within_its_bounds(ollama, home, site):
    import json

    from conftest import run_cli

    docs_site(site)
    first = run_cli(
        "ingest", f"{site.url}/docs/", "--store", "docs", "--max-pages", "3",
        ollama_url=ollama.url, home=home,
    )  # fmt: skip
    assert first.returncode == 0, first.stderr
    site.log.clear()
    changed = REFUND_TEXT.replace("thirty days", "fourteen days")
    site.routes["/docs/refunds.html"] = Route(page("Refunds", changed), etag='"refunds-2"')
    del site.routes["/docs/install.html"]
    done = run_cli("sync", "--store", "docs", "--json", ollama_url=ollama.url, home=home)
    assert done.returncode == 0, done.stderr
    [report] = json.loads(done.stdout)
    assert report["root"] == f"{site.url}/docs/"
    assert [s["source"] for s in report["stored"]] == [f"{site.url}/docs/refunds.html"]
    assert report["removed"] == [f"{site.url}/docs/install.html"]
    # The recorded bound holds: 3 pages asked for, as in the first crawl.
    assert len([p for p in site.paths() if p.startswith("/docs/")]) == 3


def test_the_progress_shows_ocr_pages_off_a_terminal(capsys):
    from archivist.terminal.progress import IngestProgress
    from archivist.tools.progress import Recognised

    progress = IngestProgress(enabled=True, live=False)
    with progress:
        for page in range(1, 13):
            progress.update(Recognised("scan.pdf", page, 12))
        progress.update(Recognised("short.pdf", 1, 2))  # a short scan: no lines
        progress.update(Fetched("https://example.com/docs/", 200))
    assert capsys.readouterr().err.splitlines() == [
        "  OCR scan.pdf: page 1 of 12",
        "  OCR scan.pdf: page 10 of 12",
        "  OCR scan.pdf: page 12 of 12",
    ]
