"""Hostile web sites: each crawled from a server on 127.0.0.1 (one case on ::1), each page
failing alone with its reason, the limits holding by construction."""

import gzip
import http.server
import socket
import threading
import time
import tracemalloc
import zlib

import pytest
from test_web import INSTALL_TEXT, REFUND_TEXT, Route, Site, docs_site, ingest, page

from archivist.ingest import web
from archivist.ingest.urls import normalise


@pytest.fixture
def site():
    found = Site()
    yield found
    found.close()


def crawl(site: Site, tmp_path, path: str = "/docs/", **options) -> web.Crawl:
    return web.crawl([f"{site.url}{path}"], web.WebOptions(**options), cache=tmp_path / "cache")


def sources(found: web.Crawl) -> list[str]:
    return sorted(f.source for f in found.files)


def reasons(found: web.Crawl) -> dict[str, str]:
    return {f.source: f.reason for f in found.failed}


def index(*links: str) -> bytes:
    return page("Widget documentation", "Everything about the widget, page by page.", links)


def test_bad_redirects_charsets_and_deep_nesting_fail_or_read_alone(site, tmp_path):
    nested = "<div>" * 400 + "The deeply nested warranty covers two years." + "</div>" * 400
    site.routes.update(
        {
            "/docs/": Route(index("a.html", "b.html", "c.html", "d.html", "e.html", "f.html")),
            "/docs/a.html": Route(b"", 302, headers={"Location": "http:x"}),
            "/docs/b.html": Route(b"", 302, headers={"Location": "http://:99999/"}),
            "/docs/c.html": Route(page("Puny", INSTALL_TEXT), kind="text/html; charset=punycode"),
            "/docs/d.html": Route(page("Undef", REFUND_TEXT), kind="text/html; charset=undefined"),
            "/docs/e.html": Route(f"<html><body>{nested}</body></html>".encode()),
            "/docs/f.html": Route(b"", 301, headers={"Location": "http://[::1"}),
        }
    )
    found = crawl(site, tmp_path)
    failed = reasons(found)
    assert failed.keys() == {f"{site.url}/docs/{n}.html" for n in "abf"}
    assert failed[f"{site.url}/docs/b.html"] == "redirected to 'http://:99999/', which is not a URL"
    assert "Invalid URL in location header" in failed[f"{site.url}/docs/f.html"]
    # httpx refuses to read these Locations itself: the page fails with its words.
    assert failed[f"{site.url}/docs/a.html"] == (
        "cannot fetch: For absolute URLs, path must be empty or begin with '/'"
    )
    stored = {f.source: f.path.read_text() for f in found.files}
    assert "forty megabytes" in stored[f"{site.url}/docs/c.html"]  # detected, not punycode
    assert "thirty days" in stored[f"{site.url}/docs/d.html"]
    assert "warranty covers two years" in stored[f"{site.url}/docs/e.html"]


def test_a_hostile_page_never_stops_a_sync_of_the_other_stores(ollama, home, site, tmp_path):
    from conftest import run_cli as cli
    from conftest import write_files

    def run_cli(ollama, home, *args, code=0):
        done = cli(*args, ollama_url=ollama.url, home=home)
        assert done.returncode == code, done.stdout + done.stderr
        return done

    site.routes.update(
        {
            "/docs/": Route(index("bad.html")),
            "/docs/bad.html": Route(page("Bad", INSTALL_TEXT), kind="text/html; charset=punycode"),
        }
    )
    folder = write_files(tmp_path / "notes", {"a.md": "# Notes\n\nThe first note on widgets."})
    run_cli(ollama, home, "ingest", f"{site.url}/docs/", "--store", "web")
    run_cli(ollama, home, "ingest", str(folder), "--store", "notes")
    (folder / "b.md").write_text("# More\n\nA second note, about gadgets.")
    site.routes["/docs/"] = Route(b"", 302, headers={"Location": "http://:1/"})
    synced = run_cli(ollama, home, "sync", code=1)
    assert "redirected to 'http://:1/', which names no host" in synced.stdout
    assert "notes notes: 1 file stored" in synced.stdout
    listed = run_cli(ollama, home, "sources", "--store", "web", "--json")
    assert f"{site.url}/docs/" in listed.stdout  # kept: the starting page failed


def test_a_hostile_site_among_the_roots_never_stops_sync_watch(ollama, home, site, tmp_path):
    """`sync --watch` as a process: the site's hostile pages fail in the first sync, and the
    watch still begins and stores what is written into the folder of another store."""
    import os
    import signal
    import subprocess
    import sys

    from conftest import run_cli, write_files
    from test_sync import texts, until

    nested = "<div>" * 400 + "The deeply nested warranty covers two years." + "</div>" * 400
    site.routes.update(
        {
            "/docs/": Route(index("a.html", "d.html", "e.html")),
            "/docs/a.html": Route(page("A", INSTALL_TEXT)),
            "/docs/d.html": Route(page("D", REFUND_TEXT)),
            "/docs/e.html": Route(page("E", "The warranty covers two years.")),
        }
    )
    folder = write_files(tmp_path / "notes", {"a.md": "# Notes\n\nThe first note on widgets."})
    for args in (("ingest", f"{site.url}/docs/", "--store", "web"),
                 ("ingest", str(folder), "--store", "notes")):  # fmt: skip
        done = run_cli(*args, ollama_url=ollama.url, home=home)
        assert done.returncode == 0, done.stdout + done.stderr
    # The site turns hostile: a redirect that is no URL, a charset that is none, deep nesting.
    site.routes.update(
        {
            "/docs/a.html": Route(b"", 302, headers={"Location": "http:x"}),
            "/docs/d.html": Route(page("D", REFUND_TEXT), kind="text/html; charset=undefined"),
            "/docs/e.html": Route(f"<html><body>{nested}</body></html>".encode()),
        }
    )
    env = {**os.environ, "OLLAMA_HOST": ollama.url, "ARCHIVIST_HOME": str(home)}
    process = subprocess.Popen(
        [sys.executable, "-m", "archivist", "sync", "--watch"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        said: list[str] = []
        reader = threading.Thread(target=lambda: said.extend(process.stdout), daemon=True)
        reader.start()
        began = time.monotonic()
        line = ""
        while "Watching" not in line and time.monotonic() - began < 60:
            line = process.stderr.readline()
            if not line and process.poll() is not None:
                break  # ended before watching
        assert "Watching 1 root of notes, web" in line
        (folder / "b.md").write_text("# More\n\nA second note, about gadgets.")
        assert until(lambda: "notes: new b.md (1 chunk)\n" in said, timeout=60)
        process.send_signal(signal.SIGINT)
        process.wait(timeout=30)
        reader.join(10)
        stderr = process.stderr.read()
    finally:
        process.kill()
    assert process.returncode == 1 and "Traceback" not in stderr, stderr
    assert f"  failed: {site.url}/docs/a.html: cannot fetch: " in "".join(said)
    stored = texts(home, "web")
    assert f"{site.url}/docs/a.html" in stored  # the page that failed kept
    assert "thirty days" in stored[f"{site.url}/docs/d.html"]
    assert "deeply nested warranty" in stored[f"{site.url}/docs/e.html"]


def bomb(size: int, layers: int = 2) -> bytes:
    """`size` zero bytes gzipped `layers` times (stacked Content-Encoding)."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = bytes(1 << 20)
    body = b"".join(packer.compress(block) for _ in range(size >> 20)) + packer.flush()
    for _ in range(layers - 1):
        body = gzip.compress(body, 9)
    return body


def test_compression_bombs_are_cut_at_the_limit_in_bounded_memory(site, tmp_path):
    # 256 MB of zeros in 2 KB, stacked `gzip, gzip`: an HTML page, robots.txt, a sitemap.
    packed = bomb(256 << 20)
    assert len(packed) < 4096
    stacked = {"Content-Encoding": "gzip, gzip"}
    site.routes.update(
        {
            "/docs/": Route(index("bomb.html", "zstd.html", "install.html")),
            "/docs/bomb.html": Route(packed, headers=stacked),
            "/docs/zstd.html": Route(bytes(9), headers={"Content-Encoding": "zstd"}),
            "/docs/install.html": Route(
                gzip.compress(page("Install", INSTALL_TEXT)), headers={"Content-Encoding": "gzip"}
            ),
            "/sitemap.xml": Route(packed, kind="application/xml", headers=stacked),
        }
    )
    tracemalloc.start()
    try:
        found = crawl(site, tmp_path, max_page_bytes=1 << 20)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert reasons(found) == {
        f"{site.url}/docs/bomb.html": "a page over the 1 MB limit",
        f"{site.url}/docs/zstd.html": "content encoding 'zstd', which Archivist does not read "
        "(it asks for gzip, deflate)",
    }
    assert sources(found) == [f"{site.url}/docs/", f"{site.url}/docs/install.html"]
    assert all(h.get("accept-encoding") == "gzip, deflate" for _, h in site.log)
    assert peak < 40 << 20  # the sitemap's 50 MB budget is never held at once

    site.routes["/robots.txt"] = Route(packed, kind="text/plain", headers=stacked)
    tracemalloc.start()
    try:
        found = crawl(site, tmp_path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 20 << 20  # robots.txt: its first 500 KiB read
    assert sources(found) == [f"{site.url}/docs/", f"{site.url}/docs/install.html"]


def test_a_dripping_page_and_robots_txt_end_at_the_deadline(site, tmp_path):
    docs_site(site)
    site.routes["/docs/install.html"] = Route(page("Install", INSTALL_TEXT), gap=0.1)
    found = crawl(site, tmp_path, deadline=0.8, timeout=0.5)
    assert reasons(found) == {
        f"{site.url}/docs/install.html": "not whole within 0.8 s (the limit for one page)"
    }
    assert f"{site.url}/docs/refunds.html" in sources(found)

    site.routes["/robots.txt"] = Route(b"User-agent: *\nDisallow: /docs/private/\n" * 9, gap=0.1)
    found = crawl(site, tmp_path, deadline=0.8, timeout=0.5)
    assert reasons(found) == {
        f"{site.url}/docs/": "robots.txt could not be read (not whole within 0.8 s (the limit "
        "for one page)): nothing fetched; try again later"
    }

    # A sitemap dripping: read no further at the deadline, the pages found by their links.
    docs_site(site)
    listed = f"<urlset><url><loc>{site.url}/docs/shipping.html</loc></url></urlset>".encode()
    site.routes["/sitemap.xml"] = Route(listed, kind="application/xml", gap=0.1)
    found = crawl(site, tmp_path, deadline=0.8, timeout=0.5)
    assert reasons(found) == {}
    assert sources(found) == [
        f"{site.url}/docs/{p}" for p in ("", "install.html", "refunds.html", "shipping.html")
    ]


def test_a_site_dripping_on_every_page_stops_after_three_in_a_row(site, tmp_path):
    names = [f"p{n}.html" for n in range(6)]
    site.routes["/docs/"] = Route(index(*names))
    for name in names:
        site.routes[f"/docs/{name}"] = Route(page(name, INSTALL_TEXT), gap=0.1)
    found = crawl(site, tmp_path, deadline=0.8, timeout=0.5)
    slow = "not whole within 0.8 s (the limit for one page)"
    assert reasons(found) == {
        **{f"{site.url}/docs/{name}": slow for name in names[:3]},
        f"{site.url}/docs/": "the site stopped answering in time (3 pages in a row timed out): "
        "the crawl stopped there, the pages stored are kept; sync tries again",
    }
    assert sources(found) == [f"{site.url}/docs/"]
    assert not any(p.endswith(tuple(names[3:])) for p in site.paths())  # never asked for


def test_a_large_page_declaring_punycode_is_read_in_linear_time(site, tmp_path):
    body = page("Big", (INSTALL_TEXT + "\n\n") * 4000)  # 1 MB: punycode took over a minute
    site.routes["/docs/"] = Route(body, kind="text/html; charset=punycode")
    found = crawl(site, tmp_path, max_depth=0)
    # Read as detected: punycode's decoder, quadratic (291 s of CPU for 2 MB), is never used.
    [read] = found.files
    assert read.path.read_text().count("forty megabytes") == 4000


def test_a_starting_page_failing_on_a_recrawl_is_kept(fake_models, archivist, site):
    docs_site(site)
    start = f"{site.url}/docs/"
    assert len(ingest(archivist, start).stored) == 4
    site.routes["/docs/"] = Route(b"down", 500, "text/plain")
    again = ingest(archivist, start, prune=True)
    assert again.removed == [] and start in archivist.store("docs").source_names()
    assert [f["source"] for f in again.failed] == [start]
    site.routes["/robots.txt"] = Route(b"User-agent: *\nDisallow: /docs/$\n", kind="text/plain")
    again = ingest(archivist, start, prune=True)
    assert again.removed == [] and start in archivist.store("docs").source_names()


def test_robots_txt_is_read_by_rfc_9309(site, tmp_path):
    docs_site(site)
    site.routes["/robots.txt"] = Route(
        b"User-agent: *\nAllow: /docs/\nDisallow: /docs/refunds\nDisallow: /docs/private/\n"
        b"Disallow: /*.pdf$\n"
        b"Disallow: /docs/*ship\n" + b"# padding\n" * 60_000 + b"Disallow: /docs/install\n",
        kind="text/plain",
    )
    found = crawl(site, tmp_path)
    # The longer Disallow beats the shorter Allow; `*` matches; the part past 500 KiB is not
    # read (the install page's rule), and the crawl is not refused for its size.
    assert sources(found) == [f"{site.url}/docs/", f"{site.url}/docs/install.html"]
    assert "/docs/refunds.html" not in site.paths() and "/docs/shipping.html" not in site.paths()


def test_a_dollar_in_robots_txt_ends_the_path_it_matches(site, tmp_path):
    docs_site(site)
    site.routes["/docs/"] = Route(index("install.html", "old.htm"))
    site.routes["/docs/old.htm"] = Route(page("Old", REFUND_TEXT))
    site.routes["/robots.txt"] = Route(
        b"User-agent: *\nDisallow: /docs/*.htm$\n", kind="text/plain"
    )
    found = crawl(site, tmp_path)
    # `.htm` at the end of the path is disallowed; `.html` is not (the rule is not a prefix).
    assert sources(found) == [f"{site.url}/docs/", f"{site.url}/docs/install.html"]
    assert "/docs/old.htm" not in site.paths()
    assert [(f.source, f.reason) for f in found.skipped] == [
        (f"{site.url}/docs/old.htm", "disallowed by robots.txt")
    ]


def test_robots_txt_redirected_to_another_port_is_not_fetched(site, tmp_path):
    other = Site()
    try:
        docs_site(site)
        other.routes["/robots.txt"] = Route(b"User-agent: *\nAllow: /\n", kind="text/plain")
        moved = {"Location": f"{other.url}/robots.txt"}
        site.routes["/robots.txt"] = Route(b"", 301, headers=moved)
        found = crawl(site, tmp_path)
    finally:
        other.close()
    assert other.log == []
    assert reasons(found) == {
        f"{site.url}/docs/": f"robots.txt is redirected off the site, to {other.url}/robots.txt "
        "(not followed): nothing fetched"
    }
    assert found.files == []


def test_dot_segments_and_queries_never_leave_the_prefix_or_grow_the_crawl(site, tmp_path):
    docs_site(site)
    site.routes["/docs/"] = Route(
        index(
            "../admin/keys.html",
            "/docs/%2e%2e/admin/keys.html",
            "install.html?page=2&r=7",
            "/docs/a/../refunds.html",
        )
    )
    site.routes["/admin/keys.html"] = Route(page("Keys", "The secret keys of the admin."))
    found = crawl(site, tmp_path)
    assert not any(p.startswith("/admin") for p in site.paths())
    assert not any("?" in p for p in site.paths())
    assert sources(found) == [f"{site.url}/docs/", f"{site.url}/docs/refunds.html"]
    # Sitemap entries the same way.
    listed = ["/docs/../admin/keys.html", "/docs/install.html?r=1", "/docs/shipping.html"]
    urls = "".join(f"<url><loc>{site.url}{p}</loc></url>" for p in listed)
    site.routes["/sitemap.xml"] = Route(f"<urlset>{urls}</urlset>".encode(), kind="text/xml")
    found = crawl(site, tmp_path)
    assert not any(p.startswith("/admin") or "?" in p for p in site.paths())
    assert sources(found) == [f"{site.url}/docs/", f"{site.url}/docs/shipping.html"]


def test_a_sitemap_index_of_huge_sitemaps_is_read_only_as_far_as_max_pages(site, tmp_path):
    docs_site(site)
    entries = "".join(f"<url><loc>{site.url}/docs/p{n}.html</loc></url>" for n in range(60_000))
    big = f'<?xml version="1.0"?><urlset>{entries}</urlset>'.encode()  # 3 MB each
    maps = "".join(f"<sitemap><loc>{site.url}/map{n}.xml</loc></sitemap>" for n in range(19))
    site.routes["/sitemap.xml"] = Route(f"<sitemapindex>{maps}</sitemapindex>".encode())
    for n in range(19):
        site.routes[f"/map{n}.xml"] = Route(big, kind="application/xml")
    found = crawl(site, tmp_path, max_pages=20)
    assert len(found.files) == 1 and len(found.skipped) == 19  # the sitemap's pages: 404s
    assert [p for p in site.paths() if p.startswith("/map")] == ["/map0.xml"]
    assert len([p for p in site.paths() if p.startswith("/docs/p")]) == 19  # with the start


def test_an_ipv6_loopback_site_is_crawled(tmp_path):
    class V6(http.server.ThreadingHTTPServer):
        address_family = socket.AF_INET6

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = page("Install", INSTALL_TEXT) if self.path == "/docs/" else b""
            self.send_response(200 if body else 404)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    try:
        server = V6(("::1", 0), Handler)
    except OSError:
        pytest.skip("no IPv6 loopback here")
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    try:
        url = f"http://[::1]:{server.server_address[1]}/docs/"
        assert normalise(url) == url
        found = web.crawl([url], web.WebOptions(), cache=tmp_path / "cache")
    finally:
        server.shutdown()
        server.server_close()
    assert sources(found) == [url]


def self_signed(folder) -> tuple[str, str]:
    """A certificate for 127.0.0.1 and its key, written to `folder`."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    import ipaddress

    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = folder / "cert.pem", folder / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return str(cert_file), str(key_file)


def test_a_starting_page_moved_from_http_to_https_on_its_port_is_followed(
    site, tmp_path, monkeypatch
):
    """One port speaking both: plain HTTP redirects to https://, TLS serves the site."""
    import ssl

    cert, key = self_signed(tmp_path)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server, plain_url = site.server, site.url
    accept = server.get_request

    def get_request():
        sock, address = accept()
        if sock.recv(1, socket.MSG_PEEK) == b"\x16":  # a TLS handshake
            sock = context.wrap_socket(sock, server_side=True)
        return sock, address

    server.get_request = get_request
    docs_site(site)
    secure = plain_url.replace("http://", "https://")
    site.routes["/docs/"] = [
        Route(b"", 301, headers={"Location": f"{secure}/docs/"}),
        Route(index("install.html")),
    ]
    monkeypatch.setenv("SSL_CERT_FILE", cert)
    found = web.crawl([f"{plain_url}/docs/"], web.WebOptions(), cache=tmp_path / "cache")
    assert reasons(found) == {}
    assert sources(found) == [f"{secure}/docs/", f"{secure}/docs/install.html"]


def test_a_site_whose_pages_all_vanished_is_kept_until_asked_to_prune(fake_models, archivist, site):
    docs_site(site)
    start = f"{site.url}/docs/"
    assert len(ingest(archivist, start).stored) == 4
    site.routes.clear()  # every page a 404: a site moved, or half down
    again = ingest(archivist, start, prune=False)
    assert again.removed == []
    assert [f["reason"] for f in again.failed] == [
        "the starting page answered 404 or 410: the 4 pages stored are kept (a site moved, or "
        "down?); sync --prune removes them"
    ]
    assert len(archivist.store("docs").source_names()) == 4
    pruned = ingest(archivist, start, prune=True)
    assert sorted(pruned.removed) == sorted(
        f"{site.url}/docs/{p}" for p in ("", "install.html", "refunds.html", "shipping.html")
    )


def test_a_proxy_the_environment_names_is_used(site, tmp_path, monkeypatch):
    """The crawler's own transport (its deadline) still goes through HTTP_PROXY: the local
    server plays the proxy, so the site's host is never looked up."""
    host = "http://docs.example.invalid"
    site.routes.update(
        {
            f"{host}/robots.txt": Route(b"User-agent: *\nAllow: /\n", kind="text/plain"),
            f"{host}/docs/": Route(index("install.html")),
            f"{host}/docs/install.html": Route(page("Install", INSTALL_TEXT)),
        }
    )
    monkeypatch.setenv("HTTP_PROXY", site.url)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    found = web.crawl([f"{host}/docs/"], web.WebOptions(), cache=tmp_path / "cache")
    assert sources(found) == [f"{host}/docs/", f"{host}/docs/install.html"]
    assert site.paths()[0] == f"{host}/robots.txt"
