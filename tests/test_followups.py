"""Follow-up questions on the wire: their searches carry the conversation's subject.

The fake Ollama's scripted models copy the user's words into the tool call, as small models
do; asked to condense a follow-up (a structured request), the fake answers with the
follow-up's own content words, which add nothing, so the deterministic rule must do the work
unless a test scripts a real rewrite.
"""

import json

import pytest
from conftest import run_cli, write_files
from langgraph.checkpoint.memory import InMemorySaver

from archivist.agent.followup import is_followup, subject_terms, with_subject
from archivist.agent.turn import run_turn
from archivist.render import tool_line

MODEL = "qwen2.5:3b"
NO_TOOLS = "gemma-notools:1b"
DOCS = {
    "query-params.md": (
        "# Query parameters\n\n## Defaults\n\nDeclare a query parameter with a default value "
        "by giving the function argument a default: `skip: int = 0`.\n\n## Optional "
        "parameters\n\nTo make a query parameter optional, set its default to `None`: "
        "`q: str | None = None`.\n"
    ),
    "security.md": (
        "# Security\n\n## OAuth2\n\nOAuth2 with the password flow: how do I make the token "
        "optional? Pass `auto_error=False` to OAuth2PasswordBearer.\n"
    ),
    "zh/查询参数.md": (
        "# 查询参数\n\n## 默认值\n\n声明查询参数时，给函数参数一个默认值即可设置默认值，"
        "例如 skip: int = 0。\n\n## 可选参数\n\n把默认值设为 None，查询参数就是可选的。\n"
    ),
    "zh/安全.md": "# 安全性\n\n## OAuth2\n\n如何设置令牌的过期时间? 使用 OAuth2PasswordBearer。\n",
}
EN = ("How do I declare a query parameter with a default value?", "and how do I make it optional?")
ZH = ("如何声明查询参数?", "那如何设置默认值?")


@pytest.fixture
def docs(archivist, tmp_path):
    archivist.ingest([str(write_files(tmp_path / "docs", DOCS))], "docs")
    return "docs"


def conversation(archivist, model, questions, thread="t"):
    setup = archivist.agent(["docs"], model, checkpointer=InMemorySaver())
    return [run_turn(setup, question, thread) for question in questions]


def searched_with(ollama) -> list[str]:
    """The query texts the store was searched with, as the embedder received them."""
    return [
        text.removeprefix("search_query: ")
        for body in ollama.requests_to("/api/embed")
        for text in body["input"]
        if text.startswith("search_query: ")
    ]


def condense_requests(ollama) -> list[dict]:
    return [
        body
        for body in ollama.requests_to("/api/chat")
        if (body.get("format") or {}).get("title") == "Standalone"
    ]


@pytest.mark.parametrize("model", [MODEL, NO_TOOLS])
def test_a_follow_up_is_searched_with_the_earlier_subject(archivist, docs, ollama, model):
    first, second = conversation(archivist, model, EN)
    [call] = second["tool_calls"]
    query = call["args"]["query"]
    assert "query parameter" in query and "optional" in query
    assert call["condensed_from"].startswith("and how do I make it optional")
    assert searched_with(ollama)[-1] == query  # the store was searched with it
    assert call["results"][0]["source"] == "query-params.md"
    # One short request condensed the follow-up; the first turn, without history, none.
    [condense] = condense_requests(ollama)
    assert EN[0] in condense["messages"][-1]["content"]
    assert "condensed_from" not in first["tool_calls"][0]
    assert second["usage"]["condense_calls"] == 1 and first["usage"]["condense_calls"] == 0


@pytest.mark.parametrize("model", [MODEL, NO_TOOLS])
def test_a_chinese_follow_up_is_searched_with_the_earlier_subject(archivist, docs, ollama, model):
    _, second = conversation(archivist, model, ZH)
    [call] = second["tool_calls"]
    assert "查询参数" in call["args"]["query"] and "默认值" in call["args"]["query"]
    assert searched_with(ollama)[-1] == call["args"]["query"]
    assert call["results"][0]["source"] == "zh/查询参数.md"


def test_the_models_standalone_question_is_what_is_searched(archivist, docs, ollama):
    setup = archivist.agent(["docs"], MODEL, checkpointer=InMemorySaver())
    run_turn(setup, EN[0], "t")
    copied = {"name": "search_docs", "arguments": {"query": "and how do I make it optional"}}
    rewrite = {"content": json.dumps({"query": "optional query parameter"})}
    ollama.script(MODEL, {"tool_calls": [copied]}, rewrite)
    [call] = run_turn(setup, EN[1], "t")["tool_calls"]
    assert call["args"]["query"] == "optional query parameter"
    assert searched_with(ollama)[-1] == "optional query parameter"


@pytest.mark.parametrize("reply", ["not json", json.dumps({"query": ""}), json.dumps({"q": 1})])
def test_a_useless_condensing_reply_leaves_the_rule_to_do_it(archivist, docs, ollama, reply):
    setup = archivist.agent(["docs"], MODEL, checkpointer=InMemorySaver())
    run_turn(setup, EN[0], "t")
    copied = {"name": "search_docs", "arguments": {"query": "and how do I make it optional"}}
    ollama.script(MODEL, {"tool_calls": [copied]}, {"content": reply})
    result = run_turn(setup, EN[1], "t")
    [call] = result["tool_calls"]
    assert "query parameter" in call["args"]["query"]
    assert call["results"][0]["source"] == "query-params.md"
    assert result["answer"]  # the turn went on


def test_a_change_of_topic_keeps_its_own_words(archivist, docs, ollama):
    question = "What does OAuth2PasswordBearer need for the password flow?"
    _, second = conversation(archivist, MODEL, [EN[0], question])
    [call] = second["tool_calls"]
    assert call["args"]["query"] == question.rstrip("?")
    assert "condensed_from" not in call
    assert call["results"][0]["source"] == "security.md"


def test_a_search_the_model_worded_itself_is_left_alone(archivist, docs, ollama):
    setup = archivist.agent(["docs"], MODEL, checkpointer=InMemorySaver())
    run_turn(setup, EN[0], "t")
    own = {"name": "search_docs", "arguments": {"query": "optional parameter None"}}
    ollama.script(MODEL, {"tool_calls": [own]})
    [call] = run_turn(setup, EN[1], "t")["tool_calls"]
    assert call["args"]["query"] == "optional parameter None" and "condensed_from" not in call
    assert not condense_requests(ollama)


def test_the_chats_search_line_shows_the_query_searched(archivist, docs, ollama, home):
    archivist.close()
    result = run_cli(
        "chat", "--store", "docs", ollama_url=ollama.url, home=home,
        stdin="\n".join([*EN, *ZH]) + "\n",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stdout.splitlines() if line.startswith("search_docs(")]
    searched = searched_with(ollama)
    assert len(lines) == 4 and len(searched) == 4
    for line, query in zip(lines, searched, strict=True):
        assert line.startswith(f'search_docs("{query}")')
    assert "query parameter" in lines[1] and "查询参数" in lines[3]


def test_the_rule_adds_the_subject_to_follow_ups_only():
    earlier = [EN[0]]
    assert with_subject("Why?", earlier) == "Why declare query parameter default value"
    assert with_subject("What is the warranty on tents?", earlier) == (
        "What is the warranty on tents?"
    )
    assert is_followup("它的默认值呢?") and is_followup("what about path parameters?")
    assert not is_followup("退货政策是什么?") and subject_terms("退货政策是什么?") == ["退货政策"]
    # The subject was set where a question last stood alone: a chain of follow-ups keeps it.
    chain = [EN[0], "and how do I make it optional?"]
    assert "query parameter" in with_subject("and required?", chain)


def grade_questions(ollama) -> list[str]:
    """The `Question:` line of each grading request."""
    return [
        body["messages"][-1]["content"].splitlines()[0]
        for body in ollama.requests_to("/api/chat")
        if (body.get("format") or {}).get("title") == "Grades"
    ]


@pytest.mark.parametrize("model", [MODEL, NO_TOOLS])
def test_a_graded_follow_up_is_judged_as_its_standalone_question(archivist, docs, ollama, model):
    setup = archivist.agent(["docs"], model, checkpointer=InMemorySaver(), grade=True)
    run_turn(setup, EN[0], "t")
    [call, *_] = run_turn(setup, EN[1], "t")["tool_calls"]
    # Alone, "and how do I make it optional?" leaves the grader guessing what "it" is.
    assert "query parameter" in grade_questions(ollama)[-1]
    assert "grading_error" not in call
    kept = [r["source"] for r in call["results"] if r["n"] in call["kept"]]
    assert kept[0] == "query-params.md"


def test_a_grading_reply_cut_short_keeps_the_verdicts_it_gave(archivist, docs, ollama):
    # A small model unsure of an unclear question writes a few verdicts, then whitespace until
    # the token limit: the JSON never closes. Those verdicts count; it is not "grading failed".
    setup = archivist.agent(["docs"], MODEL, checkpointer=InMemorySaver(), grade=True)
    run_turn(setup, EN[0], "t")
    copied = {"name": "search_docs", "arguments": {"query": "and how do I make it optional"}}
    standalone = {"content": json.dumps({"query": "optional query parameter"})}
    cut = '{"grades": [{"n": 1, "relevant": true}, {"relevant": false, "n": 2}' + " \n" * 200
    ollama.script(MODEL, {"tool_calls": [copied]}, standalone, {"content": cut})
    result = run_turn(setup, EN[1], "t")
    [call] = result["tool_calls"]
    assert "grading_error" not in call
    assert call["grades"] == [{"n": 1, "relevant": True}, {"n": 2, "relevant": False}]
    assert 2 not in call["kept"] and 1 in call["kept"]
    assert "grading failed" not in tool_line(call) and "relevant" in tool_line(call)


def test_the_benchmarks_follow_ups_get_a_subject_and_its_topic_changes_keep_their_words():
    import sys

    from conftest import ROOT

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import followups

    for first, second, _ in followups.FOLLOW_UPS:
        assert with_subject(second, [first]) != second, second
    for first, second, _ in followups.TOPIC_CHANGES:
        assert with_subject(second, [first]) == second, second
