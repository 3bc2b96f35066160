"""A home written by the previous release (0.1.0) opens and answers with this one.

tests/data/release-0.1.0-home.tar.xz is the ARCHIVIST_HOME that release made, at commit
68415d3, with `python -m agent ingest examples/shop --store shop_docs --description "policies
of an outdoor shop"` against tests/fake_ollama.py (the same deterministic embeddings as here).
"""

import json
import tarfile

from conftest import ROOT, run_cli

ARCHIVE = ROOT / "tests" / "data" / "release-0.1.0-home.tar.xz"


def released_home(home):
    home.mkdir(parents=True, exist_ok=True)
    with tarfile.open(ARCHIVE) as archive:
        archive.extractall(home, filter="data")
    return home


QUESTION = "How many days do I have to ask for a refund?"


def test_a_store_of_the_previous_release_is_listed_searched_and_answers(ollama, home, tmp_path):
    released_home(home)
    stores = run_cli("stores", "--json", ollama_url=ollama.url, home=home)
    assert stores.returncode == 0, stores.stderr
    [listed] = json.loads(stores.stdout)
    assert listed["store"] == "shop_docs" and listed["chunks"] == 58
    assert listed["description"] == "policies of an outdoor shop"

    found = run_cli(
        "search", QUESTION, "--store", "shop_docs", "--json", ollama_url=ollama.url, home=home
    )
    assert found.returncode == 0, found.stderr
    # The same passages, ids and scores as a store this release ingests from the same files.
    fresh = tmp_path / "fresh"
    ingested = run_cli(
        "ingest", str(ROOT / "examples" / "shop"), "--store", "shop_docs",
        ollama_url=ollama.url, home=fresh,
    )  # fmt: skip
    assert ingested.returncode == 0, ingested.stderr
    again = run_cli(
        "search", QUESTION, "--store", "shop_docs", "--json", ollama_url=ollama.url, home=fresh
    )
    keys = ("source", "chunk_id", "text")
    old = [
        {k: r[k] for k in keys} | {"score": round(r["score"], 3)} for r in json.loads(found.stdout)
    ]
    new = [
        {k: r[k] for k in keys} | {"score": round(r["score"], 3)} for r in json.loads(again.stdout)
    ]
    assert old == new and len(old) == 5
    embeds_before_ask = len(ollama.requests_to("/api/embed"))

    asked = run_cli(
        "ask", QUESTION, "--store", "shop_docs", "--json", ollama_url=ollama.url, home=home
    )
    assert asked.returncode == 0, asked.stderr
    turn = json.loads(asked.stdout)
    assert turn["tool_calls"][0]["name"] == "search_shop_docs"
    assert turn["tool_calls"][0]["results"] and turn["citations"]
    # Answering embedded the query only: nothing stored was embedded again.
    asked_embeds = ollama.requests_to("/api/embed")[embeds_before_ask:]
    assert asked_embeds and all(len(r["input"]) == 1 for r in asked_embeds)


def test_re_ingesting_the_same_files_into_a_released_store_embeds_nothing(ollama, home):
    released_home(home)
    done = run_cli(
        "ingest", str(ROOT / "examples" / "shop"), "--store", "shop_docs", "--json",
        ollama_url=ollama.url, home=home,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert len(report["unchanged"]) == 10 and report["stored"] == []
    embedded = [r for r in ollama.requests_to("/api/embed") if len(r["input"]) > 1]
    assert embedded == []
