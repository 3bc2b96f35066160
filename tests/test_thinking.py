"""Thinking models: --think/--no-think, reasoning hidden unless --show-thinking."""

from conftest import cli
from fake_ollama import ModelSpec


def test_reasoning_is_hidden_by_default_and_shown_on_request(ollama, home, store):
    ollama.add_model(ModelSpec("qwen3:4b", ["completion", "tools", "thinking"]))
    hidden = cli("chat", "--store", store, "-m", "qwen3:4b", stdin="hi\n", ollama=ollama, home=home)
    assert hidden.stdout.startswith("Hello") and "The user asks" not in hidden.stdout
    assert ollama.requests_to("/api/chat")[-1]["think"] is True

    shown = cli(
        "chat", "--store", store, "-m", "qwen3:4b", "--show-thinking", stdin="hi\n",
        ollama=ollama, home=home,
    )  # fmt: skip
    assert shown.stdout.splitlines()[:2] == [
        "Thinking: The user asks: hi",
        "Hello! Ask me anything about the knowledge base.",
    ]

    cli("ask", "hi", "--store", store, "-m", "qwen3:4b", "--no-think", ollama=ollama, home=home)
    assert ollama.requests_to("/api/chat")[-1]["think"] is False

    # A model that cannot think is never sent `think`: Ollama would refuse the request.
    plain = cli("chat", "--store", store, "--think", stdin="hi\n", ollama=ollama, home=home)
    assert "qwen2.5:3b has no thinking mode" in plain.stderr
    assert "think" not in ollama.requests_to("/api/chat")[-1]
