"""`archivist serve`: one server process, driven by clients we did not write (the official
`openai` package, LangChain's ChatOpenAI) and by raw HTTP, against the fake Ollama, whose
wire shows the searches the served agent ran."""

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest
from conftest import ROOT, copy_home, run_cli
from fake_ollama import FakeOllama, ModelSpec
from processes import wait_for

from archivist.render import place_text
from archivist.serving.completions import (
    MAX_MESSAGE_CHARS,
    MAX_MESSAGES,
    APIError,
    ChatRequest,
    sources_text,
    without_sources,
)

QUESTION = "How many days do I have to ask for a refund?"
KEY = "sk-archivist-test"
SLOW = "slow:1b"


@pytest.fixture(scope="module")
def fake():
    with FakeOllama() as ollama:
        ollama.add_model(ModelSpec(SLOW, ["completion", "tools"]))
        yield ollama


@pytest.fixture(scope="module")
def served_home(sample_home, tmp_path_factory):
    return copy_home(sample_home, tmp_path_factory.mktemp("serve") / "home")


@pytest.fixture(scope="module")
def server(fake, served_home, tmp_path_factory):
    """`archivist serve` over a copy of the sample home, with a key; its /v1 URL."""
    home = served_home
    log = tmp_path_factory.mktemp("serve-log") / "stderr"
    env = {**os.environ, "OLLAMA_HOST": fake.url, "ARCHIVIST_HOME": str(home)}
    env["ARCHIVIST_API_KEY"] = KEY
    with open(log, "w") as err:
        process = subprocess.Popen(
            [sys.executable, "-m", "archivist", "serve", "--port", "0"],
            env=env,
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    try:

        def ready() -> bool:
            assert process.poll() is None, log.read_text()
            return "Serving the OpenAI API at" in log.read_text()

        wait_for(ready, "archivist serve to listen")
        line = log.read_text()
        url = line.split("Serving the OpenAI API at ", 1)[1].split()[0]
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)
    assert "Traceback" not in log.read_text(), log.read_text()


@pytest.fixture
def client(server):
    return openai.OpenAI(base_url=server, api_key=KEY, max_retries=0, timeout=60)


def whole(client, *messages, model="archivist/shop_docs"):
    return client.chat.completions.create(model=model, messages=list(messages))


def user(text):
    return {"role": "user", "content": text}


def test_the_openai_client_lists_a_model_per_store_and_one_for_all(client):
    assert [m.id for m in client.models.list()] == ["archivist", "archivist/shop_docs"]


def test_a_whole_answer_cites_the_passages_the_search_on_the_wire_found(client, fake):
    fake.clear_requests()
    answer = whole(client, user(QUESTION))

    turn = answer.model_extra["archivist"]
    [call] = turn["tool_calls"]
    assert call["name"] == "search_shop_docs"
    # The tool call went over Ollama's wire, and its results came back to the model.
    chats = fake.requests_to("/api/chat")
    assert {t["function"]["name"] for t in chats[0]["tools"]} == {"search_shop_docs"}
    answered = chats[-1]["messages"]
    asked = next(m for m in answered if m.get("tool_calls"))
    assert asked["tool_calls"][0]["function"]["name"] == "search_shop_docs"
    assert asked["tool_calls"][0]["function"]["arguments"] == call["args"]
    assert "<search_results" in answered[-1]["content"] and answered[-1]["role"] == "tool"
    embedded = [t for b in fake.requests_to("/api/embed") for t in b["input"]]
    assert f"search_query: {call['args']['query']}" in embedded

    # The answer cites [n], and the sources are listed under it and in the extra field.
    content = answer.choices[0].message.content
    [citation] = turn["citations"]
    cited = next(r for r in call["results"] if r["n"] == citation["n"])
    assert citation["source"] == cited["source"] and citation["chunk_id"] == cited["chunk_id"]
    assert content.endswith(f"[{citation['n']}]\n\nSources:\n- [1] {place_text(citation)}")
    assert answer.choices[0].finish_reason == "stop"
    assert answer.model == "archivist/shop_docs" and turn["model"] == "qwen2.5:3b"
    assert answer.usage.prompt_tokens > 0 and answer.usage.completion_tokens > 0
    reasoning = answer.choices[0].message.model_extra["reasoning_content"]
    assert reasoning.startswith(f'search_shop_docs("{call["args"]["query"]}") · 5 results')


def test_a_streamed_answer_comes_in_pieces_with_the_search_as_reasoning(client):
    expected = whole(client, user(QUESTION), model="archivist").choices[0].message.content
    stream = client.chat.completions.create(
        model="archivist",
        messages=[user(QUESTION)],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    pieces = [d.content for d in deltas if d.content]
    reasoning = [d.model_extra.get("reasoning_content") for d in deltas]
    assert "".join(pieces) == expected
    assert len(pieces) > 5  # token by token, the sources in one piece at the end
    assert pieces[-1].startswith("\n\nSources:\n- [1] ")
    searched = [r for r in reasoning if r]
    assert searched and searched[0].startswith('search_shop_docs("')
    # The search is shown before the answer's first token.
    first_search = next(i for i, d in enumerate(deltas) if d.model_extra.get("reasoning_content"))
    assert first_search < next(i for i, d in enumerate(deltas) if d.content)
    ended = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert [c.choices[0].finish_reason for c in ended] == ["stop"]
    assert ended[0].model_extra["archivist"]["citations"][0]["n"] == 1
    assert chunks[-1].choices == [] and chunks[-1].usage.total_tokens > 0


def test_langchains_chat_openai_gets_the_answer_whole_and_streamed(server):
    from langchain_openai import ChatOpenAI

    chat = ChatOpenAI(base_url=server, api_key=KEY, model="archivist/shop_docs", max_retries=0)
    answer = chat.invoke(QUESTION)
    streamed = "".join(str(piece.content) for piece in chat.stream(QUESTION))
    assert "[1]" in answer.content and "\n\nSources:\n- [1] " in answer.content
    assert streamed == answer.content


def test_raw_http_gets_server_sent_events_ending_with_done(server):
    body = {"model": "archivist", "stream": True, "messages": [user(QUESTION)]}
    headers = {"Authorization": f"Bearer {KEY}"}
    with httpx.stream(
        "POST", f"{server}/chat/completions", json=body, headers=headers, timeout=60
    ) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in response.iter_lines() if line]
    assert all(line.startswith("data: ") for line in lines)
    assert lines[-1] == "data: [DONE]"
    chunks = [json.loads(line.removeprefix("data: ")) for line in lines[:-1]]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    assert len({c["id"] for c in chunks}) == 1
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
    assert "[1]" in text and "Sources:" in text


@pytest.mark.skipif(not shutil.which("curl"), reason="curl is not installed")
def test_curl_gets_a_whole_answer(server):
    body = json.dumps({"model": "archivist/shop_docs", "messages": [user(QUESTION)]})
    done = subprocess.run(
        ["curl", "-sS", f"{server}/chat/completions", "-H", f"Authorization: Bearer {KEY}",
         "-H", "Content-Type: application/json", "-d", body],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    answer = json.loads(done.stdout)
    assert answer["object"] == "chat.completion"
    assert "Sources:" in answer["choices"][0]["message"]["content"]


def test_a_follow_up_is_searched_with_the_subject_of_the_history_sent(client, fake):
    first = whole(client, user(QUESTION)).choices[0].message.content
    fake.clear_requests()
    answer = whole(
        client,
        {"role": "system", "content": "You are a helpful assistant."},
        user(QUESTION),
        {"role": "assistant", "content": first},
        user("and for opened electronics?"),
    )
    [call] = answer.model_extra["archivist"]["tool_calls"]
    assert call["condensed_from"].startswith("and for opened electronics")
    assert "refund" in call["args"]["query"].lower()
    # The model read the earlier turn as it was said: the answer without the sources list.
    said = [m for m in fake.requests_to("/api/chat")[-1]["messages"] if m["role"] != "tool"]
    assert [m["content"] for m in said if m["role"] == "user"][:2] == [
        QUESTION,
        "and for opened electronics?",
    ]
    earlier = next(m for m in said if m["role"] == "assistant" and m["content"])
    assert earlier["content"] == without_sources(first) != first
    assert "helpful assistant" not in json.dumps(said)


def test_a_wrong_or_missing_key_is_refused_with_401(server):
    wrong = openai.OpenAI(base_url=server, api_key="sk-wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as refused:
        wrong.models.list()
    assert refused.value.status_code == 401
    assert refused.value.body["code"] == "invalid_api_key"
    assert "Authorization: Bearer KEY" in refused.value.body["message"]
    bare = httpx.post(f"{server}/chat/completions", json={"model": "archivist", "messages": []})
    assert bare.status_code == 401 and bare.json()["error"]["type"] == "authentication_error"
    assert set(bare.json()["error"]) == {"message", "type", "param", "code"}


def test_a_wrong_model_is_a_404_listing_the_models(client):
    with pytest.raises(openai.NotFoundError) as refused:
        whole(client, user(QUESTION), model="gpt-4o")
    error = refused.value.body
    assert error["code"] == "model_not_found" and error["param"] == "model"
    assert (
        "The model 'gpt-4o' does not exist. Models: archivist, archivist/shop_docs."
        in (error["message"])
    )


def test_a_chat_model_ollama_lacks_is_named_with_the_pull_command(client):
    with pytest.raises(openai.NotFoundError) as refused:
        whole(client, user(QUESTION), model="archivist/shop_docs@nosuch:7b")
    assert "ollama pull nosuch:7b" in refused.value.body["message"]
    with pytest.raises(openai.NotFoundError) as refused:  # named in the header instead
        client.chat.completions.create(
            model="archivist",
            messages=[user(QUESTION)],
            extra_headers={"X-Archivist-Chat-Model": "other:1b"},
        )
    assert "ollama pull other:1b" in refused.value.body["message"]


def test_a_huge_body_is_refused_with_413_and_a_long_message_with_400(server):
    headers = {"Authorization": f"Bearer {KEY}"}
    huge = {"model": "archivist", "messages": [user("x" * (5 * 1024 * 1024))]}
    refused = httpx.post(f"{server}/chat/completions", json=huge, headers=headers)
    assert refused.status_code == 413
    assert refused.json()["error"]["code"] == "request_too_large"
    # Sent in chunks, without a length: refused once it passes the bound, not read whole.
    chunks = (b"x" * (1024 * 1024) for _ in range(5))
    refused = httpx.post(f"{server}/chat/completions", content=chunks, headers=headers)
    assert refused.status_code == 413
    assert refused.json()["error"]["code"] == "request_too_large"
    long = {"model": "archivist", "messages": [user("x" * (MAX_MESSAGE_CHARS + 1))]}
    refused = httpx.post(f"{server}/chat/completions", json=long, headers=headers)
    assert refused.status_code == 400
    assert refused.json()["error"]["param"] == "messages[0].content"
    assert refused.json()["error"]["code"] == "string_above_max_length"


def test_a_foreign_host_or_origin_is_refused_with_403(server):
    headers = {"Authorization": f"Bearer {KEY}"}
    rebound = httpx.get(f"{server}/models", headers={**headers, "Host": "evil.example:8000"})
    assert rebound.status_code == 403 and rebound.json()["error"]["code"] == "forbidden_host"
    page = httpx.get(f"{server}/models", headers={**headers, "Origin": "https://evil.example"})
    assert page.status_code == 403 and page.json()["error"]["code"] == "forbidden_origin"
    local = httpx.get(f"{server}/models", headers={**headers, "Origin": "http://localhost:3000"})
    assert local.status_code == 200


def test_ollama_down_is_a_clear_error_at_once_and_the_server_recovers(client, fake):
    fake.stop()
    try:
        for stream in (False, True):
            started = time.monotonic()
            with pytest.raises(openai.InternalServerError) as failed:
                client.chat.completions.create(
                    model="archivist/shop_docs", messages=[user(QUESTION)], stream=stream
                )
            assert time.monotonic() - started < 10
            assert failed.value.status_code == 503
            assert f"Cannot reach Ollama at {fake.url}" in failed.value.body["message"]
            assert "ollama serve" in failed.value.body["message"]
    finally:
        fake.start()
    assert "[1]" in whole(client, user(QUESTION)).choices[0].message.content


def test_twenty_clients_are_served_at_once_and_a_slow_one_blocks_none(client, fake):
    fake.script(SLOW, {"content": "Slowly, the answer comes.", "hold_after": 1})
    slow = {}

    def ask_slowly() -> None:
        stream = client.chat.completions.create(
            model=f"archivist/shop_docs@{SLOW}", messages=[user(QUESTION)], stream=True
        )
        slow["text"] = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)

    held = threading.Thread(target=ask_slowly)
    held.start()
    try:
        wait_for(lambda: any(b["model"] == SLOW for b in fake.requests_to("/api/chat")), "slow")
        with ThreadPoolExecutor(20) as pool:
            answers = list(pool.map(lambda _: whole(client, user(QUESTION)), range(20)))
        assert held.is_alive() and "text" not in slow  # still held, and nobody waited on it
    finally:
        fake.open_gate()
        held.join(timeout=60)
    contents = {a.choices[0].message.content for a in answers}
    assert len(contents) == 1 and "Sources:\n- [1] " in contents.pop()
    assert slow["text"].startswith("Slowly, the answer comes.")


def test_an_unknown_store_or_an_open_address_without_a_key_is_refused(ollama, home, store):
    done = run_cli("serve", "--store", "nowhere", ollama_url=ollama.url, home=home)
    assert done.returncode == 1 and "There is no store named 'nowhere'" in done.stderr
    assert "Traceback" not in done.stderr
    done = run_cli("serve", "--host", "0.0.0.0", ollama_url=ollama.url, home=home)
    assert done.returncode == 1 and "--api-key KEY" in done.stderr


@pytest.mark.parametrize(
    ("body", "param", "words"),
    [
        ([], None, "must be a JSON object"),
        ({"messages": [user("hi")]}, "model", "Name a model"),
        ({"model": "archivist", "messages": []}, "messages", "the question last"),
        (
            {"model": "archivist", "messages": [user("hi"), {"role": "assistant", "content": "x"}]},
            "messages",
            "The last message must be the user's question",
        ),
        (
            {
                "model": "archivist",
                "messages": [
                    {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}
                ],
            },
            "messages[0].content",
            "holds a image_url part: Archivist answers from text only",
        ),
        ({"model": "archivist", "n": 2, "messages": [user("hi")]}, "n", "one answer"),
        (
            {"model": "archivist", "messages": [user("hi")] * (MAX_MESSAGES + 1)},
            "messages",
            f"at most {MAX_MESSAGES} are taken",
        ),
    ],
)
def test_a_request_that_cannot_be_answered_says_why(body, param, words):
    with pytest.raises(APIError) as refused:
        ChatRequest.read(body)
    assert refused.value.status == 400 and refused.value.param == param
    assert words in refused.value.message


def test_text_parts_are_read_and_an_earlier_answer_loses_only_its_sources_list():
    read = ChatRequest.read(
        {
            "model": "archivist",
            "messages": [{"role": "user", "content": [{"type": "text", "text": "refunds?"}]}],
        }
    )
    assert read.question == "refunds?" and read.history == []
    turn = {"citations": [{"n": 1, "source": "refund.md", "chunk_id": "c"}]}
    answer = "Thirty days [1]."
    assert without_sources(answer + sources_text(turn)) == answer
    kept = "Sources:\n- [1] as the user wrote"
    assert without_sources(kept) == kept
    assert without_sources("A\n\nSources:\nnot a list") == "A\n\nSources:\nnot a list"


def test_the_key_is_a_setting_never_shown(home):
    from archivist.settings import load_settings

    settings = load_settings({"ARCHIVIST_API_KEY": KEY, "ARCHIVIST_HOME": str(home)})
    assert settings.api_key == KEY and KEY not in repr(settings)


def test_off_loopback_the_key_alone_is_checked():
    from starlette.testclient import TestClient

    from archivist.serving.api import build_app

    class NoStores:  # the checks refuse before any route asks the service
        settings = None

        def model_ids(self):
            return ["archivist"]

    # Served on 0.0.0.0 (a container, another machine): the server has a name of its own.
    app = TestClient(build_app(NoStores(), KEY, loopback=False), base_url="http://archivist:8000")
    page = {"Origin": "https://webui.example"}
    assert app.get("/v1/models", headers=page).status_code == 401
    keyed = app.get("/v1/models", headers={**page, "Authorization": f"Bearer {KEY}"})
    assert keyed.status_code == 200 and keyed.json()["data"][0]["id"] == "archivist"
    # On loopback the same request is refused for its Host, key or not.
    local = TestClient(build_app(NoStores(), KEY), base_url="http://archivist:8000")
    refused = local.get("/v1/models", headers={"Authorization": f"Bearer {KEY}"})
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "forbidden_host"


def test_each_answered_request_is_in_the_turn_log_as_serve(client, fake, served_home):
    question = "Which carrier ships the parcels, for the log?"
    whole(client, user(question))
    listed = run_cli("logs", "--json", "--limit", "50", ollama_url=fake.url, home=served_home)
    assert listed.returncode == 0, listed.stderr
    [turn] = [t for t in json.loads(listed.stdout) if t["question"] == question]
    assert turn["command"] == "serve"
    assert [call["name"] for call in turn["tool_calls"]] == ["search_shop_docs"]


def test_a_client_leaving_a_stream_stops_its_turn_logged_as_stopped(server, fake, served_home):
    question = "What does a parcel cost to ship, asked and then left?"
    fake.script(SLOW, {"content": "Slowly, the answer comes.", "hold_after": 1})
    body = {"model": f"archivist/shop_docs@{SLOW}", "stream": True, "messages": [user(question)]}
    headers = {"Authorization": f"Bearer {KEY}"}
    try:
        with httpx.stream(
            "POST", f"{server}/chat/completions", json=body, headers=headers, timeout=60
        ) as response:
            for line in response.iter_lines():
                if line.startswith("data: ") and json.loads(line[6:])["choices"][0]["delta"].get(
                    "content"
                ):
                    break  # the first piece of the answer, then the client leaves
    finally:
        fake.open_gate()

    def logged() -> list[dict]:
        done = run_cli("logs", "--json", "--limit", "50", ollama_url=fake.url, home=served_home)
        return [t for t in json.loads(done.stdout) if t["question"] == question]

    wait_for(logged, "the left turn to be logged")
    [turn] = logged()
    assert turn["command"] == "serve" and turn["error"] == "stopped by the user"
    # Its answer as far as it went: the turn stopped at the event after the client left.
    full = "Slowly, the answer comes."
    assert turn["answer"].startswith("Slowly") and len(turn["answer"]) < len(full)
