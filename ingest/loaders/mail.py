"""E-mail: a saved message (.eml) with its headers as metadata."""

import re
from pathlib import Path

from archivist.ingest.loaders.base import LoaderOptions, LoadError, Section, clean_metadata
from archivist.ingest.loaders.text import html_to_markdown


def load_eml(path: Path, options: LoaderOptions) -> list[Section]:
    """Load a message: the subject as the heading, the plain body (else the HTML one as
    Markdown); sender, recipients, date and attachment names become metadata."""
    # Imported here: the e-mail package is a sizeable share of what the loading process
    # imports before it is ready, and most ingests read no mail.
    import email
    import email.policy

    with path.open("rb") as handle:
        message = email.message_from_binary_file(handle, policy=email.policy.default)
    if not any(message.get(h) for h in ("From", "To", "Subject", "Date", "Message-ID")):
        raise LoadError("not an e-mail message (no From, To, Subject or Date header)")
    body = message.get_body(preferencelist=("plain", "html"))
    text = ""
    if body is not None:
        content = body.get_content()
        text = content if body.get_content_type() == "text/plain" else html_to_markdown(content)[1]
    subject = str(message.get("Subject", "") or "").strip()
    attachments = [
        part.get_filename() for part in message.iter_attachments() if part.get_filename()
    ]
    metadata = clean_metadata(
        {
            "title": subject,
            "from": str(message.get("From", "") or ""),
            "to": str(message.get("To", "") or ""),
            "date": str(message.get("Date", "") or ""),
            "attachments": attachments,
        }
    )
    text = re.sub(r"\n{3,}", "\n\n", text.replace("\r\n", "\n")).strip()
    return [Section(f"# {subject}\n\n{text}" if subject else text, metadata)]
