"""Reranking with an Ollama model's log-probabilities: the requests on the wire, the order
they give, how many run at once, and what a user is told when the model or server cannot."""

import json
import math
from dataclasses import replace

import ollama as ollama_client
import pytest
from conftest import run_cli
from fake_ollama import FakeOllama, ModelSpec, relevance
from ollama._types import TokenLogprob

from archivist.agent.rerank import Reranker
from archivist.app import Archivist
from archivist.ollama import Ollama, scoring
from archivist.render import tool_line
from archivist.settings import Settings, load_settings
from archivist.tools.errors import ArchivistError
from archivist.tools.search import SearchRequest

QUERY = "How long do I have to ask for a refund?"
RERANKER = "qwen2.5:3b"


def favouring(*texts: str):
    """A scorer that prefers the given passages, whatever the query."""
    return lambda query, passage: 0.9 if passage in texts else 0.2


def refunds_first(query: str, passage: str) -> float:
    return 0.9 if "refund" in passage.lower() else 0.2


def reranked_app(ollama: FakeOllama, home, **settings) -> Archivist:
    return Archivist(Settings(ollama_host=ollama.url, home=home, rerank_model=RERANKER, **settings))


def judgements(ollama: FakeOllama) -> list[dict]:
    return [b for b in ollama.requests_to("/api/chat") if b.get("logprobs")]


def test_the_top_candidates_are_scored_one_request_each_and_reordered(
    archivist, shop_store, ollama, home
):
    candidates = archivist.search(QUERY, shop_store, k=8)
    archivist.close()
    # The scorer prefers the search's last two candidates.
    ollama.score_with(favouring(candidates[6]["text"], candidates[7]["text"]))
    ollama.clear_requests()

    app = reranked_app(ollama, home, rerank_candidates=8)
    try:
        results = app.search(QUERY, shop_store, k=5)
    finally:
        app.close()

    # One check of the model, then one request per candidate: a yes/no question about the
    # query and one passage, one answer token, its top alternatives' log-probabilities.
    sent = judgements(ollama)
    assert len(sent) == 1 + len(candidates) == 9
    for body in sent:
        assert body["model"] == RERANKER and body["stream"] is False
        assert body["logprobs"] is True and body["top_logprobs"] == scoring.RERANK_TOP_LOGPROBS
        assert body["options"] == {"temperature": 0, "num_predict": 1}
        assert body["tools"] == [] and "think" not in body  # qwen2.5 cannot think
        assert [m["role"] for m in body["messages"]] == ["system", "user"]
    judged = [b["messages"][1]["content"] for b in sent[1:]]
    assert all(f"Query: {QUERY}\n" in prompt for prompt in judged)
    assert sorted(judged) == sorted(
        next(p for p in judged if c["text"].split("\n")[0] in p) for c in candidates
    )

    # The scorer's favourites come first, the search's order among equals; cut to k.
    assert results.reranked_by == RERANKER and results.rerank_ms > 0
    expected = [candidates[i] for i in (6, 7, 0, 1, 2)]
    assert [r["chunk_id"] for r in results] == [c["chunk_id"] for c in expected]
    assert [r["rank"] for r in results] == [1, 2, 3, 4, 5]
    assert [r["retrieval_rank"] for r in results] == [7, 8, 1, 2, 3]
    assert [r["rerank_score"] for r in results] == [0.9, 0.9, 0.2, 0.2, 0.2]


def test_at_most_the_parallel_bound_of_requests_run_at_once(shop_store, archivist, home):
    archivist.close()
    with FakeOllama(token_delay=0.05) as slow:
        app = reranked_app(slow, home, rerank_candidates=12, rerank_parallel=3)
        try:
            app.search(QUERY, shop_store, k=5)
        finally:
            app.close()
        assert len(judgements(slow)) == 1 + 12
        assert 2 <= slow.peak_chat_concurrency <= 3


def test_the_search_line_json_and_tool_records_show_the_reranking(shop_store, ollama, home):
    ollama.score_with(refunds_first)
    args = ("--rerank", RERANKER, "--rerank-candidates", "6")
    done = run_cli("search", QUERY, "-s", shop_store, *args, ollama_url=ollama.url, home=home)
    assert done.returncode == 0, done.stderr
    first = done.stdout.splitlines()[0]
    assert first.startswith(f"reranked by {RERANKER} · ") and first.endswith(" ms")
    assert "relevance 0.90" in done.stdout

    as_json = run_cli(
        "search", QUERY, "-s", shop_store, *args, "--json", ollama_url=ollama.url, home=home
    )
    results = json.loads(as_json.stdout)
    assert isinstance(results, list) and results[0]["rerank_score"] == 0.9
    assert "retrieval_rank" in results[0] and "reranked by" in as_json.stderr

    asked = run_cli(
        "ask", QUERY, "-s", shop_store, *args, "--json", ollama_url=ollama.url, home=home
    )
    assert asked.returncode == 0, asked.stderr
    [call] = json.loads(asked.stdout)["tool_calls"]
    assert call["rerank_model"] == RERANKER
    assert 0 < call["rerank_ms"] <= call["latency_ms"]
    assert call["results"][0]["rerank_score"] == 0.9
    line = tool_line(call)
    assert f"{call['latency_ms']:.0f} ms (reranking {call['rerank_ms']:.0f} ms)" in line


def test_the_setting_reranks_every_search_of_the_agent_and_the_retriever(
    archivist, shop_store, ollama, home, monkeypatch
):
    archivist.close()
    monkeypatch.setenv("ARCHIVIST_RERANK_MODEL", RERANKER)
    monkeypatch.setenv("ARCHIVIST_RERANK_CANDIDATES", "7")
    settings = load_settings()
    assert (settings.rerank_model, settings.rerank_candidates) == (RERANKER, 7)
    app = Archivist(settings.with_overrides(ollama_host=ollama.url))
    try:
        ollama.clear_requests()
        documents = app.retriever(shop_store).invoke(QUERY)
        assert len(judgements(ollama)) == 1 + 7
        assert len(documents) == 5
        assert all(0 <= d.metadata["rerank_score"] <= 1 for d in documents)
        assert [d.metadata["rank"] for d in documents] == [1, 2, 3, 4, 5]
        setup = app.agent([shop_store], "gemma-notools:1b")  # retrieve-then-answer
        from archivist.agent.turn import run_turn

        ollama.clear_requests()
        turn = run_turn(setup, QUERY)
        assert len(judgements(ollama)) == 7  # the model was checked once already
        assert turn["tool_calls"][0]["rerank_model"] == RERANKER
    finally:
        app.close()


def test_an_old_ollama_is_named_with_the_version_that_returns_logprobs(shop_store, home):
    with FakeOllama(version="0.12.6") as old:
        done = run_cli("search", QUERY, "-s", shop_store, "--rerank", RERANKER,
                       ollama_url=old.url, home=home)  # fmt: skip
        assert judgements(old), "the flags were sent; the old server ignored them"
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "Ollama 0.12.6" in done.stderr and "does not return log-probabilities" in done.stderr
    assert "Update Ollama to 0.12.11 or later" in done.stderr


def test_a_model_without_logprobs_a_missing_one_and_an_embedder_are_refused_with_the_fix(
    shop_store, ollama, home
):
    ollama.add_model(ModelSpec("cloudy:7b", ["completion", "tools"], logprobs=False))
    for model, said, fix in (
        ("cloudy:7b", "'cloudy:7b' answered without log-probabilities", "Rerank with another"),
        ("missing:1b", "'missing:1b' is not available", "ollama pull missing:1b"),
        ("nomic-embed-text", "'nomic-embed-text' cannot rerank", "--rerank qwen2.5:3b"),
    ):
        done = run_cli("search", QUERY, "-s", shop_store, "--rerank", model,
                       ollama_url=ollama.url, home=home)  # fmt: skip
        assert done.returncode == 1, model
        assert said in done.stderr and fix in done.stderr and "Traceback" not in done.stderr


def test_rerank_off_turns_the_setting_off(shop_store, ollama, home, monkeypatch):
    monkeypatch.setenv("ARCHIVIST_RERANK_MODEL", "missing:1b")
    done = run_cli("search", QUERY, "-s", shop_store, "--rerank", "off",
                   ollama_url=ollama.url, home=home)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert not judgements(ollama) and "reranked" not in done.stdout


def test_the_fake_answers_logprobs_in_the_clients_shape_streamed_or_not(ollama):
    client = ollama_client.Client(host=ollama.url)
    prompt = "Query: refund days\n\n<passage>\nRefunds within 30 days.\n</passage>\n\nyes or no?"
    answer = client.chat(RERANKER, [{"role": "user", "content": prompt}], logprobs=True,
                         top_logprobs=3, options={"num_predict": 1})  # fmt: skip
    [first] = answer.logprobs
    p_yes = relevance("refund days", "Refunds within 30 days.")
    assert answer.message.content == first.token == "yes"
    assert [t.token for t in first.top_logprobs] == ["yes", "no", "Yes"]
    assert math.exp(first.top_logprobs[0].logprob) == pytest.approx(0.97 * p_yes)
    assert scoring.yes_probability(first.top_logprobs) == pytest.approx(p_yes, abs=0.01)

    chunks = list(client.chat(RERANKER, [{"role": "user", "content": "hi!"}], stream=True,
                              logprobs=True, top_logprobs=2))  # fmt: skip
    pieces = [c for c in chunks if c.message.content]
    assert pieces and all(len(c.logprobs) == 1 for c in pieces)
    assert all(c.logprobs[0].token == c.message.content for c in pieces)
    assert all(len(c.logprobs[0].top_logprobs) == 2 for c in pieces)
    assert chunks[-1].done and not chunks[-1].logprobs

    plain = client.chat(RERANKER, [{"role": "user", "content": prompt}])
    assert plain.logprobs is None
    with pytest.raises(ollama_client.ResponseError) as refused:
        client.chat(RERANKER, [{"role": "user", "content": prompt}], logprobs=True,
                    top_logprobs=21)  # fmt: skip
    assert refused.value.status_code == 400


def test_the_in_process_fake_scores_as_the_http_one(fake_models):
    fake_models.score_with(lambda query, passage: 0.8 if "30 days" in passage else 0.1)
    score = Ollama(Settings()).relevance_scorer(RERANKER)
    assert score("refund", "Refunds within 30 days.") == pytest.approx(0.8, abs=1e-3)
    assert score("refund", "Shipping is free.") == pytest.approx(0.1, abs=1e-3)
    body = fake_models.chat_requests()[-1]
    assert body["logprobs"] is True and body["options"]["num_predict"] == 1
    fake_models.ollama_version = "0.12.10"
    with pytest.raises(ArchivistError, match="Ollama 0.12.10"):
        score("refund", "Refunds within 30 days.")


def test_the_yes_probability_reads_yes_against_no_in_any_case():
    def alternatives(**logprobs):
        return [TokenLogprob(token=t, logprob=lp) for t, lp in logprobs.items()]

    assert scoring.yes_probability(
        alternatives(yes=math.log(0.6), no=math.log(0.2))
    ) == pytest.approx(0.75)
    both = alternatives(**{"Yes": math.log(0.3), " yes": math.log(0.3), "No": math.log(0.2)})
    assert scoring.yes_probability(both) == pytest.approx(0.75)
    assert scoring.yes_probability(alternatives(maybe=-0.1, perhaps=-2.0)) == 0.0


def test_ties_keep_the_search_order_and_the_scorer_runs_once_per_candidate():
    seen = []

    def score(query, text):
        seen.append(text)
        return {"b": 0.9, "d": 0.9}.get(text, 0.1)

    passages = [
        {"rank": n, "score": 1.0 / n, "source": t, "chunk_id": t, "text": t, "metadata": {}}
        for n, t in enumerate("abcde", start=1)
    ]
    ranked = Reranker(score, "m", parallel=2)("q", passages, 3)
    assert sorted(seen) == list("abcde")
    assert [r["text"] for r in ranked] == ["b", "d", "a"]
    assert [r["retrieval_rank"] for r in ranked] == [2, 4, 1]
    assert SearchRequest(k=5, rerank="m", candidates=20).fetched == 20
    assert SearchRequest(k=5, rerank="m", candidates=3).fetched == 5


def test_doctor_checks_the_rerank_model_the_settings_name(shop_store, home, monkeypatch):
    monkeypatch.setenv("ARCHIVIST_RERANK_MODEL", RERANKER)
    with FakeOllama() as current:
        done = run_cli("doctor", "--json", ollama_url=current.url, home=home)
    [check] = [c for c in json.loads(done.stdout)["checks"] if "rerank model" in c["message"]]
    assert check["ok"] and "answers with log-probabilities" in check["message"]
    with FakeOllama(version="0.12.6") as old:
        done = run_cli("doctor", "--json", ollama_url=old.url, home=home)
    assert done.returncode == 1
    [check] = [c for c in json.loads(done.stdout)["checks"] if "rerank model" in c["message"]]
    assert not check["ok"] and "Update Ollama to 0.12.11" in check["fix"]


def test_mcp_searches_are_reranked_and_say_so(archivist, shop_store, ollama):
    from archivist.serving.mcp import StoreTools

    archivist.close()
    ollama.score_with(refunds_first)
    tools = StoreTools(replace(archivist.settings, rerank_model=RERANKER), [shop_store])
    tools.check()
    ollama.clear_requests()
    result = tools.call(f"search_{shop_store}", {"query": QUERY})
    assert not result.is_error
    structured = result.structured_content
    assert structured["rerank_model"] == RERANKER and structured["rerank_ms"] > 0
    assert structured["results"][0]["rerank_score"] == 0.9
    assert len(judgements(ollama)) == 20  # the model was checked when the server started

    refused = StoreTools(replace(archivist.settings, rerank_model="missing:1b"), [shop_store])
    with pytest.raises(ArchivistError, match="ollama pull missing:1b"):
        refused.check()


def test_the_chat_says_it_reranks_and_its_search_line_shows_the_time(
    archivist, shop_store, ollama, home
):
    from langgraph.checkpoint.memory import InMemorySaver

    from archivist.terminal.conversation import Conversation

    archivist.close()
    done = run_cli("chat", "-s", shop_store, "--rerank", RERANKER, stdin=QUERY + "\n",
                   ollama_url=ollama.url, home=home)  # fmt: skip
    assert done.returncode == 0, done.stderr
    [line] = [row for row in done.stdout.splitlines() if row.startswith("search_shop_docs(")]
    assert " ms (reranking " in line and line.endswith(" ms)")
    assert len(judgements(ollama)) == 1 + 20

    app = reranked_app(ollama, home)
    try:
        banner = Conversation(app, [shop_store], InMemorySaver()).describe()
    finally:
        app.close()
    assert f"· reranked by {RERANKER} ·" in banner
