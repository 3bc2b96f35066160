"""Every turn of `ask` and `chat` is logged; `archivist logs` lists and shows them."""

import json

from conftest import cli, run_cli

REFUND_Q = "How many days do I have to ask for a refund?"


def test_logs_list_and_show_the_turns_of_ask_and_chat(ollama, home, store, monkeypatch):
    asked = json.loads(
        cli("ask", REFUND_Q, "--store", store, "--json", ollama=ollama, home=home).stdout
    )
    # Refused on every try: the turn fails.
    monkeypatch.setattr("archivist.ollama.transport.BACKOFF", 0.01)
    ollama.fail("/api/chat", 500, "llama runner process has terminated: exit status 2", 4)
    cli("chat", "--store", store, stdin=f"hi\n{REFUND_Q}\n", ollama=ollama, home=home)

    turns = json.loads(cli("logs", "--json", ollama=ollama, home=home).stdout)
    assert [(t["command"], t["question"]) for t in turns] == [
        ("ask", REFUND_Q), ("chat", "hi"), ("chat", REFUND_Q)
    ]  # fmt: skip
    first = turns[0]
    assert first["model"] == "qwen2.5:3b" and first["mode"] == "agent"
    assert first["stores"] == [store] and first["answer"] == asked["answer"]
    [call] = first["tool_calls"]
    assert call["name"] == "search_shop_docs" and call["args"] == {"query": REFUND_Q.rstrip("?")}
    assert [(r["chunk_id"], r["score"]) for r in call["results"]] == [
        (r["chunk_id"], r["score"]) for r in asked["tool_calls"][0]["results"]
    ]
    assert first["citations"] == asked["citations"]
    assert first["latency_ms"] == asked["latency_ms"]
    assert first["input_tokens"] > 0 and first["output_tokens"] > 0
    assert (first["input_tokens"], first["output_tokens"]) == (
        asked["usage"]["input_tokens"],
        asked["usage"]["output_tokens"],
    )
    # The failed chat turn is logged with its reason; the next one, in the same thread, works.
    failed, answered = turns[1], turns[2]
    assert "llama runner process has terminated" in failed["error"] and failed["answer"] is None
    assert answered["error"] is None and answered["thread_id"] == failed["thread_id"]

    listing = cli("logs", ollama=ollama, home=home).stdout.splitlines()
    assert len(listing) == 3
    assert listing[0].split()[0] == str(first["id"]) and "1 search" in listing[0]
    assert "error: " in listing[1]
    shown = cli("logs", "show", str(first["id"]), ollama=ollama, home=home).stdout
    assert f"Question: {REFUND_Q}" in shown
    assert f"chunk {call['results'][0]['chunk_id']}" in shown
    assert f"Answer: {asked['answer']}" in shown
    assert f"tokens: {first['input_tokens']} in, {first['output_tokens']} out" in shown
    by_option = json.loads(
        cli("logs", "--id", str(first["id"]), "--json", ollama=ollama, home=home).stdout
    )
    assert by_option == first
    missing = run_cli("logs", "show", "99", ollama_url=ollama.url, home=home)
    assert missing.returncode == 1 and "No turn 99" in missing.stderr


def test_an_empty_log_says_where_turns_come_from(ollama, home):
    assert "No turns logged yet" in cli("logs", ollama=ollama, home=home).stdout


def test_max_steps_limits_the_searches_of_a_turn(ollama, home, store):
    search = {"tool_calls": [{"name": "search_shop_docs", "arguments": {"query": "refund"}}]}
    ollama.script("qwen2.5:3b", search, search, {"content": "From what I found: 30 days [1]."})
    args = ("ask", REFUND_Q, "--store", store, "--max-steps", "1", "--json")
    result = json.loads(cli(*args, ollama=ollama, home=home).stdout)
    assert len(result["tool_calls"]) == 1
    assert result["answer"] == "From what I found: 30 days [1]."
    assert "search limit" in ollama.requests_to("/api/chat")[-1]["messages"][-1]["content"]
