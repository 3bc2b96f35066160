"""`langgraph dev` serves both graphs over HTTP (needs the `server` extra; skipped without it).

    ./run --with server test tests/test_langgraph_dev.py

ARCHIVIST_LANGGRAPH_BIN may name a `langgraph` executable installed elsewhere.
"""

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from conftest import ROOT, SHOP

LANGGRAPH = os.environ.get("ARCHIVIST_LANGGRAPH_BIN") or shutil.which(
    "langgraph", path=str(Path(sys.executable).parent)
)
pytestmark = pytest.mark.skipif(
    not LANGGRAPH,
    reason="langgraph-cli is not installed: ./run --with server test to run this test",
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def server(tmp_path):
    port = free_port()
    env = {**os.environ, "ARCHIVIST_HOME": str(tmp_path / "env-home"), "OLLAMA_HOST": "127.0.0.1:9"}
    log = (tmp_path / "langgraph.log").open("w")
    process = subprocess.Popen(
        [LANGGRAPH, "dev", "--config", str(ROOT / "langgraph.json"), "--host", "127.0.0.1",
         "--port", str(port), "--no-browser", "--no-reload"],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,  # graph paths are from cwd
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(240):  # up to about a minute to start
            if process.poll() is not None:
                pytest.fail((tmp_path / "langgraph.log").read_text()[-3000:])
            try:
                if httpx.get(f"{url}/ok", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.25)
        else:
            pytest.fail("langgraph dev did not start: " + (tmp_path / "langgraph.log").read_text())
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()


def test_langgraph_dev_serves_ingest_and_agent_with_the_run_context(server, ollama, tmp_path):
    from langgraph_sdk import get_sync_client

    client = get_sync_client(url=server)
    assert {a["graph_id"] for a in client.assistants.search()} == {"agent", "ingest"}
    drawn = client.assistants.get_graph("agent")  # what Studio draws
    nodes = {node["id"] for node in drawn["nodes"]}
    assert {"start_turn", "call_model", "run_tools", "grade", "stop_searching"} <= nodes
    assert {"retrieve", "grade_retrieved", "answer"} <= nodes
    context = {"ollama_host": ollama.url, "home": str(tmp_path / "served")}
    done = client.runs.wait(
        None, "ingest", input={"paths": [str(SHOP)], "store": "shop_docs"}, context=context
    )
    assert done["report"]["store"] == "shop_docs" and len(done["report"]["stored"]) == 10

    thread = client.threads.create()["thread_id"]
    question = {"role": "user", "content": "How many days do I have to ask for a refund?"}
    state = client.runs.wait(
        thread,
        "agent",
        input={"messages": [question]},
        context={**context, "stores": ["shop_docs"]},
    )
    assert state["mode"] == "agent"
    assert [c["name"] for c in state["calls"]] == ["search_shop_docs"]
    assert state["messages"][-1]["type"] == "ai" and state["messages"][-1]["content"]
    history = client.threads.get_history(thread, limit=20)  # what Studio steps through
    steps = [node for snapshot in reversed(history) for node in snapshot["next"]]
    assert steps == ["__start__", "start_turn", "call_model", "run_tools", "call_model"]
    assert not (tmp_path / "env-home" / "edge").exists()


def test_a_run_that_fails_for_a_reason_the_user_can_fix_shows_the_client_why(
    server, ollama, tmp_path
):
    from langgraph_sdk import get_sync_client

    client = get_sync_client(url=server)
    question = {"messages": [{"role": "user", "content": "How many days for a refund?"}]}
    home = str(tmp_path / "served")
    made = {"ollama_host": ollama.url, "home": home}
    client.runs.wait(None, "ingest", input={"paths": [str(SHOP)], "store": "shop_docs"},
                     context=made)  # fmt: skip
    failures = {
        "StoreNotFound: There is no store named 'nowhere'.\nCreate it with: archivist ingest "
        "PATH --store nowhere": {"ollama_host": ollama.url, "home": home, "stores": ["nowhere"]},
        "OllamaUnreachable: Cannot reach Ollama at http://127.0.0.1:9.\nStart it with `ollama "
        "serve`": {"ollama_host": "http://127.0.0.1:9", "home": home},
        "ModelMissing: The model 'nosuch:7b' is not available in Ollama at "
        f"{ollama.url}.\nPull it with `ollama pull nosuch:7b`": {**made, "chat_model": "nosuch:7b"},
    }
    for shown, context in failures.items():
        thread = client.threads.create()["thread_id"]
        with pytest.raises(Exception) as failed:  # what the SDK raises for a failed run
            client.runs.wait(thread, "agent", input=question, context=context)
        assert str(failed.value).startswith(shown)
        # Studio reads the run's stream: its error event carries the same words.
        events = list(client.runs.stream(None, "agent", input=question, context=context))
        [error] = [e.data for e in events if e.event == "error"]
        assert f"{error['error']}: {error['message']}".startswith(shown)
        assert "internal error" not in error["message"]
