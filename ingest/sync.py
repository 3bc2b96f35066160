"""Find source files, name them, hash them, and turn them into chunks."""

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from ingest.loaders import LoadError, load, supported
from ingest.splitter import SplitterSettings, split_text
from tools.store import Chunk


@dataclass(frozen=True)
class SourceFile:
    """A file to ingest and the `source` name its chunks get."""

    path: Path
    source: str


@dataclass
class Failure:
    """A file that could not be ingested, and why."""

    source: str
    reason: str

    def to_dict(self) -> dict[str, str]:
        return {"source": self.source, "reason": self.reason}


def discover(paths: list[Path]) -> tuple[list[SourceFile], list[Failure], list[Failure]]:
    """List the files under `paths`: (files to ingest, failures, files skipped by type).

    A file given directly is named by its file name; a file found in a folder by its path
    relative to that folder, with `/` separators. Hidden files and folders are left out.
    """
    files: dict[str, SourceFile] = {}
    failed: list[Failure] = []
    skipped: list[Failure] = []
    for root in paths:
        if root.is_file():
            files.setdefault(root.name, SourceFile(root, root.name))
        elif root.is_dir():
            for folder, dirnames, filenames in os.walk(root):
                dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
                for name in sorted(filenames):
                    if name.startswith("."):
                        continue
                    path = Path(folder) / name
                    source = path.relative_to(root).as_posix()
                    if supported(path):
                        files.setdefault(source, SourceFile(path, source))
                    else:
                        skipped.append(Failure(source, f"unsupported file type '{path.suffix}'"))
        else:
            failed.append(Failure(str(root), "no such file or folder"))
    return list(files.values()), failed, skipped


def content_hash(path: Path, splitter: SplitterSettings) -> str:
    """Hash a file's bytes with the splitter settings: either changing means re-chunking."""
    digest = hashlib.sha256(json.dumps(splitter.as_dict(), sort_keys=True).encode())
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def make_chunks(file: SourceFile, splitter: SplitterSettings) -> list[Chunk]:
    """Load a file and split it into chunks with their metadata; raise LoadError if bad."""
    chunks: list[Chunk] = []
    for section in load(file.path):
        for piece in split_text(section.text, splitter):
            metadata = {
                **section.metadata,
                "headings": piece.headings,
                "start": piece.start,
                "end": piece.end,
            }
            chunks.append(Chunk(piece.text, file.source, len(chunks), metadata))
    if not chunks:
        raise LoadError("no text in the file")
    return chunks
