"""Agentic retrieval against the fake Ollama: grading, rewriting, the round limit, failures.

The fake's chat model is scripted turn by turn here: its tool calls, the grader's verdicts and
the rewriter's queries (structured output: JSON in the reply's content), so each test knows
exactly which passages are relevant and asserts on what reaches the model for its answer.
"""

import json
import re

import pytest
from conftest import run_cli
from fake_ollama import NOT_FOUND_REPLY, structured_policy

from archivist.agent.grading import Grader, assemble, edges_first
from archivist.agent.graph import build_agent, build_retrieve_then_answer
from archivist.agent.retrieval import make_retrieval_tool
from archivist.agent.setup import AgentSetup
from archivist.agent.turn import run_turn
from archivist.app import Archivist
from archivist.ollama import Ollama
from archivist.render import tool_line
from archivist.tools.progress import Note, Searched, Token
from archivist.tools.store import KnowledgeStore
from archivist.turnlog import details

MODEL = "qwen2.5:3b"
NO_TOOLS = "gemma-notools:1b"
REFUND_Q = "How many days do I have to ask for a refund?"
_RESULT_N = re.compile(r'<result n="(\d+)"')


def search(query: str) -> dict:
    return {"tool_calls": [{"name": "search_shop_docs", "arguments": {"query": query}}]}


def grades(*relevant: int, among: range) -> dict:
    verdicts = [{"n": n, "relevant": n in relevant} for n in among]
    return {"content": json.dumps({"grades": verdicts})}


def rewrite(*queries: str) -> dict:
    return {"content": json.dumps({"queries": list(queries)})}


def shown_numbers(text: str) -> list[int]:
    return [int(n) for n in _RESULT_N.findall(text)]


def chats(ollama) -> list[dict]:
    return ollama.requests_to("/api/chat")


def kinds(ollama) -> list[str]:
    """What each chat request was: grading, rewriting, or a plain chat turn."""
    names = []
    for body in chats(ollama):
        properties = (body.get("format") or {}).get("properties", {})
        names.append("grade" if "grades" in properties else "rewrite" if properties else "chat")
    return names


@pytest.fixture
def tool(archivist, shop_store):
    return make_retrieval_tool(KnowledgeStore(archivist._client, shop_store), archivist.embeddings)


def agent(settings, tool, max_rewrites: int = 2):
    chat = Ollama(settings).chat_model(MODEL, temperature=0)
    graph = build_agent(chat, [tool], "system", grader=Grader(chat, max_rewrites))
    return AgentSetup(graph, "agent", MODEL, [tool.name.removeprefix("search_")], grade=True)


def rta(settings, tool, max_rewrites: int = 2):
    chat = Ollama(settings).chat_model(NO_TOOLS, temperature=0)
    graph = build_retrieve_then_answer(chat, [tool], "system", grader=Grader(chat, max_rewrites))
    stores = [tool.name.removeprefix("search_")]
    return AgentSetup(graph, "retrieve-then-answer", NO_TOOLS, stores, grade=True)


def test_irrelevant_passages_never_reach_the_agents_answer(settings, tool, ollama):
    ollama.script(MODEL, search("refund"), grades(2, 4, among=range(1, 6)))
    result = run_turn(agent(settings, tool), REFUND_Q)

    [call] = result["tool_calls"]
    assert call["grades"] == [{"n": n, "relevant": n in (2, 4)} for n in range(1, 6)]
    assert call["kept"] == [2, 4] and call["shown"] == [2, 4]
    assert [r["n"] for r in call["results"]] == [1, 2, 3, 4, 5]  # the trajectory keeps all
    assert kinds(ollama) == ["chat", "grade", "chat"]
    grading, answering = chats(ollama)[1], chats(ollama)[2]
    # The grader saw every passage, numbered, with the user's question, in one request.
    assert shown_numbers(grading["messages"][-1]["content"]) == [1, 2, 3, 4, 5]
    assert f"Question: {REFUND_Q}" in grading["messages"][-1]["content"]
    assert grading["format"]["properties"]["grades"]["type"] == "array"
    # The model answering saw only the relevant ones, under their own numbers.
    reply = answering["messages"][-1]
    assert reply["role"] == "tool" and shown_numbers(reply["content"]) == [2, 4]
    texts = {r["n"]: r["text"][:40] for r in call["results"]}
    assert texts[1] not in reply["content"] and texts[2] in reply["content"]
    assert result["answer"].endswith("[2]") and result["citations"][0]["n"] == 2
    assert result["usage"]["model_calls"] == 3 and result["usage"]["grade_calls"] == 1


def test_retrieve_then_answer_drops_irrelevant_passages_and_orders_the_rest(settings, tool, ollama):
    ollama.script(NO_TOOLS, grades(1, 2, 3, 5, among=range(1, 6)))
    result = run_turn(rta(settings, tool), REFUND_Q)
    [call] = result["tool_calls"]
    assert call["kept"] == [1, 2, 3, 5]
    # Most relevant first and last, the least relevant in the middle.
    assert call["shown"] == [1, 3, 5, 2]
    assert kinds(ollama) == ["grade", "chat"]
    request = chats(ollama)[-1]["messages"][-1]["content"]
    assert shown_numbers(request) == [1, 3, 5, 2]
    assert call["results"][3]["text"][:40] not in request
    assert result["citations"][0]["n"] == 1


def test_a_missed_search_is_rewritten_and_the_new_search_finds_the_passage(settings, tool, ollama):
    ollama.script(
        MODEL,
        search("how long to change my mind"),
        grades(among=range(1, 6)),
        rewrite("refund within 30 days of delivery"),
    )  # the second search is graded by the fake's own policy
    question = "I changed my mind. How long is the window to get my money back?"
    result = run_turn(agent(settings, tool), question)
    first, second = result["tool_calls"]
    assert first["kept"] == [] and "rewritten_from" not in first
    assert second["args"] == {"query": "refund within 30 days of delivery"}
    assert second["rewritten_from"] == "how long to change my mind"
    assert [r["n"] for r in second["results"]] == [6, 7, 8, 9, 10]
    assert second["results"][0]["source"] == "refund.md" and 6 in second["kept"]
    assert kinds(ollama) == ["chat", "grade", "rewrite", "grade", "chat"]
    rewriting = chats(ollama)[2]["messages"][-1]["content"]
    assert '"how long to change my mind"' in rewriting
    reply = chats(ollama)[-1]["messages"][-1]["content"]
    assert 'No passage found for "how long to change my mind" is relevant' in reply
    assert 'Searched again for "refund within 30 days of delivery"' in reply
    assert set(shown_numbers(reply)) == set(second["kept"])
    assert result["answer"].endswith("[6]")
    [citation] = result["citations"]
    assert citation["n"] == 6 and citation["source"] == "refund.md"
    assert citation["chunk_id"] == second["results"][0]["chunk_id"]
    assert citation["heading"] == second["results"][0]["heading"]
    assert result["usage"]["rewrite_calls"] == 1 and result["usage"]["grade_calls"] == 2


def test_retrieve_then_answer_gets_a_second_chance(settings, tool, ollama):
    # The search proposed is answered by one passage of refund.md, which speaks of money.
    ollama.script(NO_TOOLS, grades(among=range(1, 6)), rewrite("when the refund money arrives"))
    result = run_turn(rta(settings, tool), "Money back?")
    first, second = result["tool_calls"]
    assert first["args"] == {"query": "Money back?"} and first["shown"] == []
    assert second["rewritten_from"] == "Money back?" and second["kept"]
    request = chats(ollama)[-1]["messages"][-1]["content"]
    assert set(shown_numbers(request)) == set(second["kept"])
    assert result["answer"].endswith(f"[{min(second['kept'])}]")


@pytest.mark.parametrize("max_rewrites", [0, 2])
def test_the_round_limit_is_respected(settings, tool, ollama, max_rewrites):
    misses = [grades(among=range(1 + 5 * i, 6 + 5 * i)) for i in range(max_rewrites + 1)]
    rewrites = [rewrite(f"attempt {i}") for i in range(1, max_rewrites + 1)]
    turns = [misses[0]]
    for miss, proposal in zip(misses[1:], rewrites, strict=True):
        turns += [proposal, miss]
    ollama.script(MODEL, search("the moon landing"), *turns)
    embeds_before = len(ollama.requests_to("/api/embed"))
    result = run_turn(agent(settings, tool, max_rewrites), "Who landed on the moon?")
    searches = result["tool_calls"]
    assert [c["args"]["query"] for c in searches] == [
        "the moon landing",
        *(f"attempt {i}" for i in range(1, max_rewrites + 1)),
    ]
    assert len(ollama.requests_to("/api/embed")) - embeds_before == max_rewrites + 1
    assert kinds(ollama) == ["chat", *(["grade", "rewrite"] * max_rewrites), "grade", "chat"]
    reply = chats(ollama)[-1]["messages"][-1]["content"]
    assert "None of the passages found is relevant" in reply and shown_numbers(reply) == []
    assert result["answer"] == NOT_FOUND_REPLY and result["citations"] == []
    assert result["usage"]["model_calls"] == 2 + (max_rewrites + 1) + max_rewrites


@pytest.mark.parametrize(
    "bad",
    ["Sure! Here are my verdicts: 1 yes, 2 no", '{"grades": "all of them"}', '{"verdicts": []}'],
    ids=["not-json", "wrong-type", "wrong-shape"],
)
def test_an_unreadable_grade_keeps_every_passage_and_is_recorded(settings, tool, ollama, bad):
    ollama.script(MODEL, search("refund"), {"content": bad})
    result = run_turn(agent(settings, tool), REFUND_Q)
    [call] = result["tool_calls"]
    assert call["grading_error"] and call["grades"] == []
    assert call["kept"] == [1, 2, 3, 4, 5]
    assert shown_numbers(chats(ollama)[-1]["messages"][-1]["content"]) == [1, 3, 5, 4, 2]
    assert result["answer"].endswith("[1]")
    assert "grading failed, all kept" in tool_line(call)


def test_an_unreadable_rewrite_stops_the_rounds_in_both_modes(settings, tool, ollama):
    ollama.script(MODEL, search("moon"), grades(among=range(1, 6)), {"content": "{oops"})
    result = run_turn(agent(settings, tool), "Moon?")
    [call] = result["tool_calls"]
    assert call["kept"] == [] and call["rewrite_error"]
    assert kinds(ollama) == ["chat", "grade", "rewrite", "chat"]
    assert result["answer"] == NOT_FOUND_REPLY

    ollama.clear_requests()
    ollama.script(NO_TOOLS, grades(among=range(1, 6)), {"content": '{"queries": []}'})
    result = run_turn(rta(settings, tool), "Moon?")
    [call] = result["tool_calls"]
    assert call["rewrite_error"] and kinds(ollama) == ["grade", "rewrite", "chat"]
    assert "None of the passages found is relevant" in chats(ollama)[-1]["messages"][-1]["content"]


def test_a_passage_found_twice_in_a_turn_is_shown_once(settings, tool, ollama):
    ollama.script(
        MODEL,
        search("refund"),
        grades(1, 2, among=range(1, 6)),
        search("refund"),
        grades(6, 7, 8, among=range(6, 11)),
        {"content": "Thirty days [1]."},
    )
    result = run_turn(agent(settings, tool), REFUND_Q)
    first, second = result["tool_calls"]
    assert first["results"][0]["chunk_id"] == second["results"][0]["chunk_id"]
    assert second["kept"] == [6, 7, 8] and second["shown"] == [8]
    reply = chats(ollama)[-1]["messages"][-1]["content"]
    assert shown_numbers(reply) == [8]
    assert "[6] is [1], [7] is [2]" in reply
    assert result["citations"][0]["n"] == 1


def test_edges_first_and_assembly_within_a_budget():
    ranked = [{"n": n, "chunk_id": f"c{n}", "text": "x " * 40} for n in range(1, 6)]
    assert [r["n"] for r in edges_first(ranked)] == [1, 3, 5, 4, 2]
    assert [r["n"] for r in edges_first(ranked[:2])] == [1, 2]

    def render(passages):
        return "".join(p["text"] for p in passages)

    shown = {"c2": 9}
    chosen = assemble(ranked, shown, budget=65, render=render)  # 20 tokens a passage
    assert chosen.repeats == {2: 9}
    assert [r["n"] for r in chosen.passages] == [1, 4, 3]  # 5 cut, being the least relevant
    assert chosen.cut == 1
    assert shown == {"c2": 9, "c1": 1, "c3": 3, "c4": 4}


def test_the_fake_answers_structured_requests_from_the_schema_and_the_prompt():
    schema = {
        "$defs": {
            "Verdict": {
                "type": "object",
                "properties": {"n": {"type": "integer"}, "relevant": {"type": "boolean"}},
            }
        },
        "type": "object",
        "properties": {"grades": {"type": "array", "items": {"$ref": "#/$defs/Verdict"}}},
    }
    prompt = (
        "Question: How do I get my money back for a broken tent?\n\n"
        '<result n="4" source="a.md" score="0.5">Refunds for damaged goods.</result>\n'
        '<result n="7" source="b.md" score="0.4">Tents are made of nylon.</result>'
    )
    reply = structured_policy(schema, [{"role": "user", "content": prompt}])
    assert json.loads(reply["content"]) == {
        "grades": [{"n": 4, "relevant": True}, {"n": 7, "relevant": False}]
    }
    rewrite_schema = {"properties": {"queries": {"type": "array", "items": {"type": "string"}}}}
    reply = structured_policy(rewrite_schema, [{"role": "user", "content": prompt}])
    assert json.loads(reply["content"]) == {"queries": ["get refund damaged tent"]}


def test_ask_json_and_the_log_show_grades_and_rewrites(ollama, archivist, shop_store, home):
    archivist.close()  # the CLI opens the embedded store itself
    archivist_home = home
    ollama.script(
        MODEL,
        search("change of heart"),
        grades(among=range(1, 6)),
        rewrite("when the refund money arrives"),
    )
    result = run_cli(
        "ask", "Money back?", "--store", shop_store, "--grade", "--max-rewrites", "1", "--json",
        ollama_url=ollama.url, home=archivist_home,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    turn = json.loads(result.stdout)
    assert turn["grade"] is True
    first, second = turn["tool_calls"]
    assert set(first) >= {"name", "args", "results", "latency_ms", "grades", "kept", "shown"}
    assert second["rewritten_from"] == "change of heart" and second["kept"]
    assert turn["usage"]["grade_calls"] == 2 and turn["usage"]["rewrite_calls"] == 1

    text = run_cli("ask", "Money back?", "--grade", ollama_url=ollama.url, home=archivist_home)
    assert text.returncode == 0, text.stderr
    assert re.search(r'search_shop_docs\("Money back"\) · 5 results · \d relevant', text.stdout)

    logged = run_cli("logs", ollama_url=ollama.url, home=archivist_home)
    assert "2 searches (1 rewritten)" in logged.stdout
    shown = run_cli("logs", "show", "1", ollama_url=ollama.url, home=archivist_home)
    assert '↻ rewrote to "when the refund money arrives"' in shown.stdout
    assert "irrelevant" in shown.stdout and "relevant" in shown.stdout


def test_tool_lines_say_what_grading_did():
    call = {
        "name": "search_shop_docs",
        "args": {"query": "refund days"},
        "results": [{}] * 5,
        "latency_ms": 14.2,
        "grades": [],
        "kept": [1, 3],
        "grade_ms": 310.0,
    }
    assert tool_line(call) == (
        'search_shop_docs("refund days") · 5 results · 2 relevant · 14 ms + 310 ms grading'
    )
    rewritten = {**call, "args": {"query": "refund window"}, "rewritten_from": "refund days"}
    assert tool_line(rewritten).splitlines()[0] == '↻ rewrote to "refund window"'
    turn = {
        "id": 1, "at": "now", "command": "ask", "thread_id": None, "model": MODEL,
        "mode": "agent", "stores": ["shop_docs"], "question": "q", "answer": None,
        "tool_calls": [{**call, "results": [], "grading_error": "bad JSON"}], "citations": [],
        "invalid_citations": [], "notes": [], "latency_ms": 1, "input_tokens": None,
        "output_tokens": None, "error": None,
    }  # fmt: skip
    assert "grading failed (all kept): bad JSON" in details(turn)


def test_the_chat_does_not_stream_the_graders_json(archivist, shop_store, ollama):
    setup = archivist.agent([shop_store], grade=True)
    events: list[object] = []
    result = run_turn(setup, REFUND_Q, on_event=events.append)
    streamed = "".join(e.text for e in events if isinstance(e, Token))
    assert streamed == result["answer"] and "grades" not in streamed
    tools = [e.call for e in events if isinstance(e, Searched)]
    # A search is reported once graded; what its answer showed is settled after.
    assert tools == [{k: v for k, v in c.items() if k != "shown"} for c in result["tool_calls"]]
    assert "kept" in tools[0] and "shown" in result["tool_calls"][0]


def test_grading_follows_the_setting_and_a_thinking_model_grades_without_thinking(
    ollama, settings, archivist, shop_store
):
    from fake_ollama import ModelSpec

    archivist.close()
    ollama.add_model(ModelSpec("qwen3:4b", ["completion", "tools", "thinking"]))
    app = Archivist(settings.with_overrides(grade=True, max_rewrites=1))
    try:
        setup = app.agent([shop_store], "qwen3:4b")
        assert setup.grade
        run_turn(setup, REFUND_Q)
    finally:
        app.close()
    graded = [c for c in chats(ollama) if c.get("format")]
    answered = [c for c in chats(ollama) if not c.get("format")]
    assert graded and all(c.get("think") is False for c in graded)
    assert answered and all(c.get("think") is True for c in answered)


def test_eval_compares_each_model_with_and_without_grading(ollama, archivist, shop_store, tmp_path):
    archivist.close()
    dataset = tmp_path / "cases.jsonl"
    cases = [
        {"id": "refund", "question": REFUND_Q, "expect_tool": "search_shop_docs",
         "expect_sources": ["refund.md"]},
        {"id": "moon", "question": "Who first walked on the moon?"},
    ]  # fmt: skip
    dataset.write_text("".join(json.dumps(c) + "\n" for c in cases))
    out = tmp_path / "report"
    result = run_cli(
        "eval", str(dataset), "--store", shop_store, "-m", MODEL, "-m", NO_TOOLS,
        "--grade", "both", "--max-rewrites", "1", "--out", str(out), "--json",
        ollama_url=ollama.url, home=archivist.settings.home,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["grading"] == ["off", "on"] and report["max_rewrites"] == 1
    columns = [(m["label"], m["model"], m["grade"], m["mode"]) for m in report["models"]]
    assert columns == [
        (MODEL, MODEL, False, "agent"),
        (f"{MODEL}+grade", MODEL, True, "agent"),
        (NO_TOOLS, NO_TOOLS, False, "retrieve-then-answer"),
        (f"{NO_TOOLS}+grade", NO_TOOLS, True, "retrieve-then-answer"),
    ]
    plain, graded = report["models"][0]["metrics"], report["models"][1]["metrics"]
    # Per case: one grading call per search; the moon's search misses and is rewritten once.
    runs = {(r["label"], r["case_id"]): r for r in report["runs"]}
    moon = runs[(f"{MODEL}+grade", "moon")]
    assert [c["by"] for c in moon["tool_calls"]] == ["model", "grader"]
    assert moon["tool_calls"][1]["rewritten_from"] == "Who first walked on the moon"
    assert moon["usage"]["grade_calls"] == 2 and moon["usage"]["rewrite_calls"] == 1
    refund = runs[(f"{MODEL}+grade", "refund")]
    assert refund["tool_calls"][0]["kept"] and refund["usage"]["rewrite_calls"] == 0
    assert graded["grade_calls"] == 3 and graded["rewrite_calls"] == 1
    assert graded["model_calls"] == plain["model_calls"] + 4
    assert graded["searches"] == plain["searches"] + 1
    assert graded["passages_shown"] < plain["passages_shown"]
    assert graded["argument_validity"] == plain["argument_validity"] == 1.0
    assert report["models"][1]["support"]["argument_validity"] == 2  # rewrites are not the model's
    markdown = (out / "report.md").read_text()
    assert f"{MODEL}+grade (agent)" in markdown and "| grade_calls | 0 | 3 | 0 | 3 |" in markdown
    assert "| rewrite_calls | 0 | 1 | 0 | 1 |" in markdown


def test_passages_over_the_context_budget_lose_the_least_relevant(settings, tool, ollama):
    from archivist.agent.context import Window

    ollama.script(MODEL, search("refund"), grades(1, 2, 3, 4, 5, among=range(1, 6)))
    chat = Ollama(settings).chat_model(MODEL, temperature=0)
    window = Window(num_ctx=1024, answer=256)
    graph = build_agent(chat, [tool], "system", window=window, grader=Grader(chat))
    setup = AgentSetup(graph, "agent", MODEL, ["shop_docs"], grade=True)
    events: list[object] = []
    result = run_turn(setup, REFUND_Q, on_event=events.append)
    [call] = result["tool_calls"]
    assert call["kept"] == [1, 2, 3, 4, 5]
    kept = sorted(call["shown"])
    assert 0 < len(kept) < 5 and kept == list(range(1, len(kept) + 1))  # the best ones stay
    cut = 5 - len(kept)
    note = (
        f"To fit the 1024-token context window: left out the {cut} least relevant "
        f"passage{'' if cut == 1 else 's'} of this turn's search results."
    )
    assert note in result["notes"] and Note(note) in events
    reply = chats(ollama)[-1]["messages"][-1]["content"]
    assert sorted(shown_numbers(reply)) == kept


def test_the_chat_with_grade_shows_grades_and_keeps_its_thread(ollama, archivist, shop_store, home):
    archivist.close()
    result = run_cli(
        "chat", "--store", shop_store, "--grade", "--max-rewrites", "0",
        ollama_url=ollama.url, home=home,
        stdin="How many days do I have to ask for a refund?\nWho walked on the moon first?\n",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    refund = next(line for line in lines if line.startswith('search_shop_docs("How many'))
    assert re.search(r"· 5 results · [1-5] relevant · \d+ ms \+ \d+ ms grading$", refund)
    moon = next(line for line in lines if line.startswith('search_shop_docs("Who walked'))
    assert "· 0 relevant ·" in moon and "↻" not in result.stdout
    assert NOT_FOUND_REPLY in result.stdout
    formats = [c["format"]["title"] for c in chats(ollama) if c.get("format")]
    # The second question, asked with history, was also condensed (once) before its search.
    assert formats == ["Grades", "Standalone", "Grades"]


def test_a_search_that_found_nothing_is_rewritten_without_a_grading_call(settings, ollama):
    from archivist.agent.retrieval import SearchResult
    from archivist.agent.search_tool import search_tool
    from archivist.tools.search import SearchRequest

    asked: list[str] = []

    def search_nothing(query: str, request: SearchRequest) -> SearchResult:
        asked.append(query)
        return SearchResult(query, request, [])

    description = "Search the shop's documents."
    empty = search_tool("search_shop_docs", description, search_nothing, SearchRequest())
    ollama.script(MODEL, search("refund"), rewrite("money back"))
    result = run_turn(agent(settings, empty, 1), REFUND_Q)
    assert asked == ["refund", "money back"]
    assert kinds(ollama) == ["chat", "rewrite", "chat"]
    assert [(c["grades"], c["kept"]) for c in result["tool_calls"]] == [([], []), ([], [])]
    assert result["usage"]["grade_calls"] == 0 and result["answer"] == NOT_FOUND_REPLY
