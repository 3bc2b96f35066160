"""Exercise the fake Ollama server through the real langchain-ollama and ollama clients."""

from __future__ import annotations

import contextlib
import json
import math
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path

import httpx
import ollama
import pytest
from fake_ollama import CHAT_EMBEDDER, DEFAULT_MODELS, VERSION, FakeOllama, ModelSpec, embed_text
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import tool
from langchain_ollama import ChatOllama, OllamaEmbeddings

QUESTION = "How many days do I have to ask for a refund?"
RESULTS = """<search_results tool="search_shop_docs" query="refund days">
<result n="1" source="refund.md" score="0.741">
Customers may request a refund within 30 days of delivery. Returns &amp; exchanges are free.
</result>
<result n="2" source="shipping.md" score="0.512">
Orders ship within 2 business days.
</result>
</search_results>"""
SEARCH_TOOL = {
    "type": "function",
    "function": {
        "name": "search_shop_docs",
        "description": "Search the shop_docs knowledge base.",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}}},
    },
}
USER = [{"role": "user", "content": "hello"}]


@tool
def search_shop_docs(query: str) -> str:
    """Search the shop_docs knowledge base."""
    return query


@tool
def search_hr_docs(query: str) -> str:
    """Search the hr_docs knowledge base: leave, payroll and benefits."""
    return query


@pytest.fixture
def fake() -> Iterator[FakeOllama]:
    with FakeOllama() as server:
        yield server


@pytest.fixture
def client(fake: FakeOllama) -> ollama.Client:
    return ollama.Client(host=fake.url)


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


def test_agent_turn_calls_the_tool_then_answers_with_a_citation(fake: FakeOllama) -> None:
    model = ChatOllama(model="qwen2.5:3b", base_url=fake.url).bind_tools([search_shop_docs])
    question = HumanMessage(QUESTION)

    call = model.invoke([question])

    assert isinstance(call, AIMessage)
    assert call.tool_calls[0]["name"] == "search_shop_docs"
    assert call.tool_calls[0]["args"] == {"query": "How many days do I have to ask for a refund"}
    assert call.usage_metadata and call.usage_metadata["input_tokens"] > 0

    result = ToolMessage(RESULTS, tool_call_id=call.tool_calls[0]["id"])
    answer = model.invoke([question, call, result])

    assert answer.content == "Customers may request a refund within 30 days of delivery. [1]"
    assert not answer.tool_calls
    sent = fake.requests_to("/api/chat")[-1]
    assert sent["stream"] is True
    assert sent["messages"][-1] == {"role": "tool", "content": RESULTS}


def test_tool_choice_follows_the_words_of_the_question(fake: FakeOllama) -> None:
    model = ChatOllama(model="qwen2.5:3b", base_url=fake.url)
    both = model.bind_tools([search_shop_docs, search_hr_docs])

    assert both.invoke("How is payroll handled?").tool_calls[0]["name"] == "search_hr_docs"
    assert both.invoke("Where is my parcel?").tool_calls[0]["name"] == "search_shop_docs"


def test_answer_uses_the_lowest_numbered_result_unescaped_and_cjk_sentences(
    fake: FakeOllama,
) -> None:
    model = ChatOllama(model="gemma-notools:1b", base_url=fake.url)
    results = (
        '<search_results tool="search_docs" query="q">\n'
        '<result n="3" source="b.md" score="0.2">\nLater.\n</result>\n'
        '<result n="2" source="a.md" score="0.9">\nFish &amp; chips &lt;3 cost 4.50 euros! More.\n'
        "</result>\n</search_results>"
    )
    chinese = (
        '<search_results tool="search_docs" query="退款">\n'
        '<result n="1" source="zh.md" score="0.8">\n'
        "退款须在三十天内申请。逾期不予受理。\n</result>\n"
        "</search_results>"
    )
    empty = '<search_results tool="search_docs" query="q">\n</search_results>'

    ask = [SystemMessage(f"Answer from these results:\n{results}"), HumanMessage("Cost?")]
    assert model.invoke(ask).content == "Fish & chips <3 cost 4.50 euros! [2]"
    ask = [SystemMessage(chinese), HumanMessage("多久可以退款？")]
    assert model.invoke(ask).content == "退款须在三十天内申请。 [1]"
    assert model.invoke([SystemMessage(empty), HumanMessage("Cost?")]).content == "I don't know."

    tools = ChatOllama(model="qwen2.5:3b", base_url=fake.url).bind_tools([search_shop_docs])
    call = tools.invoke(QUESTION)
    reply = tools.invoke([HumanMessage(QUESTION), call, ToolMessage(empty, tool_call_id="1")])
    assert reply.content == "I could not find this in the knowledge base."


def test_greetings_get_no_tool_call_and_streams_come_in_pieces(fake: FakeOllama) -> None:
    model = ChatOllama(model="qwen2.5:3b", base_url=fake.url).bind_tools([search_shop_docs])

    for greeting in ("hi!", "Thanks a lot", "你好"):
        reply = model.invoke(greeting)
        assert not reply.tool_calls
        assert reply.content.startswith("Hello")

    chunks = [chunk.content for chunk in model.stream("hello")]
    assert len([c for c in chunks if c]) > 3
    assert "".join(chunks) == "Hello! Ask me anything about the knowledge base."


def test_never_tools_model_ignores_offered_tools(fake: FakeOllama) -> None:
    model = ChatOllama(model="qwen2.5:0.5b", base_url=fake.url).bind_tools([search_shop_docs])

    reply = model.invoke(QUESTION)

    assert not reply.tool_calls
    assert reply.content == "I don't know."


def test_embeddings_are_deterministic_unit_vectors(fake: FakeOllama) -> None:
    nomic = OllamaEmbeddings(model="nomic-embed-text", base_url=fake.url)

    prefixed, plain, other, related = nomic.embed_documents(
        ["search_document: refund policy for orders", "refund policy for orders", "x", "refund"]
    )

    assert len(plain) == 768
    assert math.isclose(math.fsum(v * v for v in plain), 1.0)
    assert prefixed == plain
    assert other != plain
    assert cosine(plain, related) > cosine(plain, other)
    assert nomic.embed_query("search_query: refund policy for orders") == plain
    assert fake.requests_to("/api/embed")[0]["input"][0].startswith("search_document: ")
    assert isinstance(fake.requests_to("/api/embed")[1]["input"], list)

    zh = nomic.embed_documents(["退款政策", "退款", "天气"])
    assert cosine(zh[0], zh[1]) > cosine(zh[0], zh[2])
    minilm = OllamaEmbeddings(model="all-minilm", base_url=fake.url)
    assert len(minilm.embed_query("refund")) == 384


def test_embed_errors_and_edge_cases(client: ollama.Client) -> None:
    assert client.embed("nomic-embed-text", []).embeddings == []
    assert len(client.embed("nomic-embed-text", "one text").embeddings) == 1
    assert client.embed("all-minilm", "! ?").embeddings[0][0] == 1.0

    with pytest.raises(ollama.ResponseError) as missing:
        client.embed("mxbai-embed-large", ["x"])
    assert missing.value.status_code == 404
    assert missing.value.error == 'model "mxbai-embed-large" not found, try pulling it first'

    with pytest.raises(ollama.ResponseError) as chat_only:
        client.embed("qwen2.5:3b", ["x"])
    assert (chat_only.value.status_code, chat_only.value.error) == (
        400,
        '"qwen2.5:3b" does not support embeddings',
    )

    too_long = "word " * 600
    assert len(client.embed("all-minilm", [too_long]).embeddings) == 1
    with pytest.raises(ollama.ResponseError) as over:
        client.embed("all-minilm", [too_long], truncate=False)
    assert over.value.status_code == 400
    assert over.value.error == "the input length exceeds the context length"


def test_show_tags_and_model_management(fake: FakeOllama, client: ollama.Client) -> None:
    shown = client.show("qwen2.5:3b")
    assert shown.capabilities == ["completion", "tools"]
    assert shown.modelinfo and shown.modelinfo["qwen2.context_length"] == 32768
    nomic = client.show("nomic-embed-text")
    assert nomic.capabilities == ["embedding"]
    assert nomic.modelinfo and nomic.modelinfo["nomic-bert.embedding_length"] == 768

    names = [model.model for model in client.list().models]
    assert "nomic-embed-text:latest" in names and "qwen2.5:3b" in names

    with pytest.raises(ollama.ResponseError) as missing:
        client.show("llama3")
    assert (missing.value.status_code, missing.value.error) == (404, "model 'llama3' not found")

    fake.add_model(ModelSpec("deepseek-r1:1.5b", ["completion", "thinking"]))
    fake.remove_model("qwen2.5:3b")
    assert client.show("deepseek-r1:1.5b").capabilities == ["completion", "thinking"]
    with pytest.raises(ollama.ResponseError):
        client.show("qwen2.5:3b")

    statuses = [part.status for part in client.pull("mxbai-embed-large", stream=True)]
    assert statuses[0] == "pulling manifest" and statuses[-1] == "success"
    assert client.show("mxbai-embed-large").capabilities == ["embedding"]
    assert client.pull("llama3.2:1b").status == "success"
    assert client.show("llama3.2:1b").capabilities == ["completion", "tools"]


def test_chat_capability_errors(client: ollama.Client) -> None:
    def error(model: str, **kwargs: object) -> tuple[int, str]:
        with pytest.raises(ollama.ResponseError) as raised:
            client.chat(model, messages=USER, **kwargs)
        return raised.value.status_code, raised.value.error

    assert error("gemma-notools:1b", tools=[SEARCH_TOOL]) == (
        400,
        "registry.ollama.ai/library/gemma-notools does not support tools",
    )
    assert error("nomic-embed-text") == (400, '"nomic-embed-text" does not support chat')
    assert error("qwen2.5:3b", think=True) == (400, '"qwen2.5:3b" does not support thinking')
    assert error("llama3") == (404, "model 'llama3' not found")
    assert client.chat("gemma-notools:1b", messages=USER, tools=[]).message.content


def test_non_streaming_chat_returns_one_object(client: ollama.Client) -> None:
    reply = client.chat("qwen2.5:3b", messages=USER, stream=False)
    assert reply.done and reply.done_reason == "stop"
    assert reply.message.content == "Hello! Ask me anything about the knowledge base."
    assert reply.eval_count == 8 and reply.prompt_eval_count

    call = client.chat(
        "qwen2.5:3b", messages=[{"role": "user", "content": QUESTION}], tools=[SEARCH_TOOL]
    )
    assert call.message.tool_calls
    assert call.message.tool_calls[0].function.arguments == {"query": QUESTION.rstrip("?")}


def test_script_turns_are_used_in_order(fake: FakeOllama, client: ollama.Client) -> None:
    fake.script(
        "qwen2.5:3b",
        {"content": '{"grade": "pass"}'},
        {"tool_calls": [{"name": "search_x", "arguments": {"query": "q", "k": 3}}]},
        {
            "error": "server busy, please try again.  maximum pending requests exceeded",
            "status": 503,
        },
    )

    graded = client.chat("qwen2.5:3b", messages=USER, format={"type": "object"})
    assert json.loads(graded.message.content) == {"grade": "pass"}
    model = ChatOllama(model="qwen2.5:3b", base_url=fake.url)
    called = model.invoke("hello")
    assert called.tool_calls[0]["name"] == "search_x"
    assert called.tool_calls[0]["args"] == {"query": "q", "k": 3}
    with pytest.raises(ollama.ResponseError) as busy:
        model.invoke("hello")
    assert busy.value.status_code == 503
    assert model.invoke("hello").content.startswith("Hello")


def test_injected_failures_and_mid_stream_errors(fake: FakeOllama, client: ollama.Client) -> None:
    fake.fail("/api/chat", 500, "llama runner process has terminated: exit status 2", times=2)
    for _ in range(2):
        with pytest.raises(ollama.ResponseError) as crashed:
            client.chat("qwen2.5:3b", messages=USER)
        assert crashed.value.status_code == 500
        assert crashed.value.error.startswith("llama runner process has terminated")
    assert client.chat("qwen2.5:3b", messages=USER).message.content

    fake.fail("/api/tags", 500, "boom")
    with pytest.raises(ollama.ResponseError):
        client.list()

    fake.script("qwen2.5:3b", {"content": "Partial answer here", "mid_stream_error": "oom"})
    pieces = []
    with pytest.raises(ollama.ResponseError) as broken:
        for part in client.chat("qwen2.5:3b", messages=USER, stream=True):
            pieces.append(part.message.content)
    assert (broken.value.status_code, broken.value.error) == (-1, "oom")
    assert "".join(pieces) == "Partial answer here"

    fake.script("qwen2.5:3b", {"mid_stream_error": "oom"})
    with pytest.raises(ollama.ResponseError):
        ChatOllama(model="qwen2.5:3b", base_url=fake.url).invoke("hello")


def test_requests_are_recorded_and_plain_endpoints_answer(fake: FakeOllama) -> None:
    assert httpx.get(fake.url).text == "Ollama is running"
    assert "version" in httpx.get(f"{fake.url}/api/version").json()
    missing = httpx.get(f"{fake.url}/api/nothing")
    assert missing.status_code == 404 and missing.text == "404 page not found"
    assert httpx.post(f"{fake.url}/api/chat", content=b"not json").status_code == 400
    assert [r["path"] for r in fake.requests][:3] == ["/", "/api/version", "/api/nothing"]
    first = fake.requests[0]
    assert {k: v for k, v in first.items() if k not in ("time", "agent")} == {
        "method": "GET",
        "path": "/",
        "body": None,
        "authorization": "",
    }
    assert first["agent"].startswith("python-httpx/")  # who sent it
    assert isinstance(first["time"], float)  # when it arrived: the benchmark's gap measure
    fake.clear_requests()
    assert fake.requests == []


def test_slow_stream_survives_a_client_disconnect_and_stop_cuts_it() -> None:
    fake = FakeOllama(token_delay=0.3).start()
    body = {"model": "qwen2.5:3b", "messages": USER}
    with httpx.stream("POST", f"{fake.url}/api/chat", json=body) as response:
        assert response.headers["content-type"] == "application/x-ndjson"
        first = json.loads(next(response.iter_lines()))
        assert first["message"]["content"] == "Hello!" and first["done"] is False
    assert httpx.get(f"{fake.url}/api/version").status_code == 200

    lines: list[str] = []

    def read_slowly() -> None:
        with (
            contextlib.suppress(httpx.HTTPError),
            httpx.stream("POST", f"{fake.url}/api/chat", json=body) as response,
        ):
            for line in response.iter_lines():
                lines.append(line)

    reader = threading.Thread(target=read_slowly)
    reader.start()
    while not lines and reader.is_alive():
        time.sleep(0.01)
    fake.stop()
    reader.join(timeout=10)
    assert not reader.is_alive()
    # The stream was cut: some tokens arrived, the closing `done` line never did.
    assert lines and not json.loads(lines[-1])["done"]
    with pytest.raises(httpx.ConnectError):
        httpx.get(fake.url)

    fake.start()
    try:
        assert httpx.get(fake.url).status_code == 200
    finally:
        fake.stop()


def test_embed_concurrency_is_capped() -> None:
    with FakeOllama(embed_delay=0.1, embed_concurrency=2) as fake:
        embeddings = OllamaEmbeddings(model="nomic-embed-text", base_url=fake.url)
        with ThreadPoolExecutor(max_workers=6) as pool:
            list(pool.map(embeddings.embed_query, [f"text {i}" for i in range(6)]))
        assert fake.peak_embed_concurrency == 2


def test_subprocess_mode_serves_until_terminated(tmp_path: Path) -> None:
    models = tmp_path / "models.json"
    specs = [{"name": "tiny:1b", "capabilities": ["completion"]}, asdict(DEFAULT_MODELS[1])]
    models.write_text(json.dumps(specs))
    script = Path(__file__).with_name("fake_ollama.py")
    process = subprocess.Popen(
        [sys.executable, str(script), "--models", str(models), "--token-delay", "0"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline().strip()
        assert line.startswith("FAKE_OLLAMA_URL=http://127.0.0.1:")
        url = line.removeprefix("FAKE_OLLAMA_URL=")
        assert httpx.get(f"{url}/api/version").status_code == 200
        tags = httpx.get(f"{url}/api/tags").json()["models"]
        assert [m["name"] for m in tags] == ["tiny:1b", "nomic-embed-text:latest"]
        text = "search_document: 退款 refund policy"
        remote = ollama.Client(host=url).embed("nomic-embed-text", [text]).embeddings[0]
        assert list(remote) == embed_text(text, 768, 2048)
    finally:
        process.terminate()
        assert process.wait(timeout=5) == 0


def test_a_chat_model_embeds_with_near_constant_vectors(fake: FakeOllama, client) -> None:
    fake.add_model(CHAT_EMBEDDER)
    texts = ["Refunds take 14 days.", "Refunds take 14 days!", "The warehouse is in Berlin."]
    vectors = client.embed("llama3.2:1b", texts).embeddings
    again = client.embed("llama3.2:1b", texts[0]).embeddings[0]
    assert [len(v) for v in vectors] == [256] * 3 and again == vectors[0]

    def cosine(a: list[float], b: list[float]) -> float:
        return sum(x * y for x, y in zip(a, b, strict=True))

    # Every pair is nearly identical, whatever the texts say; the hashing embedder tells them apart.
    assert min(cosine(vectors[0], v) for v in vectors[1:]) > 0.99
    hashed = client.embed("nomic-embed-text", texts).embeddings
    assert cosine(hashed[0], hashed[1]) > cosine(hashed[0], hashed[2]) + 0.5
    with pytest.raises(ollama.ResponseError):
        client.embed("qwen2.5:3b", ["x"])  # other chat models still refuse, as before
    reply = client.chat("llama3.2:1b", [{"role": "user", "content": "hi"}])
    assert reply.message.content  # and it chats like the default model


def test_the_faults_are_on_the_wire_as_a_broken_server_sends_them(fake: FakeOllama) -> None:
    embed = {"model": "nomic-embed-text", "input": ["a lantern"]}
    fake.misbehave("/api/embed", "not_json", times=1)
    fake.misbehave("/api/embed", "empty", times=1)
    fake.misbehave("/api/embed", "nan", times=1)
    page = httpx.post(f"{fake.url}/api/embed", json=embed)
    assert page.status_code == 200 and page.text.startswith("<html>")
    empty = httpx.post(f"{fake.url}/api/embed", json=embed)
    assert empty.status_code == 200 and empty.content == b""
    nan = httpx.post(f"{fake.url}/api/embed", json=embed)
    assert nan.content.startswith(b'{"model": "nomic-embed-text", "embeddings": [[NaN, ')
    assert len(httpx.post(f"{fake.url}/api/embed", json=embed).json()["embeddings"][0]) == 768

    fake.misbehave("/api/tags", "reset")
    with pytest.raises(httpx.ReadError):
        httpx.get(f"{fake.url}/api/tags")
    fake.behave()
    fake.drip_interval = 0.005
    fake.misbehave("/api/version", "drip")
    started = time.monotonic()
    assert httpx.get(f"{fake.url}/api/version").json() == {"version": VERSION}
    assert time.monotonic() - started > 0.005 * 100  # status line and headers dripped too
    fake.behave()

    fake.add_model(ModelSpec("resized:latest", ["embedding"], served_length=384))
    resized = httpx.post(f"{fake.url}/api/embed", json={"model": "resized", "input": ["x"]})
    assert len(resized.json()["embeddings"][0]) == 384
    shown = httpx.post(f"{fake.url}/api/show", json={"model": "resized"}).json()
    assert shown["model_info"]["qwen2.embedding_length"] == 768

    fake.require_auth("ann", "pw")
    assert httpx.get(f"{fake.url}/api/tags").status_code == 401
    assert httpx.get(f"{fake.url}/api/tags", auth=("ann", "pw")).status_code == 200
    assert fake.requests[-1]["authorization"] == "Basic YW5uOnB3"
