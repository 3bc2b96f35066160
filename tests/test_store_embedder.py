"""A store knows its embedder: queries use the model recorded in its fingerprint, whatever
model is configured for new stores; a clear error only when Ollama lacks that model."""

import json

from conftest import SHOP, cli, run_cli

QUERY = "Trailblazer NW-TX-2290"
MINI = ("ingest", str(SHOP), "--store", "mini", "--embed-model", "all-minilm")


def test_a_store_built_with_another_model_answers_queries(ollama, home):
    cli(*MINI, ollama=ollama, home=home)
    ollama.clear_requests()
    searched = cli("search", QUERY, "--store", "mini", "--json", ollama=ollama, home=home)
    results = json.loads(searched.stdout)
    assert results[0]["source"] == "product-care.md" and "NW-TX-2290" in results[0]["text"]
    embedded = ollama.requests_to("/api/embed")
    # all-minilm has no task prefixes: the query is embedded as the chunks were.
    assert [(r["model"], r["input"]) for r in embedded] == [("all-minilm", [QUERY])]

    asked = cli("ask", QUERY, "--store", "mini", "--json", ollama=ollama, home=home)
    answer = json.loads(asked.stdout)
    assert answer["tool_calls"][0]["name"] == "search_mini"
    assert answer["tool_calls"][0]["results"][0]["source"] == "product-care.md"


def test_a_missing_store_model_names_the_pull_command(ollama, home):
    cli(*MINI, ollama=ollama, home=home)
    ollama.remove_model("all-minilm")
    done = run_cli("search", QUERY, "--store", "mini", ollama_url=ollama.url, home=home)
    assert done.returncode == 1 and done.stdout == ""
    assert "Store 'mini' was built with the embedding model 'all-minilm'" in done.stderr
    assert "ollama pull all-minilm" in done.stderr
    assert "archivist ingest PATH --store mini --reindex" in done.stderr
    assert "--embed-model" not in done.stderr and "Traceback" not in done.stderr

    doctor = run_cli("doctor", ollama_url=ollama.url, home=home)
    assert doctor.returncode == 1
    assert "✗ embedding model 'all-minilm' of store mini: The model 'all-minilm' is not" in (
        doctor.stdout
    )
    assert "→ Pull it with `ollama pull all-minilm`: a store is searched with the model" in (
        doctor.stdout
    )


def test_ingesting_with_another_model_names_the_stores_model_and_its_own_dimension(ollama, home):
    cli("ingest", str(SHOP), "--store", "shop", ollama=ollama, home=home)
    done = run_cli(
        "ingest",
        str(SHOP),
        "--store",
        "shop",
        "--embed-model",
        "all-minilm",
        ollama_url=ollama.url,
        home=home,
    )
    assert done.returncode == 1
    assert (
        "Store 'shop' was built with embedding model 'nomic-embed-text' (768 dimensions), "
        "but 'all-minilm' is configured." in done.stderr
    )
    # all-minilm has 384 dimensions: the message must not pin the store's 768 on it.
    assert "'all-minilm' (768" not in done.stderr
    assert "--embed-model nomic-embed-text" in done.stderr and "--reindex" in done.stderr
