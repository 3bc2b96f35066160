"""What people read says exactly what happened: counted nouns that agree, one number format,
the notice about a model's abilities in `ask` as in the chat, usage lines without braces,
scores explained, tool texts written for the model that calls the tool, and the error of a
folder that shadows the package."""

import json
import re
import subprocess
import sys
from pathlib import Path

from conftest import ROOT, run_cli, write_files
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from test_cli_conventions import all_help_texts

import archivist
from archivist.agent.context import fit_messages
from archivist.agent.retrieval import describe, examples
from archivist.agent.search_args import SearchArgs
from archivist.evaluation.report import never_searched_note
from archivist.serving.mcp import SEARCH_SCHEMA
from archivist.tools.words import count, number

REFUND_Q = "How many days do I have to ask for a refund?"
NO_TOOLS = "gemma-notools:1b cannot call tools: using retrieve-then-answer."


def cli(*args, ollama, home, stdin=None):
    return run_cli(*args, ollama_url=ollama.url, home=home, stdin=stdin)


def test_ask_says_a_model_cannot_call_tools_in_the_words_the_chat_uses(ollama, home, store):
    asked = cli("ask", REFUND_Q, "-m", "gemma-notools:1b", ollama=ollama, home=home)
    assert asked.returncode == 0, asked.stderr
    assert f"Note: {NO_TOOLS}\n" in asked.stderr and "cannot call tools" not in asked.stdout
    as_json = cli("ask", REFUND_Q, "-m", "gemma-notools:1b", "--json", ollama=ollama, home=home)
    assert json.loads(as_json.stdout)["notes"] == [NO_TOOLS]
    chatted = cli("chat", "-m", "gemma-notools:1b", ollama=ollama, home=home, stdin="")
    assert chatted.returncode == 0, chatted.stderr
    assert f"{NO_TOOLS}\n" in chatted.stderr


def test_a_question_too_long_for_ask_is_not_told_to_use_a_chat_command(ollama, home, store):
    done = cli("ask", "-", "--num-ctx", "512", ollama=ollama, home=home, stdin="word " * 4000)
    assert done.returncode == 1 and done.stdout == ""
    assert "does not fit the model's context window" in done.stderr
    assert "Shorten it, or send a part at a time; --num-ctx raises the window" in done.stderr
    assert "/new" not in done.stderr and "conversation" not in done.stderr


def test_counts_agree_with_their_noun_and_carry_thousands_separators():
    assert [count(1, "chunk"), count(2, "chunk"), count(1394, "file")] == [
        "1 chunk", "2 chunks", "1,394 files"
    ]  # fmt: skip
    assert number(1642) == "1,642"
    call = {"name": "search_docs", "args": {"query": "q"}, "id": "c0"}
    results = "<search_results>" + "<result>passage</result>" * 40 + "</search_results>"
    history = [HumanMessage("q0"), AIMessage("", tool_calls=[call])]
    history += [ToolMessage(results, tool_call_id="c0"), AIMessage("a0")]
    fitted = fit_messages([*history, HumanMessage("q1")], 150, 2048)
    assert fitted.notes == [
        "To fit the 2048-token context window: shortened 1 earlier search result."
    ]
    dropped = fit_messages([HumanMessage("x " * 400), AIMessage("y"), HumanMessage("q")], 60, 512)
    assert "left out 2 earlier messages" in dropped.notes[0]


def test_the_ingest_summary_names_what_it_counts_in_one_number_format(ollama, home, tmp_path):
    files: dict[str, str | bytes] = {"one.md": "# One\n\nA single short chunk."}
    files |= {f"blobs/b{i:04}.bin": b"\0\1\2" for i in range(1001)}
    root = write_files(tmp_path / "kb", files)
    done = cli("ingest", str(root), "--store", "kb", ollama=ollama, home=home)
    assert done.returncode == 0, done.stderr
    head, skipped = done.stdout.splitlines()[:2]
    assert head.startswith("kb: 1 file stored, 0 unchanged, 0 failed, 1,001 skipped, 0 removed; ")
    assert re.search(r"; 1 chunk embedded in [\d.]+ s; 1 chunk in the store\.$", head), head
    assert skipped.startswith("  1,001 skipped: ")
    (root / "one.md").unlink()
    (root / "two.md").write_text("# Two\n\nAnother chunk.")
    pruned = cli("ingest", str(root), "--store", "kb", "--prune", ollama=ollama, home=home)
    assert "1 removed (no longer present); " in pruned.stdout.splitlines()[0]


def test_usage_lines_name_values_without_braces_and_eval_says_where_it_writes(capsys):
    texts = all_help_texts(capsys)
    usages = {name: text.splitlines()[0] for name, text in texts.items()}
    assert not [u for u in usages.values() if "{" in u or "}" in u], usages
    assert usages["ingest"] == "Usage: archivist ingest [OPTIONS] PATH..."
    assert usages["search"] == "Usage: archivist search [OPTIONS] QUERY"
    assert usages["eval"] == "Usage: archivist eval [OPTIONS] FILE"
    assert usages["ask"] == "Usage: archivist ask [OPTIONS] [QUESTION]"
    eval_help = re.sub(r"-\s+", "-", " ".join(texts["eval"].split()))  # wrapped at hyphens
    assert "Default: eval-reports/DATASET-YYYYMMDD-HHMMSS in the current folder." in eval_help


def test_search_and_sources_help_say_what_their_values_are(capsys):
    texts = {name: " ".join(text.split()) for name, text in all_help_texts(capsys).items()}
    search = texts["search"]
    assert "-k N How many results (default 5, or ARCHIVIST_K)." in search
    assert "sparse: keywords (BM25) alone, which needs no Ollama" in search
    assert "the files whose names begin with it." in search and "begin so" not in search
    # The values named as the README's command table names them.
    assert "--contains TEXT" in texts["sources"] and "--path PATTERN" in texts["sources"]


def test_stores_are_listed_under_a_header(ollama, home, store):
    done = cli("stores", ollama=ollama, home=home)
    lines = done.stdout.splitlines()
    assert lines[0] == "store\tchunks\tembedding model\tBM25 scheme\tdescription"
    assert lines[1].startswith("shop_docs\t")


def test_results_people_read_show_no_raw_score_and_json_keeps_it(ollama, home, store):
    # A hybrid score (-0.715) or a BM25 one (3.2) is on no scale a person can read: the
    # listings show the order; --json keeps the number, and a reranker's relevance is shown.
    searched = cli("search", "refund", "--store", store, ollama=ollama, home=home)
    assert searched.returncode == 0, searched.stderr
    assert searched.stdout.startswith("[1] refund.md") and "score" not in searched.stdout
    as_json = cli("search", "refund", "--store", store, "--json", ollama=ollama, home=home)
    assert all(isinstance(r["score"], float) for r in json.loads(as_json.stdout))
    chatted = cli("chat", ollama=ollama, home=home, stdin=f"{REFUND_Q}\n/sources\n")
    assert chatted.returncode == 0, chatted.stderr
    listing = chatted.stdout[chatted.stdout.index("\n[1] ") :]
    assert "score" not in listing.lower()
    [turn] = json.loads(cli("logs", "--json", ollama=ollama, home=home).stdout)
    shown = cli("logs", "show", str(turn["id"]), ollama=ollama, home=home).stdout
    assert re.search(r"^  \[1\] \S+\.md.*  chunk \S+$", shown, re.M) and "score" not in shown
    reranked = cli(
        "search", "refund", "--store", store, "--rerank", "qwen2.5:3b", ollama=ollama, home=home
    )
    assert reranked.returncode == 0, reranked.stderr
    assert re.search(r"^\[1\] refund\.md[^\n]* \(relevance \d\.\d\d\)$", reranked.stdout, re.M)


def test_the_tool_schema_is_written_for_the_model_that_calls_it():
    schema = SearchArgs.model_json_schema()
    assert schema["description"] == (
        "A search: `query` (required), and `source` to search one document or folder only."
    )
    assert "Arguments a model gives" not in json.dumps(schema)
    assert "refused, not ignored" not in json.dumps(schema)
    assert schema == SEARCH_SCHEMA  # what an MCP client's model reads


class ManySources:
    """What `describe` reads of a store: its name, description and source names."""

    name = "fastapi_docs"
    description = "the FastAPI documentation in English and Chinese"

    def __init__(self, names: list[str]) -> None:
        self.names = names

    def source_names(self) -> list[str]:
        return sorted(self.names)


def test_example_sources_are_spread_over_the_store_not_the_alphabetically_first():
    names = ["en/docs/_llm-test.md", "en/docs/about/index.md", "en/docs/index.md"]
    names += [f"en/docs/tutorial/t{i:02}.md" for i in range(30)]
    names += [f"zh/docs/tutorial/t{i:02}.md" for i in range(20)]
    names += [f"en/docs/advanced/a{i:02}.md" for i in range(10)]
    description = describe(ManySources(names))
    assert "63 sources, e.g. en/docs/tutorial/t00.md, zh/docs/tutorial/t00.md, " in description
    assert "_llm-test.md" not in description
    picked = examples(sorted(names))
    assert picked == [
        "en/docs/tutorial/t00.md",
        "zh/docs/tutorial/t00.md",
        "en/docs/advanced/a00.md",
        "en/docs/index.md",
        "en/docs/about/index.md",
    ]


NEVER = {
    "model": "qwen2.5:0.5b",
    "mode": "agent",
    "metrics": {"tool_decision_accuracy": 0.08, "retrieval_hit@k": 0.0},
    "support": {"tool_decision_accuracy": 12, "argument_validity": 0},
    "unstable_cases": [],
}


def test_eval_points_out_a_model_that_never_searched_and_how_to_make_it():
    assert never_searched_note(NEVER, 5) == (
        "**qwen2.5:0.5b** never searched: it answered every case without calling a tool "
        "(tool decision 0.08, hit@5 0.00). If it should have, --retrieve-first (or "
        "ARCHIVIST_RETRIEVE_FIRST=1) searches every store before each answer."
    )
    searched = {**NEVER, "support": {**NEVER["support"], "argument_validity": 3}}
    assert never_searched_note(searched, 5) is None
    assert never_searched_note({**NEVER, "mode": "retrieve-then-answer"}, 5) is None


def test_a_folder_named_archivist_beside_a_script_is_named_in_the_error(tmp_path):
    (tmp_path / "archivist").mkdir()  # a clone of the repository has no __init__.py at its top
    (tmp_path / "script.py").write_text("from archivist import Archivist\nprint(Archivist)\n")
    done = subprocess.run(
        [sys.executable, "script.py"], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    editable = Path(archivist.__file__).is_relative_to(ROOT)
    if not editable:  # an installed wheel is a regular package: the folder cannot shadow it
        assert done.returncode == 0, done.stderr
        return
    assert done.returncode == 1
    assert (
        f"ImportError: `import archivist` found the folder {tmp_path / 'archivist'} beside your "
        "script, not the installed package" in done.stderr
    )
    assert "Run the script from another folder, or rename that folder" in done.stderr
    version = subprocess.run(
        [sys.executable, "-m", "archivist", "--version"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert version.stdout == f"archivist {archivist.__version__}\n", version.stderr


def test_a_mistyped_name_gets_the_names_most_like_it():
    from archivist.tools.words import closest, did_you_mean

    stores = ["antd", "antd_zh", "shop_docs"]
    assert closest("antdd", stores)[0] == "antd" and closest("ANTD_AP", stores)[0] == "antd"
    assert closest("zebra", stores) == []
    assert did_you_mean(["antd"]) == " Did you mean 'antd'?"
    assert did_you_mean(["a", "b", "c"]) == " Did you mean 'a', 'b' or 'c'?"
    assert did_you_mean([]) == ""
