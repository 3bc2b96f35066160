"""The in-process model doubles answer as the fake Ollama does, so either builds the same store."""

import pytest
from conftest import SHOP, SHOP_DESCRIPTION, copy_home
from fake_models import FakeModels, install
from fake_ollama import GREETING_REPLY
from test_sample_home import contents

from archivist.app import Archivist
from archivist.settings import Settings
from archivist.tools.errors import ArchivistError

REFUND_Q = "How many days do I have to ask for a refund?"


def test_an_ingest_with_the_in_process_models_stores_what_the_fake_ollama_stored(
    fake_models, archivist, sample_home, tmp_path
):
    archivist.ingest([str(SHOP)], "shop_docs", description=SHOP_DESCRIPTION)
    built = contents(archivist, "shop_docs")
    copy = tmp_path / "copy"
    copy_home(sample_home, copy)
    over_http = Archivist(Settings(ollama_host="http://127.0.0.1:9", home=copy))
    try:
        assert contents(over_http, "shop_docs") == built
    finally:
        over_http.close()
    assert len(built[0]) > 10 and fake_models.embed_requests()


def without_times(turn: dict) -> dict:
    """A turn without what the clock decides."""
    if isinstance(turn, dict):
        return {k: without_times(v) for k, v in turn.items() if not k.endswith("_ms")}
    if isinstance(turn, list):
        return [without_times(v) for v in turn]
    return turn


def test_a_question_gets_the_turn_the_fake_ollama_gives(ollama, archivist, shop_store, monkeypatch):
    over_http = archivist.ask(REFUND_Q, [shop_store], grade=True)
    sent_over_http = ollama.requests_to("/api/chat")
    archivist.close()
    fake = install(FakeModels(), monkeypatch)
    in_process = Archivist(archivist.settings)
    try:
        turn = in_process.ask(REFUND_Q, [shop_store], grade=True)
    finally:
        in_process.close()
    assert without_times(turn) == without_times(over_http)
    [call] = turn["tool_calls"]
    assert call["name"] == "search_shop_docs" and len(call["results"]) == 5
    # What the model was sent reads as the fake Ollama records it.
    sent = fake.chat_requests()
    assert [[m["role"] for m in r["messages"]] for r in sent] == [
        [m["role"] for m in r["messages"]] for r in sent_over_http
    ]
    assert [m.get("content") or "" for m in sent[-1]["messages"]] == [
        m.get("content") or "" for m in sent_over_http[-1]["messages"]
    ]
    assert [("format" in r, bool(r["tools"])) for r in sent] == [
        ("format" in r, bool(r.get("tools"))) for r in sent_over_http
    ]


def test_scripted_turns_come_first_and_small_talk_gets_no_search(
    fake_models, archivist, shop_store
):
    fake_models.script("qwen2.5:3b", {"content": "Scripted."})
    assert archivist.ask(REFUND_Q, [shop_store])["answer"] == "Scripted."
    turn = archivist.ask("hi", [shop_store])
    assert turn["tool_calls"] == [] and turn["answer"] == GREETING_REPLY


def test_a_model_that_is_not_served_is_named_with_its_fix(fake_models, archivist, shop_store):
    fake_models.remove_model("qwen2.5:3b")
    with pytest.raises(ArchivistError, match="ollama pull qwen2.5:3b"):
        archivist.ask(REFUND_Q, [shop_store])


def test_a_model_without_tools_answers_retrieve_then_answer(fake_models, archivist, shop_store):
    turn = archivist.ask(REFUND_Q, [shop_store], model="gemma-notools:1b")
    assert turn["mode"] == "retrieve-then-answer" and turn["answer"].endswith("[1]")
    assert (
        "tools" not in fake_models.chat_requests()[0] or not fake_models.chat_requests()[0]["tools"]
    )
