"""Build real documents of each format for the tests: PDF, DOCX, HTML, JSON, CSV."""

from pathlib import Path


def make_pdf(
    pages: list[list[str]], title: str | None = None, size: tuple[int, int] = (612, 792)
) -> bytes:
    """Write a real PDF (Helvetica text, one line per string) the way a PDF writer would, its
    pages `size` points wide and high (US Letter unless told)."""

    def escape(text: str) -> str:
        return text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")

    objects: list[bytes] = []
    page_ids = [4 + 2 * i for i in range(len(pages))]
    objects.append(b"<< /Type /Catalog /Pages 2 0 R >>")
    kids = " ".join(f"{i} 0 R" for i in page_ids)
    objects.append(f"<< /Type /Pages /Kids [{kids}] /Count {len(pages)} >>".encode())
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    for page_id, lines in zip(page_ids, pages, strict=True):
        objects.append(
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 {size[0]} {size[1]}] "
            f"/Resources << /Font << /F1 3 0 R >> >> /Contents {page_id + 1} 0 R >>".encode()
        )
        body = "BT /F1 11 Tf 14 TL 72 750 Td " + " ".join(
            f"({escape(line)}) Tj T*" for line in lines
        )
        stream = (body + " ET").encode("latin-1")
        objects.append(b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream")
    info = None
    if title:
        objects.append(f"<< /Title ({escape(title)}) >>".encode("latin-1"))
        info = len(objects)
    out = bytearray(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    trailer = f"<< /Size {len(objects) + 1} /Root 1 0 R"
    trailer += f" /Info {info} 0 R >>" if info else " >>"
    out += f"trailer\n{trailer}\nstartxref\n{xref}\n%%EOF\n".encode()
    return bytes(out)


def make_docx(path: Path) -> Path:
    """Write a Word document with a title, headings, a list and a table."""
    import docx

    document = docx.Document()
    document.core_properties.title = "Warranty handbook"
    document.add_heading("Warranty", level=1)
    document.add_paragraph("Every product has a 2-year warranty from the delivery date.")
    document.add_heading("Summit tents", level=2)
    document.add_paragraph("Summit line tents are covered for 5 years.")
    document.add_paragraph("Send the warranty code WX-7731 with the claim.", style="List Bullet")
    table = document.add_table(rows=2, cols=2)
    for cell, text in zip(table._cells, ["product", "years", "boots", "2"], strict=True):
        cell.text = text
    document.save(str(path))
    return path


HTML_PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>Shipping | Northwind</title>
<style>body { color: red }</style><script>trackVisitor("secret-tracking")</script></head>
<body>
<header><div class="logo">Northwind Outfitters</div></header>
<nav><a href="/">Home</a> <a href="/shop">Shop all products</a></nav>
<main>
<h1>Shipping</h1>
<p>Standard shipping takes <b>3–5 business days</b> and costs €4.95.</p>
<h2>Express</h2>
<p>Express delivery takes 1–2 days with <a href="https://ups.example">UPS</a>.</p>
<table><tr><th>zone</th><th>price</th></tr><tr><td>Europe</td><td>€19.90</td></tr></table>
<pre><code>GET /v1/orders/{order}/tracking</code></pre>
</main>
<footer>© Northwind · Imprint · Cookie settings</footer>
<script>console.log("bye")</script>
</body></html>
"""


def broken_png_reason() -> str:
    """Why a file named .png that is no picture is skipped: with the ocr extra images are read,
    so it is an unreadable image; without it, a binary file of an unsupported type."""
    from archivist.ingest.loaders import ocr

    return ocr.UNREADABLE_IMAGE if ocr.available() else "binary file of unsupported type '.png'"
