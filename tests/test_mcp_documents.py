"""`archivist mcp`: the official SDK's client lists each store's three tools with strict
schemas (`--tools all`), calls list and read, and reads every source as a resource (any toolset)."""

import anyio
import jsonschema
import pytest
from conftest import SHOP
from mcp import Client
from mcp.shared.exceptions import MCPError

from archivist.agent.documents import describe_list, describe_read
from archivist.serving import mcp_documents
from archivist.serving.mcp import StoreTools, build_server
from archivist.tools.documents import stored_source


async def _talk(client: Client, calls: list[tuple[str, dict]], reads: list[str]):
    async with client:
        tools = (await client.list_tools()).tools
        results = [await client.call_tool(name, args) for name, args in calls]
        listed = (await client.list_resources()).resources
        read = [await client.read_resource(uri) for uri in reads]
        return tools, results, listed, read


def test_the_three_tools_per_store_and_every_source_as_a_resource(archivist, store):
    served = StoreTools(archivist.settings.with_overrides(tools="all"))
    client = Client(build_server(served))
    calls = [
        ("list_shop_docs", {"contains": "RMA"}),
        ("read_shop_docs", {"source": "returns", "heading": "Exchanges"}),
        ("read_shop_docs", {"source": "nowhere.md"}),
    ]
    uri = "archivist://shop_docs/%E9%85%8D%E9%80%81%E8%AF%B4%E6%98%8E.md"
    tools, (listed, read, missing), resources, [chinese] = anyio.run(_talk, client, calls, [uri])

    opened = archivist.store(store)
    assert [t.name for t in tools] == [
        "list_stores",
        "search_shop_docs",
        "list_shop_docs",
        "read_shop_docs",
    ]
    by_name = {t.name: t for t in tools}
    for name in ("list_shop_docs", "read_shop_docs"):
        schema = by_name[name].input_schema
        assert schema["additionalProperties"] is False
    assert set(by_name["list_shop_docs"].input_schema["properties"]) == {
        "path",
        "contains",
        "page",
    }
    read_schema = by_name["read_shop_docs"].input_schema
    assert set(read_schema["properties"]) == {"source", "lines", "page", "heading"}
    assert read_schema["required"] == ["source"]
    assert by_name["list_shop_docs"].description == describe_list(opened)
    assert by_name["read_shop_docs"].description == describe_read(opened)
    # Every tool declares its structured content's shape (the SDK's client checked each
    # result above against it); the list and read tools' is checked here too.
    assert all(t.output_schema and t.output_schema["type"] == "object" for t in tools)
    for name, result in (("list_shop_docs", listed), ("read_shop_docs", read)):
        schema = by_name[name].output_schema
        assert schema["required"] == ["results"]
        jsonschema.validate(result.structured_content, schema)
    with pytest.raises(jsonschema.ValidationError):  # the schema says something
        jsonschema.validate(
            {"results": [{"rank": "first"}]}, by_name["read_shop_docs"].output_schema
        )

    rma = {f.name: f.read_text(encoding="utf-8").lower().count("rma") for f in SHOP.iterdir()}
    assert {r["source"]: r["score"] for r in listed.structured_content["results"]} == {
        name: float(n) for name, n in rma.items() if n
    }
    assert read.content[0].text.startswith(
        '<document tool="read_shop_docs" source="returns.md" part="the section \'Exchanges\'">'
    )
    assert missing.is_error
    assert "No source in 'shop_docs' is called 'nowhere.md'" in missing.content[0].text

    assert sorted(r.name for r in resources) == sorted(
        f"shop_docs/{f.name}" for f in SHOP.iterdir()
    )
    refund = next(r for r in resources if r.name == "shop_docs/refund.md")
    assert str(refund.uri) == "archivist://shop_docs/refund.md" and refund.title == "Refund Policy"
    assert refund.size == (SHOP / "refund.md").stat().st_size
    [content] = chinese.contents
    assert content.text == stored_source(opened, "配送说明.md").text
    assert content.text.startswith((SHOP / "配送说明.md").read_text(encoding="utf-8")[:20])
    archivist.close()


def test_search_only_serves_the_sources_as_resources_in_pages_and_refuses_bad_uris(
    archivist, store, monkeypatch
):
    monkeypatch.setattr(mcp_documents, "PAGE", 2)

    async def talk(client: Client):
        async with client:
            names = [t.name for t in (await client.list_tools()).tools]
            pages, cursor = [], None
            while True:
                page = await client.list_resources(cursor=cursor)
                pages.append([r.name for r in page.resources])
                cursor = page.next_cursor
                if cursor is None:
                    break
            read = await client.read_resource("archivist://shop_docs/refund.md")
            with pytest.raises(MCPError) as other:
                await client.read_resource("archivist://other/refund.md")
            with pytest.raises(MCPError) as cursed:
                await client.list_resources(cursor="nowhere")
            return names, pages, read, str(other.value), str(cursed.value)

    plain = Client(build_server(StoreTools(archivist.settings)))
    names, pages, read, other, cursed = anyio.run(talk, plain)
    assert names == ["list_stores", "search_shop_docs"]
    files = sorted(f"shop_docs/{f.name}" for f in SHOP.iterdir())
    assert [len(p) for p in pages] == [2] * (len(files) // 2) + [len(files) % 2] * (
        len(files) % 2 > 0
    )
    assert sorted(n for p in pages for n in p) == files
    assert read.contents[0].text == stored_source(archivist.store(store), "refund.md").text
    assert "resources are archivist://<store>/<source>" in other
    assert "Unknown cursor 'nowhere'" in cursed
    archivist.close()
