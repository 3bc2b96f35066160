"""The chat model's /api/show is sent as a command starts, and its answer used once."""

import ollama as ollama_client
import pytest
from conftest import SHOP, run_cli

from archivist.failures import explain
from archivist.ollama import Ollama
from archivist.settings import Settings


def test_show_uses_the_prefetched_answer_without_asking_again(ollama, settings):
    Ollama(settings).show_soon("qwen2.5:3b")
    info = Ollama(settings).show("qwen2.5:3b")
    assert info.tools and info.context_length
    assert ollama.requests_to("/api/show") == [{"model": "qwen2.5:3b"}]
    assert info == Ollama(settings).show("qwen2.5:3b")  # the answer is taken once
    assert len(ollama.requests_to("/api/show")) == 2


def test_a_failed_prefetch_leaves_the_error_to_show(ollama, settings):
    Ollama(settings).show_soon("missing-model")
    with pytest.raises(ollama_client.ResponseError) as raised:
        Ollama(settings).show("missing-model")
    assert raised.value.status_code == 404
    assert "ollama pull missing-model" in str(explain(raised.value, settings))


def test_ask_asks_about_the_chat_model_before_anything_else(ollama, home):
    run_cli("ingest", str(SHOP), "--store", "shop_docs", ollama_url=ollama.url, home=home)
    ollama.clear_requests()
    asked = run_cli("ask", "How long is the refund period?", ollama_url=ollama.url, home=home)
    assert asked.returncode == 0, asked.stderr
    assert ollama.requests[0]["path"] == "/api/show"
    assert ollama.requests[0]["body"] == {"model": "qwen2.5:3b"}
    assert len(ollama.requests_to("/api/show")) == 1


def test_missing_names_the_models_ollama_lacks_and_leaves_the_prefetch_to_show(ollama, settings):
    Ollama(settings).show_soon("qwen2.5:3b")
    assert Ollama(settings).missing(["qwen2.5:3b", "nope:7b", "nomic-embed-text"]) == ["nope:7b"]
    assert [r["model"] for r in ollama.requests_to("/api/show")] == [
        "qwen2.5:3b",
        "nope:7b",
        "nomic-embed-text",
    ]
    # The chat model's prefetched answer was looked at, not taken: the agent still gets it.
    assert Ollama(settings).show("qwen2.5:3b").tools
    assert len(ollama.requests_to("/api/show")) == 3


def test_missing_is_none_when_ollama_cannot_be_asked(settings):
    down = Settings(ollama_host="http://127.0.0.1:9", home=settings.home)
    assert Ollama(down).missing(["qwen2.5:3b"]) is None
