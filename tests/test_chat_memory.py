"""Conversations kept in SQLite: `chat --resume` and `chat --thread ID`."""

import pytest
from conftest import run_cli

from archivist.tools.progress import Token

REFUND_Q = "How many days do I have to ask for a refund?"


def user_turns(request: dict) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] == "user"]


def test_a_resumed_conversation_remembers_the_earlier_turn(ollama, home, store):
    first = run_cli(
        "chat", "--store", store, stdin=f"{REFUND_Q}\n", ollama_url=ollama.url, home=home
    )
    assert first.returncode == 0, first.stderr
    earlier_answer = first.stdout.splitlines()[1]
    resumed = run_cli(
        "chat",
        "--store",
        store,
        "--resume",
        stdin="And what about shipping costs?\n",
        ollama_url=ollama.url,
        home=home,
    )
    assert resumed.returncode == 0, resumed.stderr
    assert "1 earlier question." in resumed.stdout + resumed.stderr
    last = ollama.requests_to("/api/chat")[-1]
    assert user_turns(last) == [REFUND_Q, "And what about shipping costs?"]
    assert any(
        m["role"] == "assistant" and m.get("content") == earlier_answer for m in last["messages"]
    )


def test_a_thread_id_names_a_conversation_to_continue(ollama, home, store):
    def chat(*args: str, question: str):
        done = run_cli(
            "chat", "--store", store, *args, stdin=question + "\n", ollama_url=ollama.url, home=home
        )
        assert done.returncode == 0, done.stderr
        return ollama.requests_to("/api/chat")[-1]

    chat("--thread", "shopping", question=REFUND_Q)
    assert user_turns(chat(question="Where is my parcel?")) == ["Where is my parcel?"]
    later = chat("--thread", "shopping", question="Can I pay by invoice?")
    assert user_turns(later) == [REFUND_Q, "Can I pay by invoice?"]
    both = run_cli("chat", "--resume", "--thread", "x", ollama_url=ollama.url, home=home)
    assert both.returncode == 1 and "--resume and --thread" in both.stderr


def test_a_stopped_turn_leaves_the_thread_ready_for_the_next_question(archivist, shop_store):
    from langgraph.checkpoint.memory import InMemorySaver

    from archivist.terminal.conversation import Conversation

    conversation = Conversation(archivist, [shop_store], InMemorySaver())

    def stop_at_first_token(event):
        if isinstance(event, Token):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        conversation.answer(REFUND_Q, stop_at_first_token)
    graph = conversation.setup.graph
    assert graph.get_state(conversation.config).next == ()
    result = conversation.answer("hi", lambda event: None)
    assert result["answer"].startswith("Hello") and result["tool_calls"] == []
    kinds = [m.type for m in conversation.messages()]
    assert kinds == ["human", "ai", "tool", "human", "ai"]
    stopped, answered = archivist.turn_log.recent()
    assert stopped["error"] == "stopped by the user" and answered["error"] is None


def test_a_question_too_long_for_the_context_is_refused_and_not_kept(archivist, shop_store, ollama):
    from langgraph.checkpoint.memory import InMemorySaver

    from archivist.terminal.conversation import Conversation
    from archivist.tools.errors import ArchivistError

    conversation = Conversation(archivist, [shop_store], InMemorySaver())
    conversation.answer("hi", lambda event: None)
    pasted = "lorem ipsum dolor " * 60_000  # about a megabyte
    with pytest.raises(ArchivistError, match="does not fit the model's context window"):
        conversation.answer(pasted, lambda event: None)
    assert [m.type for m in conversation.messages()] == ["human", "ai"]
    assert conversation.setup.graph.get_state(conversation.config).next == ()
    ollama.clear_requests()
    conversation.answer(REFUND_Q, lambda event: None)
    assert user_turns(ollama.requests_to("/api/chat")[0]) == ["hi", REFUND_Q]


def test_a_first_question_too_long_is_refused_and_the_thread_left_empty(
    archivist, shop_store, ollama
):
    from langgraph.checkpoint.memory import InMemorySaver

    from archivist.terminal.conversation import Conversation
    from archivist.tools.errors import ArchivistError

    conversation = Conversation(archivist, [shop_store], InMemorySaver())
    pasted = "lorem ipsum dolor " * 60_000
    with pytest.raises(ArchivistError, match="does not fit the model's context window"):
        conversation.answer(pasted, lambda event: None)
    assert conversation.messages() == []
    assert conversation.setup.graph.get_state(conversation.config).next == ()
    ollama.clear_requests()
    conversation.answer(REFUND_Q, lambda event: None)
    assert user_turns(ollama.requests_to("/api/chat")[0]) == [REFUND_Q]


def test_a_store_deleted_while_the_chat_is_open_is_named_and_the_chat_goes_on(
    archivist, shop_store, ollama
):
    from langgraph.checkpoint.memory import InMemorySaver

    from archivist.terminal.conversation import Conversation

    conversation = Conversation(archivist, [shop_store], InMemorySaver())
    conversation.answer(REFUND_Q, lambda event: None)
    archivist._client.delete_collection(shop_store)
    # The search says so, with the fix, and the turn ends with an answer: the chat goes on.
    result = conversation.answer(REFUND_Q, lambda event: None)
    [call] = result["tool_calls"]
    assert call["results"] == [] and "There is no store named 'shop_docs'" in call["error"]
    assert "archivist ingest PATH --store shop_docs" in call["error"]
    assert conversation.setup.graph.get_state(conversation.config).next == ()
