import json
import socket

from conftest import SHOP, run_cli, write_files
from fake_ollama import DEFAULT_MODELS, FakeOllama

REFUND_Q = "How many days do I have to ask for a refund?"


def free_port_url() -> str:
    """An address where nothing listens."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


def test_ingest_then_ask_json_end_to_end(ollama, home):
    ingested = run_cli(
        "ingest", str(SHOP), "--store", "shop_docs", "--json", ollama_url=ollama.url, home=home
    )
    assert ingested.returncode == 0, ingested.stderr
    report = json.loads(ingested.stdout)
    assert len(report["stored"]) == 10 and report["failed"] == []
    points = report["points"]

    asked = run_cli(
        "ask", REFUND_Q, "--store", "shop_docs", "--json", ollama_url=ollama.url, home=home
    )
    assert asked.returncode == 0, asked.stderr
    result = json.loads(asked.stdout)
    assert result["question"] == REFUND_Q
    assert result["mode"] == "agent" and result["model"] == "qwen2.5:3b"
    assert result["stores"] == ["shop_docs"]
    assert result["tool_calls"][0]["name"] == "search_shop_docs"
    assert result["tool_calls"][0]["args"] == {"query": REFUND_Q.rstrip("?")}
    first = result["tool_calls"][0]["results"][0]
    assert set(first) >= {"rank", "score", "source", "chunk_id", "text", "metadata"}
    assert result["answer"] and result["citations"][0]["source"] == first["source"]
    assert isinstance(result["latency_ms"], int)

    again = run_cli(
        "ingest", str(SHOP), "--store", "shop_docs", "--json", ollama_url=ollama.url, home=home
    )
    assert json.loads(again.stdout)["points"] == points
    assert len(json.loads(again.stdout)["unchanged"]) == 10


def test_search_stores_sources_and_delete(ollama, home):
    run_cli("ingest", str(SHOP), "--store", "shop_docs", ollama_url=ollama.url, home=home)
    searched = run_cli(
        "search",
        "Trailblazer NW-TX-2290",
        "--store",
        "shop_docs",
        "-k",
        "3",
        "--json",
        ollama_url=ollama.url,
        home=home,
    )
    results = json.loads(searched.stdout)
    assert [r["rank"] for r in results] == [1, 2, 3]
    assert results[0]["source"] == "product-care.md"

    stores = json.loads(run_cli("stores", "--json", ollama_url=ollama.url, home=home).stdout)
    assert [(s["store"], s["tool"]) for s in stores] == [("shop_docs", "search_shop_docs")]

    listed = json.loads(
        run_cli(
            "sources", "--store", "shop_docs", "--json", ollama_url=ollama.url, home=home
        ).stdout
    )
    assert "refund.md" in {s["source"] for s in listed}
    refund_chunks = next(s["chunks"] for s in listed if s["source"] == "refund.md")
    assert refund_chunks > 0

    deleted = run_cli(
        "delete", "--store", "shop_docs", "--source", "refund.md", ollama_url=ollama.url, home=home
    )
    assert deleted.returncode == 0
    assert f"Removed {refund_chunks} chunks of refund.md" in deleted.stdout
    listed = json.loads(
        run_cli(
            "sources", "--store", "shop_docs", "--json", ollama_url=ollama.url, home=home
        ).stdout
    )
    # Still on disk: listed as new (not stored), for the next sync to store again.
    assert [(s["status"], s["chunks"]) for s in listed if s["source"] == "refund.md"] == [
        ("new", 0)
    ]
    missing = run_cli(
        "delete", "--store", "shop_docs", "--source", "refund.md", ollama_url=ollama.url, home=home
    )
    assert missing.returncode == 1 and "archivist sources --store shop_docs" in missing.stderr


def test_a_partial_ingest_lists_failures_and_exits_1(ollama, home, tmp_path):
    root = write_files(tmp_path / "kb", {"good.md": "# Good\n\nFine.", "bad.md": b"\0\0\0"})
    done = run_cli("ingest", str(root), "--store", "docs", ollama_url=ollama.url, home=home)
    assert done.returncode == 1
    assert "1 file stored" in done.stdout
    assert "failed: bad.md: binary content" in done.stdout


def test_doctor_reports_a_healthy_setup(ollama, home):
    done = run_cli("doctor", ollama_url=ollama.url, home=home)
    assert done.returncode == 0, done.stdout
    assert "✓ Ollama 0." in done.stdout
    assert "✓ chat model 'qwen2.5:3b'" in done.stdout
    assert "✓ embedding model 'nomic-embed-text' (768 dimensions)" in done.stdout


def test_with_ollama_down_doctor_and_ask_exit_1_with_the_fix(store, home):
    url = free_port_url()
    doctor = run_cli("doctor", ollama_url=url, home=home)
    assert doctor.returncode == 1
    assert f"✗ Ollama is not reachable at {url}" in doctor.stdout
    assert "ollama serve" in doctor.stdout
    asked = run_cli("ask", REFUND_Q, "--store", "shop_docs", ollama_url=url, home=home)
    assert asked.returncode == 1
    assert f"Cannot reach Ollama at {url}" in asked.stderr and "ollama serve" in asked.stderr
    assert "Traceback" not in asked.stderr


def test_a_model_not_pulled_names_the_pull_command(home):
    models = [m for m in DEFAULT_MODELS if not m.name.startswith("nomic")]
    with FakeOllama(models=models) as ollama:
        done = run_cli(
            "ingest", str(SHOP), "--store", "shop_docs", ollama_url=ollama.url, home=home
        )
        doctor = run_cli("doctor", ollama_url=ollama.url, home=home)
    assert done.returncode == 1
    assert "ollama pull nomic-embed-text" in done.stderr and "Traceback" not in done.stderr
    assert doctor.returncode == 1 and "ollama pull nomic-embed-text" in doctor.stdout


def test_an_unknown_store_says_how_to_create_it(ollama, home):
    done = run_cli("ask", "anything", "--store", "nope", ollama_url=ollama.url, home=home)
    assert done.returncode == 1
    assert "There is no store named 'nope'" in done.stderr
    assert "archivist ingest PATH --store nope" in done.stderr


def test_a_mistyped_store_is_answered_with_the_names_most_like_it(ollama, home, store):
    done = run_cli("search", "refund", "--store", "shop_doc", ollama_url=ollama.url, home=home)
    assert done.returncode == 1
    assert done.stderr.startswith(
        "Error: There is no store named 'shop_doc'. Did you mean 'shop_docs'?\n"
        "Create it with: archivist ingest PATH --store shop_doc"
    ), done.stderr
    # Nothing like it: no guess.
    done = run_cli("search", "refund", "--store", "zebra", ollama_url=ollama.url, home=home)
    assert "There is no store named 'zebra'.\n" in done.stderr and "Did you mean" not in done.stderr
    # Every command that opens a store guesses alike, a whole store's delete and migrate too.
    for command in (
        ("ask", "refund"),
        ("sources",),
        ("read", "refund.md"),
        ("sync",),
        ("delete", "--source", "refund.md"),
        ("delete", "--yes"),
        ("migrate", "--to-home", str(home.parent / "elsewhere")),
        ("eval", "generate"),
    ):
        done = run_cli(*command, "--store", "shop_doc", ollama_url=ollama.url, home=home)
        assert done.returncode == 1, (command, done.stderr)
        assert done.stderr.startswith(
            "Error: There is no store named 'shop_doc'. Did you mean 'shop_docs'?\n"
        ), (command, done.stderr)


def test_chat_with_piped_input_answers_and_exits(ollama, home, store):
    done = run_cli(
        "chat",
        "--store",
        "shop_docs",
        stdin=f"{REFUND_Q}\n/exit\n",
        ollama_url=ollama.url,
        home=home,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith('search_shop_docs("How many days do I have to ask for a refund")')
    assert lines[1].endswith("[1]")
    assert lines[2].startswith("Sources: [1] ")


def test_chat_ingests_the_sample_knowledge_base_when_the_default_store_is_missing(ollama, home):
    done = run_cli("chat", stdin="hello\n", ollama_url=ollama.url, home=home)
    assert done.returncode == 0, done.stderr
    assert "ingesting the sample knowledge base" in done.stderr
    assert done.stdout.startswith("Hello")
    stores = json.loads(run_cli("stores", "--json", ollama_url=ollama.url, home=home).stdout)
    assert stores[0]["store"] == "shop_docs" and stores[0]["chunks"] > 0


def test_help_lists_the_commands(home):
    done = run_cli("--help", ollama_url=free_port_url(), home=home)
    for command in ("ingest", "ask", "chat", "search", "stores", "sources", "delete", "doctor"):
        assert command in done.stdout


def test_a_store_of_an_unknown_sparse_scheme_is_refused_with_the_fix_until_reindexed(
    ollama, home, store
):
    from archivist.app import Archivist
    from archivist.settings import Settings
    from archivist.tools import sparse

    app = Archivist(Settings(ollama_host=ollama.url, home=home))
    store = app.store("shop_docs")
    info = store.info()
    future = {**info, "fingerprint": {**info["fingerprint"], "sparse": "bm25-future-v9"}}
    app._client.update_collection("shop_docs", metadata={"archivist": future})
    chunks = store.count()
    app.close()

    searched = run_cli("search", REFUND_Q, "--store", "shop_docs", ollama_url=ollama.url, home=home)
    again = run_cli("ingest", str(SHOP), "--store", "shop_docs", ollama_url=ollama.url, home=home)
    for refused in (searched, again):
        assert refused.returncode == 1 and refused.stdout == ""
        assert refused.stderr.startswith(
            "Error: Store 'shop_docs' keeps keyword vectors of the scheme 'bm25-future-v9', "
            "which this release of Archivist cannot make"
        )
        assert (
            "Upgrade Archivist to the release that built it, or rebuild the store (its chunks "
            "are re-embedded): archivist ingest PATH --store shop_docs --reindex"
        ) in refused.stderr
        assert "Traceback" not in refused.stderr
    doctor = run_cli("doctor", ollama_url=ollama.url, home=home)
    assert doctor.returncode == 1
    assert "✗ Store 'shop_docs' keeps keyword vectors of the scheme 'bm25-future-v9'" in (
        doctor.stdout
    )
    listed = run_cli("stores", ollama_url=ollama.url, home=home)
    assert listed.returncode == 0 and "bm25-future-v9" in listed.stdout
    assert "unknown to this release: upgrade Archivist" in listed.stderr
    app = Archivist(Settings(ollama_host=ollama.url, home=home))
    assert app.store("shop_docs", must_exist=False).info() == future  # nothing lost
    assert app.store("shop_docs", must_exist=False).count() == chunks
    app.close()

    rebuilt = run_cli(
        "ingest", str(SHOP), "--store", "shop_docs", "--reindex", ollama_url=ollama.url, home=home
    )
    assert rebuilt.returncode == 0, rebuilt.stderr
    stores = json.loads(run_cli("stores", "--json", ollama_url=ollama.url, home=home).stdout)
    assert stores[0]["sparse"] == sparse.DEFAULT_SCHEME and stores[0]["chunks"] == chunks
    found = run_cli("search", REFUND_Q, "--store", "shop_docs", ollama_url=ollama.url, home=home)
    assert found.returncode == 0 and "refund.md" in found.stdout


def test_a_chat_finds_its_sample_store_left_empty_and_ingests_it_again(ollama, home):
    # What a first chat killed during its sample ingest leaves: the store, without chunks.
    assert run_cli("chat", stdin="hello\n", ollama_url=ollama.url, home=home).returncode == 0
    listed = run_cli("sources", "--store", "shop_docs", "--json", ollama_url=ollama.url, home=home)
    for source in json.loads(listed.stdout):
        args = ("delete", "--store", "shop_docs", "--source", source["source"], "--yes")
        assert run_cli(*args, ollama_url=ollama.url, home=home).returncode == 0
    done = run_cli("chat", stdin="hello\n", ollama_url=ollama.url, home=home)
    assert done.returncode == 0, done.stderr
    assert (
        "The store 'shop_docs' holds no chunks (its first ingest was stopped): ingesting the "
        "sample knowledge base" in done.stderr
    )
    stores = json.loads(run_cli("stores", "--json", ollama_url=ollama.url, home=home).stdout)
    assert stores[0]["chunks"] > 0
