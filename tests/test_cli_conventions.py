"""The command line as people expect it: --version, stdin, confirmations, completion,
--json everywhere, help text, counted nouns, notices on stderr, the first-run hints."""

import json
import os
import re
import sys

import pexpect
import pytest
from chat_terminal import key_by_key
from conftest import ROOT, SHOP, run_cli, write_files
from fake_ollama import FakeOllama

import archivist
from archivist.cli import app, name_metavars

REFUND_Q = "How many days do I have to ask for a refund?"


def cli(*args, ollama, home, stdin=None):
    return run_cli(*args, ollama_url=ollama.url, home=home, stdin=stdin)


def test_version_prints_the_package_version_and_exits_0(ollama, home):
    done = cli("--version", ollama=ollama, home=home)
    assert done.returncode == 0
    assert done.stdout == f"archivist {archivist.__version__}\n" and done.stderr == ""
    assert ollama.requests == []


def test_ask_reads_the_question_from_stdin_for_a_dash_or_a_pipe(ollama, home, store):
    dashed = cli("ask", "-", "--json", ollama=ollama, home=home, stdin=REFUND_Q + "\n")
    assert dashed.returncode == 0, dashed.stderr
    assert json.loads(dashed.stdout)["question"] == REFUND_Q
    piped = cli("ask", "--json", ollama=ollama, home=home, stdin=REFUND_Q)
    assert piped.returncode == 0, piped.stderr
    assert json.loads(piped.stdout)["question"] == REFUND_Q
    questions = [b["messages"][-1]["content"] for b in ollama.requests_to("/api/chat")]
    assert REFUND_Q in questions[0]
    assert all(q != "-" for q in questions)


def test_an_empty_question_is_refused_before_anything_runs(ollama, home):
    for args, stdin in ((("ask", ""), None), (("ask", "-"), "  \n")):
        done = cli(*args, ollama=ollama, home=home, stdin=stdin)
        assert done.returncode == 1
        assert done.stdout == ""
        assert done.stderr.startswith("Error: The question is empty.\n")
        assert 'archivist ask "QUESTION"' in done.stderr
    assert ollama.requests == []


def stores_listed(ollama, home) -> list[str]:
    listing = cli("stores", "--json", ollama=ollama, home=home)
    assert listing.returncode == 0, listing.stderr
    return [s["store"] for s in json.loads(listing.stdout)]


def test_delete_without_a_source_deletes_the_whole_store_with_yes(ollama, home, store):
    chunks = next(
        s["chunks"]
        for s in json.loads(cli("stores", "--json", ollama=ollama, home=home).stdout)
        if s["store"] == store
    )
    refused = cli("delete", "--store", store, ollama=ollama, home=home, stdin="y\n")
    assert refused.returncode == 1 and refused.stdout == ""
    assert "needs a confirmation" in refused.stderr
    assert f"archivist delete --store {store} --yes" in refused.stderr
    assert stores_listed(ollama, home) == [store]

    deleted = cli("delete", "--store", store, "--yes", "--json", ollama=ollama, home=home)
    assert deleted.returncode == 0, deleted.stderr
    assert json.loads(deleted.stdout) == {"store": store, "source": None, "chunks": chunks}
    assert stores_listed(ollama, home) == []

    again = cli("delete", "--store", store, "--yes", ollama=ollama, home=home)
    assert again.returncode == 1
    assert "There is no store named 'shop_docs'" in again.stderr
    assert "archivist stores" in again.stderr


def test_delete_one_source_reports_json_and_counts_in_the_singular(ollama, home, tmp_path):
    docs = write_files(tmp_path / "docs", {"one.md": "A single short note about tents."})
    ingested = cli("ingest", str(docs), "--store", "notes", ollama=ollama, home=home)
    assert ingested.returncode == 0, ingested.stderr
    listed = cli("stores", ollama=ollama, home=home)
    assert listed.stdout.splitlines()[1].startswith("notes\t1 chunk\t")
    sources = cli("sources", "--store", "notes", ollama=ollama, home=home)
    assert sources.stdout.splitlines()[1].startswith("  ok\tone.md\t1 chunk\t")
    deleted = cli("delete", "--store", "notes", "--source", "one.md", ollama=ollama, home=home)
    assert deleted.stdout == "Removed 1 chunk of one.md from notes.\n"
    again = cli("ingest", str(docs), "--store", "notes", ollama=ollama, home=home)
    assert again.returncode == 0
    as_json = cli(
        "delete", "--store", "notes", "--source", "one.md", "--json", ollama=ollama, home=home
    )
    assert json.loads(as_json.stdout) == {"store": "notes", "source": "one.md", "chunks": 1}


def spawn(*args: str, ollama, home, term: str = "dumb") -> pexpect.spawn:
    env = {**os.environ, "OLLAMA_HOST": ollama.url, "ARCHIVIST_HOME": str(home), "TERM": term}
    return pexpect.spawn(
        sys.executable,
        ["-m", "archivist", *args],
        env=env,
        cwd=str(ROOT),
        encoding="utf-8",
        dimensions=(50, 200),
        timeout=90,
    )


def finish(child: pexpect.spawn) -> int:
    child.expect(pexpect.EOF)
    child.close()
    return child.exitstatus


def test_delete_in_a_terminal_asks_first_and_no_keeps_the_store(ollama, home, store):
    child = spawn("delete", "--store", store, ollama=ollama, home=home)
    child.expect(r"Delete the store 'shop_docs' and its \d+ chunks\? \[y/N\]: ")
    child.sendline("n")
    child.expect("Nothing was deleted.")
    assert finish(child) == 1
    assert stores_listed(ollama, home) == [store]

    child = spawn("delete", "--store", store, ollama=ollama, home=home)
    child.expect(r"\[y/N\]: ")
    child.sendline("y")
    child.expect(r"Deleted the store 'shop_docs' \(\d+ chunks\)\.")
    assert finish(child) == 0
    assert stores_listed(ollama, home) == []


def test_shell_completion_is_offered_and_completes_commands(ollama, home, monkeypatch):
    helped = cli("--help", ollama=ollama, home=home)
    assert "--install-completion" in helped.stdout and "--show-completion" in helped.stdout
    # Typer's own switch: take the shell from the command line instead of detecting it.
    with monkeypatch.context() as env:
        env.setenv("_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION", "1")
        shown = run_cli("--show-completion", "bash", ollama_url=ollama.url, home=home)
    assert shown.returncode == 0, shown.stderr
    assert "_ARCHIVIST_COMPLETE=complete_bash" in shown.stdout
    # What bash asks for as the user presses Tab after `archivist del`.
    with monkeypatch.context() as env:
        for name, value in (
            ("_ARCHIVIST_COMPLETE", "complete_bash"),
            ("COMP_WORDS", "archivist del"),
            ("COMP_CWORD", "1"),
        ):
            env.setenv(name, value)
        completed = run_cli(ollama_url=ollama.url, home=home)
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.split() == ["delete"]


def test_doctor_json_reports_each_check_and_exits_by_the_worst(ollama, home):
    healthy = cli("doctor", "--json", ollama=ollama, home=home)
    assert healthy.returncode == 0, healthy.stderr
    report = json.loads(healthy.stdout)
    assert report["ok"] is True
    # Ollama, the two models, the store, and LangSmith tracing (off here).
    assert [set(c) for c in report["checks"]] == [{"ok", "message", "fix", "warning"}] * 5
    assert "tracing" in report["checks"][-1]["message"].lower()
    assert report["checks"][1]["message"].startswith("chat model 'qwen2.5:3b'")

    broken = cli("doctor", "--json", "--model", "nope:7b", ollama=ollama, home=home)
    assert broken.returncode == 1
    report = json.loads(broken.stdout)
    assert report["ok"] is False
    failed = [c for c in report["checks"] if not c["ok"]]
    assert len(failed) == 1 and failed[0]["fix"] == "Pull it with `ollama pull nope:7b`."


def all_help_texts(capsys) -> dict[str, str]:
    """Every command's help, rendered as `archivist ... --help` renders it."""
    from typer.main import get_command

    root = name_metavars(get_command(app))
    texts = {}

    def walk(command, path):
        status = root.main([*path, "--help"], prog_name="archivist", standalone_mode=False)
        assert status == 0
        texts[" ".join(path) or "archivist"] = capsys.readouterr().out
        for name, sub in getattr(command, "commands", {}).items():
            walk(sub, [*path, name])

    walk(root, [])
    return texts


def test_help_names_values_instead_of_python_types(capsys):
    texts = all_help_texts(capsys)
    assert {"ingest", "ask", "chat", "delete", "doctor", "logs show"} <= set(texts)
    for name, text in texts.items():
        assert not re.search(r"<[a-z][\w\[\] ]*>", text), (name, text)
        assert "list[" not in text and "int range" not in text, name
    assert "-s, --store NAME" in texts["ask"] and "-m, --model MODEL" in texts["ask"]
    assert re.search(r"Usage: archivist ingest \[OPTIONS\] \{?PATHS?\}?\.\.\.", texts["ingest"])
    assert "-k N" in texts["search"]


def test_reporting_commands_accept_json(capsys):
    texts = all_help_texts(capsys)
    for name in ("ingest", "ask", "search", "eval", "stores", "sources", "delete", "doctor"):
        assert "--json" in texts[name], name
    for name in ("migrate", "logs", "logs show"):
        assert "--json" in texts[name], name


def test_piped_chat_puts_the_model_switch_notice_on_stderr(ollama, home, store):
    done = cli(
        "chat", ollama=ollama, home=home, stdin="/model gemma-notools:1b\n/model qwen2.5:3b\n"
    )
    assert done.returncode == 0, done.stderr
    assert "gemma-notools:1b cannot call tools: using retrieve-then-answer." in done.stderr
    assert "cannot call tools" not in done.stdout
    assert "gemma-notools:1b · retrieve-then-answer" in done.stdout


def test_resuming_a_conversation_counts_earlier_questions_in_the_singular(ollama, home, store):
    first = cli("chat", ollama=ollama, home=home, stdin=REFUND_Q + "\n")
    assert first.returncode == 0, first.stderr
    resumed = cli("chat", "--resume", ollama=ollama, home=home, stdin="")
    assert resumed.returncode == 0, resumed.stderr
    assert re.search(r"Resuming conversation \S+: 1 earlier question\.\n", resumed.stderr)
    assert resumed.stdout == ""


def test_ask_and_search_on_a_fresh_home_point_at_the_sample(ollama, home):
    for args in (("ask", REFUND_Q), ("search", "refund")):
        done = cli(*args, ollama=ollama, home=home)
        assert done.returncode == 1 and done.stdout == ""
        assert "There is no store named 'shop_docs'." in done.stderr
        assert "`archivist chat` ingests the sample knowledge base" in done.stderr
        assert f"archivist ingest {SHOP} --store shop_docs" in done.stderr
        assert "Traceback" not in done.stderr
    other = cli("search", "refund", "--store", "mine", ollama=ollama, home=home)
    assert other.returncode == 1 and "sample" not in other.stderr


def test_a_missing_model_is_never_offered_for_pulling_in_a_pipe(home):
    with FakeOllama() as fake:
        fake.remove_model("qwen2.5:3b")
        fake.remove_model("nomic-embed-text")
        for args in (("ask", REFUND_Q), ("ask", REFUND_Q, "--json"), ("search", "refund")):
            done = run_cli(*args, ollama_url=fake.url, home=home, stdin="y\n")
            assert done.returncode == 1
            assert "Pull it now" not in done.stderr + done.stdout
        assert fake.requests_to("/api/pull") == []


@pytest.mark.parametrize(
    ("term", "progress"),
    [
        ("xterm-256color", r"qwen2\.5:3b: success .*━.*1\.8/1\.8 GB"),
        ("dumb", r"qwen2\.5:3b: pulling [0-9a-f]{12} \(1\.8 GB\)\r\n"),
    ],
)
def test_chat_in_a_terminal_offers_to_pull_a_missing_model_with_progress(home, term, progress):
    with FakeOllama() as fake:
        fake.remove_model("qwen2.5:3b")
        child = spawn("chat", ollama=fake, home=home, term=term)
        child.expect(r"The model 'qwen2\.5:3b' is not in Ollama at \S+\. Pull it now\? \[Y/n\]: ")
        assert fake.requests_to("/api/pull") == []
        child.sendline("")  # the default: yes
        child.expect(progress)
        child.expect(r"Pulled qwen2\.5:3b\.")
        child.expect(r"Archivist · qwen2\.5:3b · agent")
        # Ctrl-D is a key once the chat reads key by key (its echo is off all along: waiting
        # for that alone let the key reach a terminal still in line mode).
        assert key_by_key(child)
        child.sendeof()
        assert finish(child) == 0
        assert [body["model"] for body in fake.requests_to("/api/pull")] == ["qwen2.5:3b"]
        assert fake.requests_to("/api/pull")[0].get("stream", True) is True
        assert fake.model("qwen2.5:3b") is not None


def test_a_declined_pull_changes_nothing_and_names_ollama_pull(home):
    with FakeOllama() as fake:
        fake.remove_model("qwen2.5:3b")
        child = spawn("chat", ollama=fake, home=home)
        child.expect(r"Pull it now\? \[Y/n\]: ")
        child.sendline("n")
        child.expect(r"Pull it with `ollama pull qwen2\.5:3b`")
        assert finish(child) == 1
        assert fake.requests_to("/api/pull") == []
