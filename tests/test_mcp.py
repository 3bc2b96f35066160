"""`archivist mcp`: an MCP client (the official SDK's own) lists and calls the stores' tools
in-process, over stdio (a subprocess: the process boundary is the point) and over streamable
HTTP, and gets the passages `archivist search` gives."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from conftest import ROOT, SHOP, run_cli
from mcp import Client, StdioServerParameters, types
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import MCPError
from mcp.types import INVALID_PARAMS
from processes import wait_for

from archivist.agent.retrieval import describe, format_results
from archivist.agent.search_args import SearchArgs
from archivist.serving.mcp import StoreTools, build_server

QUERY = "How many days do I have to ask for a refund?"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def cli_search(ollama, home: Path, query: str = QUERY, *args: str) -> list[dict]:
    done = run_cli(
        "search", query, "--store", "shop_docs", "--json", *args, ollama_url=ollama.url, home=home
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


async def session(client: Client, calls: list[tuple[str, dict]]) -> tuple[list, list]:
    """List the tools, then make the calls; return both answers."""
    async with client:
        tools = (await client.list_tools()).tools
        return tools, [await client.call_tool(name, args) for name, args in calls]


def test_in_process_the_tools_are_the_agents_and_answer_as_search_does(archivist, store):
    client = Client(build_server(StoreTools(archivist.settings)))
    calls = [
        ("search_shop_docs", {"query": QUERY}),
        ("search_shop_docs", {"query": "returns", "source": "returns.md"}),
        ("list_stores", {}),
    ]
    tools, (found, filtered, listed) = anyio.run(session, client, calls)

    opened = archivist.store(store)
    assert [t.name for t in tools] == ["list_stores", "search_shop_docs"]
    search = tools[1]
    assert search.description == describe(opened)
    assert search.input_schema == SearchArgs.model_json_schema()
    expected = archivist.search(QUERY, store).passages
    assert not found.is_error and found.structured_content == {"results": expected}
    assert found.content[0].text == format_results("search_shop_docs", QUERY, expected)
    assert "<search_results" in found.content[0].text and 'n="1"' in found.content[0].text
    assert {r["source"] for r in filtered.structured_content["results"]} == {"returns.md"}
    assert json.loads(listed.content[0].text) == listed.structured_content["stores"]
    assert listed.structured_content["stores"][0]["store"] == "shop_docs"
    assert listed.structured_content["stores"][0]["chunks"] == opened.count()
    archivist.close()


def test_bad_calls_come_back_as_errors_the_model_can_act_on(archivist, store):
    client = Client(build_server(StoreTools(archivist.settings, [store])))
    calls = [
        ("search_shop_docs", {"query": "refund", "k": 50}),
        ("search_shop_docs", {"query": "refund", "source": "nothing.md"}),
        ("search_shop_docs", {}),
    ]
    _, (widened, unknown_source, no_query) = anyio.run(session, client, calls)
    assert widened.is_error and "k: Extra inputs are not permitted" in widened.content[0].text
    assert unknown_source.is_error
    assert "No source in 'shop_docs' matches 'nothing.md'" in unknown_source.content[0].text
    assert "refund.md" in unknown_source.content[0].text
    assert no_query.is_error and "query: Field required" in no_query.content[0].text

    async def unknown_tool() -> MCPError | None:
        async with Client(build_server(StoreTools(archivist.settings, [store]))) as c:
            try:
                await c.call_tool("search_elsewhere", {"query": "refund"})
            except MCPError as refused:
                return refused
        return None

    refused = anyio.run(unknown_tool)
    assert refused is not None and refused.code == INVALID_PARAMS
    assert "Unknown tool 'search_elsewhere'. Tools: search_shop_docs, list_stores" in str(refused)


def test_only_the_stores_asked_for_are_served(archivist, shop_store, tmp_path):
    (tmp_path / "kb").mkdir()
    (tmp_path / "kb" / "tents.md").write_text("Tents are waterproof to 3000 mm.", "utf-8")
    archivist.ingest([str(tmp_path / "kb")], "gear", description="tent specifications")
    archivist.close()
    client = Client(build_server(StoreTools(archivist.settings, ["gear"])))
    tools, (listed,) = anyio.run(session, client, [("list_stores", {})])
    assert [t.name for t in tools] == ["list_stores", "search_gear"]
    assert "tent specifications" in tools[1].description
    assert [s["store"] for s in listed.structured_content["stores"]] == ["gear"]


def test_over_stdio_a_client_gets_the_passages_archivist_search_prints(
    ollama, home, store, tmp_path
):
    # Tracing on: its notice goes to stderr, where it cannot break the protocol on stdout.
    nowhere = f"http://127.0.0.1:{free_port()}"
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "archivist", "mcp", "--store", "shop_docs"],
        env={
            "OLLAMA_HOST": ollama.url,
            "ARCHIVIST_HOME": str(home),
            "LANGSMITH_TRACING": "true",
            "LANGSMITH_ENDPOINT": nowhere,
        },
        cwd=ROOT,
    )
    with open(tmp_path / "stderr", "w") as errlog:
        client = Client(stdio_client(params, errlog=errlog))
        calls = [("search_shop_docs", {"query": QUERY}), ("list_stores", {})]
        tools, (found, listed) = anyio.run(session, client, calls)
    assert [t.name for t in tools] == ["list_stores", "search_shop_docs"]
    expected = cli_search(ollama, home)
    assert found.structured_content == {"results": expected}
    assert found.content[0].text == format_results("search_shop_docs", QUERY, expected)
    assert listed.structured_content["stores"][0]["tool"] == "search_shop_docs"
    notice = (tmp_path / "stderr").read_text()
    assert "Tracing is on (LANGSMITH_TRACING=true)" in notice and nowhere in notice


def test_a_connected_client_sees_what_an_ingest_beside_it_stored(ollama, home, store, tmp_path):
    # The server keeps the store open between calls; an ingest in another process still
    # gets it (the server gives it up when asked) and the next call searches what it stored.
    (tmp_path / "kb").mkdir()
    (tmp_path / "kb" / "stoves.md").write_text("The titanium stove boils water in 90 s.", "utf-8")
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "archivist", "mcp", "--store", "shop_docs"],
        env={"OLLAMA_HOST": ollama.url, "ARCHIVIST_HOME": str(home)},
        cwd=ROOT,
    )
    question = {"query": "titanium stove boils water", "source": "stoves.md"}

    async def calls() -> tuple[types.CallToolResult, subprocess.CompletedProcess, list]:
        async with Client(stdio_client(params, errlog=subprocess.DEVNULL)) as client:
            before = await client.call_tool("search_shop_docs", question)
            ingest = await anyio.to_thread.run_sync(
                lambda: run_cli(
                    "ingest",
                    str(tmp_path / "kb"),
                    "--store",
                    "shop_docs",
                    ollama_url=ollama.url,
                    home=home,
                    process=True,
                )
            )
            after = await client.call_tool("search_shop_docs", question)
            return before, ingest, after.structured_content["results"]

    before, ingest, found = anyio.run(calls)
    assert before.is_error and "stoves.md" in before.content[0].text
    assert ingest.returncode == 0, ingest.stderr
    assert [p["source"] for p in found] == ["kb/stoves.md"]


def test_over_http_a_client_gets_the_passages_archivist_search_prints(ollama, home, store):
    port = free_port()
    env = {**os.environ, "OLLAMA_HOST": ollama.url, "ARCHIVIST_HOME": str(home)}
    server = subprocess.Popen(
        [sys.executable, "-m", "archivist", "mcp", "--http", str(port)],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:

        def listening() -> bool:
            assert server.poll() is None, server.stderr.read()
            with socket.socket() as sock:
                return sock.connect_ex(("127.0.0.1", port)) == 0

        wait_for(listening, "the MCP server to listen")
        client = Client(f"http://127.0.0.1:{port}/mcp")
        calls = [("search_shop_docs", {"query": QUERY, "source": "refund.md"})]
        tools, (found,) = anyio.run(session, client, calls)
        # The server holds no store between requests: the CLI opens it meanwhile.
        expected = cli_search(ollama, home, QUERY, "--source", "refund.md")
    finally:
        server.terminate()
        _, stderr = server.communicate(timeout=30)
    assert [t.name for t in tools] == ["list_stores", "search_shop_docs"]
    assert found.structured_content == {"results": expected}
    assert {r["source"] for r in expected} == {"refund.md"}
    assert found.content[0].text == format_results(
        "search_shop_docs", QUERY, expected, source="refund.md"
    )
    assert f"Serving MCP at http://127.0.0.1:{port}/mcp" in stderr


def test_an_unknown_store_stops_the_server_before_it_starts(ollama, home, store):
    done = run_cli("mcp", "--store", "nowhere", ollama_url=ollama.url, home=home)
    assert done.returncode == 1 and done.stdout == ""
    assert "There is no store named 'nowhere'" in done.stderr
    assert "archivist ingest PATH --store nowhere" in done.stderr
    assert "Traceback" not in done.stderr
    mistyped = run_cli("mcp", "--store", "shop_docs_x", ollama_url=ollama.url, home=home)
    assert mistyped.returncode == 1 and mistyped.stdout == ""
    assert "There is no store named 'shop_docs_x'. Did you mean 'shop_docs'?" in mistyped.stderr


def test_a_store_built_with_another_model_is_served_with_that_model(archivist, ollama):
    archivist.ingest([str(SHOP)], "small")
    archivist.close()
    other = archivist.settings.with_overrides(embed_model="all-minilm")
    client = Client(build_server(StoreTools(other, ["small"])))
    ollama.clear_requests()
    _, (found,) = anyio.run(session, client, [("search_small", {"query": QUERY})])
    assert not found.is_error and found.structured_content["results"]
    assert {r["model"] for r in ollama.requests_to("/api/embed")} == {"nomic-embed-text"}


def test_the_store_is_shared_with_another_holder(archivist, store):
    server = build_server(StoreTools(archivist.settings, [store]))

    async def search() -> types.CallToolResult:
        async with Client(server) as client:
            return await client.call_tool("search_shop_docs", {"query": QUERY})

    # Another holder of the embedded store (like a chat), idle: it gives the store up.
    assert archivist.store(store).count()
    found = anyio.run(search)
    assert not found.is_error and found.structured_content["results"]
    assert archivist.store(store).count()  # and takes it back from the server
    archivist.close()


def test_a_port_in_use_is_refused_with_the_fix(ollama, home, store):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = run_cli("mcp", "--http", str(port), ollama_url=ollama.url, home=home)
    assert done.returncode == 1
    assert f"Cannot serve MCP on 127.0.0.1:{port}: Address already in use." in done.stderr
    assert "Choose another port with --http PORT." in done.stderr
    assert "Serving MCP" not in done.stderr and "Traceback" not in done.stderr


def test_a_damaged_store_never_takes_the_others_down(archivist, store, ollama, tmp_path):
    from conftest import write_files

    other = write_files(tmp_path / "other", {"stove.md": "# Stoves\n\nStoves boil water."})
    archivist.ingest([str(other)], "other")
    archivist.close()
    (archivist.settings.store_path / store / "collection.json").write_text("{")

    # Serving all stores: the damaged one's tool says so; the other is listed and searched.
    client = Client(build_server(StoreTools(archivist.settings)))
    calls = [("list_stores", {}), ("search_other", {"query": "stoves"}),
             ("search_shop_docs", {"query": "refund"})]  # fmt: skip
    tools, (listed, found, damaged) = anyio.run(session, client, calls)
    assert [t.name for t in tools] == ["list_stores", "search_other", "search_shop_docs"]
    assert "Store 'shop_docs' is damaged" in tools[2].description
    stores = {s["store"]: s for s in listed.structured_content["stores"]}
    assert stores["other"]["chunks"] == 1 and stores["shop_docs"]["damaged"]
    assert not found.is_error and found.structured_content["results"]
    assert damaged.is_error and "archivist doctor --repair" in damaged.content[0].text

    # Serving only the other store: the damaged one is never opened, nor named.
    client = Client(build_server(StoreTools(archivist.settings, ["other"])))
    _, (listed,) = anyio.run(session, client, [("list_stores", {})])
    assert not listed.is_error
    assert [s["store"] for s in listed.structured_content["stores"]] == ["other"]


def test_the_tools_declare_the_shape_of_their_structured_content(archivist, store):
    import jsonschema

    client = Client(build_server(StoreTools(archivist.settings)))
    calls = [("search_shop_docs", {"query": QUERY}), ("list_stores", {})]
    # The SDK's client checks each result against its tool's declared schema as it calls it.
    tools, (found, listed) = anyio.run(session, client, calls)
    schemas = {t.name: t.output_schema for t in tools}
    assert set(schemas) == {"list_stores", "search_shop_docs"}
    assert all(s and s["type"] == "object" for s in schemas.values())
    assert schemas["search_shop_docs"]["required"] == ["results"]
    passage = schemas["search_shop_docs"]["$defs"]["Passage"]
    assert {"rank", "score", "source", "chunk_id", "text"} <= set(passage["required"])
    jsonschema.validate(found.structured_content, schemas["search_shop_docs"])
    jsonschema.validate(listed.structured_content, schemas["list_stores"])
    broken = {"results": [{"rank": "first", "source": "refund.md"}]}
    with pytest.raises(jsonschema.ValidationError):  # the schema says something
        jsonschema.validate(broken, schemas["search_shop_docs"])
    archivist.close()


def test_an_unknown_store_is_told_to_the_client_that_started_the_server(ollama, home, store):
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "archivist", "mcp", "--store", "nowhere"],
        env={"OLLAMA_HOST": ollama.url, "ARCHIVIST_HOME": str(home)},
        cwd=ROOT,
    )

    async def connect() -> tuple[str | None, MCPError | None]:
        async with Client(stdio_client(params, errlog=subprocess.DEVNULL)) as client:
            instructions = client.instructions
            try:
                await client.list_tools()
            except MCPError as refused:
                return instructions, refused
        return instructions, None

    instructions, refused = anyio.run(connect)
    assert refused is not None
    assert "There is no store named 'nowhere'" in str(refused)
    assert "archivist ingest PATH --store nowhere" in str(refused)
    assert instructions.startswith("Archivist cannot serve: There is no store named 'nowhere'")
