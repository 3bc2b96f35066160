"""An embedding model that can read the store: the notice when it cannot, and multilingual
models (bge-m3, nomic-embed-text-v2-moe, qwen3-embedding) end to end."""

import json

from archivist.tools.prefixes import default_prefixes, language_notice, reads
from tests.conftest import cli, run_cli
from tests.fake_ollama import ModelSpec

PAGES = {
    "button.md": "# 按钮\n\n按钮用于开始一个即时操作。添加 loading 属性即可让按钮处于加载状态。\n",
    "table.md": "# 表格\n\n表格用于展示行列数据。通过 rowSelection 配置行选择。\n",
    "upload.md": "# 上传\n\n文件选择上传和拖拽上传控件，上传时显示进度。\n",
    "intro.md": "# Intro\n\nAn English page among Chinese ones.\n",
}


def chinese_docs(tmp_path):
    folder = tmp_path / "docs"
    folder.mkdir()
    for name, text in PAGES.items():
        (folder / name).write_text(text, encoding="utf-8")
    return folder


def test_the_notice_names_the_language_models_that_read_it_and_the_command():
    texts = ["按钮用于开始一个即时操作。"] * 3 + ["An English page."]
    notice = language_notice("ui", "all-minilm:latest", texts)
    assert notice.startswith("Store 'ui' is mostly Chinese (75% of its chunks)")
    assert "all-minilm:latest was not trained to read" in notice
    assert "bge-m3, nomic-embed-text-v2-moe, qwen3-embedding" in notice
    assert "archivist ingest PATH --store ui --reindex --embed-model bge-m3" in notice
    # Half or less, a model that reads it, or an English store: nothing to say.
    assert language_notice("ui", "all-minilm", texts[2:]) is None
    assert language_notice("ui", "bge-m3", texts) is None
    assert language_notice("ui", "nomic-embed-text", ["Refunds within 30 days."]) is None
    assert "mostly Cyrillic" in language_notice("ru", "mxbai-embed-large", ["Возврат денег."])


def test_multilingual_models_get_their_prefixes_and_read_every_language():
    assert default_prefixes("bge-m3:latest") == ("", "")
    assert default_prefixes("nomic-embed-text-v2-moe") == ("search_document: ", "search_query: ")
    document, query = default_prefixes("qwen3-embedding:0.6b")
    assert document == "" and query.startswith("Instruct: Given a web search query")
    assert query.endswith("\nQuery:")
    for model in ("bge-m3", "nomic-embed-text-v2-moe:latest", "qwen3-embedding:8b"):
        assert reads(model, "按钮加载状态")  # the fusion counts their agreement with BM25
    assert not reads("nomic-embed-text:v1.5", "按钮加载状态")


def test_ingest_stores_and_doctor_say_so_and_a_reindex_with_a_model_that_reads_it(
    ollama, home, tmp_path
):
    folder = chinese_docs(tmp_path)
    done = cli("ingest", str(folder), "--store", "ui", "--embed-model", "all-minilm",
               ollama=ollama, home=home)  # fmt: skip
    assert "Store 'ui' is mostly Chinese (75% of its chunks)" in done.stderr
    assert "--reindex --embed-model bge-m3" in done.stderr
    listed = cli("stores", ollama=ollama, home=home)
    assert "Store 'ui' is mostly Chinese" in listed.stderr
    [entry] = json.loads(cli("stores", "--json", ollama=ollama, home=home).stdout)
    assert entry["embedding_notice"].startswith("Store 'ui' is mostly Chinese")
    doctor = run_cli("doctor", ollama_url=ollama.url, home=home)
    assert "! Store 'ui' is mostly Chinese" in doctor.stdout

    # bge-m3 (1,024 dimensions, no prefixes) re-indexes it; the notice is gone.
    ollama.add_model(ModelSpec("bge-m3:latest", ["embedding"], embedding_length=1024,
                               context_length=8192, family="bert"))  # fmt: skip
    ollama.clear_requests()
    rebuilt = cli("ingest", str(folder), "--store", "ui", "--reindex", "--embed-model", "bge-m3",
                  ollama=ollama, home=home)  # fmt: skip
    assert "mostly Chinese" not in rebuilt.stderr
    assert {r["model"] for r in ollama.requests_to("/api/embed")} == {"bge-m3"}
    [entry] = json.loads(cli("stores", "--json", ollama=ollama, home=home).stdout)
    assert entry["embed_model"] == "bge-m3" and entry["embedding_notice"] is None
    assert "mostly Chinese" not in run_cli("doctor", ollama_url=ollama.url, home=home).stdout
    found = cli("search", "按鈕載入狀態", "--store", "ui", "--json", ollama=ollama, home=home)
    assert json.loads(found.stdout)[0]["source"].endswith("button.md")


def test_qwen3_embedding_instructs_its_queries_and_not_its_documents(ollama, home, tmp_path):
    folder = chinese_docs(tmp_path)
    ollama.add_model(ModelSpec("qwen3-embedding:0.6b", ["embedding"], embedding_length=1024,
                               context_length=32768, family="qwen3"))  # fmt: skip
    cli("ingest", str(folder), "--store", "ui", "--embed-model", "qwen3-embedding:0.6b",
        ollama=ollama, home=home)  # fmt: skip
    documents = [t for r in ollama.requests_to("/api/embed") for t in r["input"]]
    assert documents and not any(t.startswith("Instruct:") for t in documents)
    ollama.clear_requests()
    cli("search", "表格行选择", "--store", "ui", ollama=ollama, home=home)
    [query] = [t for r in ollama.requests_to("/api/embed") for t in r["input"]]
    assert query.startswith("Instruct: Given a web search query") and query.endswith(
        "\nQuery:表格行选择"
    )
