"""Include directives: the files documentation pages include are read, inside the root only."""

from conftest import write_files

from archivist.ingest.discovery import discover
from archivist.ingest.loaders import includes
from archivist.ingest.splitter import SplitterSettings
from archivist.ingest.sync import content_hash, make_documents

APP = "import fastapi\n\napp = fastapi.FastAPI()\nSECRET_TOKEN = 'coneofsilence'\n"


def page_text(root, source):
    """The text the page's chunks hold once ingested from `root` (as a folder)."""
    files, _, _ = discover([root])
    [file] = [f for f in files if f.source == source]
    [doc] = make_documents(file, SplitterSettings())
    return "\n".join(c.text for c in doc.chunks)


def test_mkdocs_snippets_are_read_whole_or_by_lines(tmp_path):
    root = write_files(
        tmp_path / "site",
        {
            "docs/guide.md": (
                '# Guide\n\n--8<-- "snippets/app.py"\n\nThen:\n\n--8<-- "snippets/app.py:3:3"\n'
            ),
            "docs/snippets/app.py": APP,
            "docs/escaped.md": '# Escaped\n\n;--8<-- "snippets/app.py"\n',
        },
    )
    text = page_text(root, "docs/guide.md")
    assert text.count("SECRET_TOKEN") == 1  # the whole file once, then only line 3
    assert text.count("app = fastapi.FastAPI()") == 2
    assert "--8<--" not in text
    assert "SECRET_TOKEN" not in page_text(root, "docs/escaped.md")


def test_code_includes_resolve_from_a_folder_above_the_page(tmp_path):
    # FastAPI's pages name `../../docs_src/...` from their language folder, not their own.
    root = write_files(
        tmp_path / "repo",
        {
            "docs/en/docs/tutorial/testing.md": (
                "# Testing\n\nThe app:\n\n{* ../../docs_src/app/main.py ln[3:4] hl[4] *}\n\n"
                "Markdown include: {!../../docs_src/app/main.py!}\n"
            ),
            "docs_src/app/main.py": APP,
        },
    )
    text = page_text(root, "docs/en/docs/tutorial/testing.md")
    assert "```python\napp = fastapi.FastAPI()\nSECRET_TOKEN = 'coneofsilence'\n```" in text
    assert "Markdown include: import fastapi" in text
    assert "{*" not in text and "{!" not in text


def test_mdx_raw_imports_and_partials_are_read(tmp_path):
    root = write_files(
        tmp_path / "site",
        {
            "docs/start.mdx": (
                "import CodeBlock from '@theme/CodeBlock';\n"
                "import AppSource from '!!raw-loader!./app.py';\n"
                "import Shared from './_shared.mdx';\n\n"
                '# Start\n\n<CodeBlock language="python">{AppSource}</CodeBlock>\n\n<Shared />\n'
            ),
            "docs/app.py": APP,
            "docs/_shared.mdx": "Restart the server after changing the settings file.",
        },
    )
    text = page_text(root, "docs/start.mdx")
    assert "SECRET_TOKEN = 'coneofsilence'" in text
    assert "Restart the server after changing the settings file." in text
    assert "raw-loader" not in text and "{AppSource}" not in text


def test_rst_literalinclude_reads_the_lines_named(tmp_path):
    root = write_files(
        tmp_path / "site",
        {
            "docs/usage.rst": (
                "Usage\n=====\n\nThe app:\n\n.. literalinclude:: ../examples/app.py\n"
                "   :language: python\n   :lines: 3-4\n\nAfter the example.\n"
            ),
            "examples/app.py": APP,
        },
    )
    text = page_text(root, "docs/usage.rst")
    assert "Code (python):" in text
    assert "SECRET_TOKEN = 'coneofsilence'" in text
    assert "import fastapi" not in text  # line 1 was not asked for
    assert "After the example." in text


def test_nothing_outside_the_root_is_read(tmp_path):
    write_files(tmp_path, {"secret.py": "PASSWORD = 'hunter2'\n"})
    root = write_files(
        tmp_path / "site",
        {
            "docs/a.md": '# A\n\n--8<-- "../../secret.py"\n\n{!/etc/hostname!}\n',
            "docs/big.md": '# Big\n\n--8<-- "big.txt"\n',
            "docs/big.txt": "x" * (includes.MAX_INCLUDE_BYTES + 1),
        },
    )
    (root / "docs" / "link.py").symlink_to(tmp_path / "secret.py")
    (root / "docs" / "b.md").write_text('# B\n\n--8<-- "link.py"\n')
    for page in ("docs/a.md", "docs/b.md"):
        text = page_text(root, page)
        assert "hunter2" not in text
        assert "--8<--" in text  # the directive stays as it was written
    assert "xxxx" not in page_text(root, "docs/big.md")


def test_include_loops_stop(tmp_path):
    root = write_files(
        tmp_path / "site",
        {
            "a.md": '# A\n\nA says hello.\n\n--8<-- "b.md"\n',
            "b.md": 'B says hello.\n\n--8<-- "a.md"\n',
            "self.md": '# Self\n\nOnce.\n\n--8<-- "self.md"\n',
        },
    )
    text = page_text(root, "a.md")
    assert text.count("A says hello.") == 1
    assert text.count("B says hello.") == 1
    assert page_text(root, "self.md").count("Once.") == 1


def test_a_changed_example_changes_the_page_version(tmp_path):
    root = write_files(
        tmp_path / "site",
        {"page.md": '# Page\n\n--8<-- "app.py"\n', "plain.md": "# Plain\n\nNo includes.\n"},
    )
    (root / "app.py").write_text(APP)
    files = {f.source: f for f in discover([root])[0]}
    splitter = SplitterSettings()

    def version(name):
        return content_hash(files[name].path, splitter, None, files[name].root)

    before, plain = version("page.md"), version("plain.md")
    (root / "app.py").write_text(APP.replace("coneofsilence", "hailhydra"))
    assert version("page.md") != before
    # A page without includes keeps the version it always had (no re-ingest after upgrading).
    assert plain == content_hash(files["plain.md"].path, splitter)
    assert version("plain.md") == plain
