"""Hybrid search puts first the page named in the question's words: the guide page `模板引用`
before a tutorial step and an API entry that mention template refs more often."""

import pytest
from qdrant_client import QdrantClient

from archivist.tools import sparse
from archivist.tools.ranking import name_share, page_name
from archivist.tools.search import SearchRequest
from archivist.tools.store import Chunk, ChunkWrite, KnowledgeStore, connect

# An English-only model: it does not read Chinese questions, so hybrid search ranks them by
# BM25 and the page names alone.
FINGERPRINT = {
    "embed_model": "all-minilm",
    "dimension": 4,
    "document_prefix": "",
    "query_prefix": "",
}

# A Chinese docs site in miniature, each page one chunk after its heading path. The tutorial
# step and the API entry say 模板引用, DOM and 访问 more often than the guide page does, so
# BM25 alone ranks them first; only the guide page is named 模板引用.
PAGES = {
    "guide/template-refs.md": (
        {"headings": ["模板引用"]},
        "虽然 Vue 的声明性渲染模型为你抽象了大部分对 DOM 的直接操作，但在某些情况下，我们仍然"
        "需要直接访问底层 DOM 元素。要实现这一点，我们可以使用特殊的 ref 属性。",
    ),
    "tutorial/step-9.md": (
        {"headings": ["生命周期和模板引用"]},
        "有时我们需要手动操作 DOM。这时我们需要使用模板引用，也就是指向模板中一个 DOM 元素的"
        "引用。通过模板引用访问 DOM 元素，访问 DOM 元素之前要等组件挂载。",
    ),
    "api/component-instance.md": (
        {"headings": ["组件实例", "$refs"]},
        "一个包含 DOM 元素和组件实例的对象，通过模板引用注册。用模板引用访问 DOM 元素。",
    ),
    "guide/lifecycle.md": (
        {"headings": ["生命周期钩子"]},
        "每个组件实例在创建时都需要经历一系列的初始化步骤，比如设置好数据侦听。",
    ),
    "guide/computed.md": (
        {"headings": ["计算属性"]},
        "模板中的表达式虽然方便，但也只能用来做简单的操作。",
    ),
}


@pytest.fixture(params=["edge", "local"])
def client(request, tmp_path) -> QdrantClient:
    client = connect(tmp_path / "edge") if request.param == "edge" else QdrantClient(":memory:")
    yield client
    client.close()


def _site(
    client, pages: dict[str, tuple[dict, str]], scheme: str = sparse.DEFAULT_SCHEME
) -> KnowledgeStore:
    store = KnowledgeStore(client, "site")
    store.ensure({**FINGERPRINT, "sparse": scheme})
    store.upsert(
        [
            ChunkWrite(Chunk(text, source, 0, metadata), [1.0, 0.0, 0.0, 0.0], source, 1)
            for source, (metadata, text) in pages.items()
        ]
    )
    return store


def _first(store: KnowledgeStore, question: str, mode: str) -> str:
    found = store.search([1.0, 0.0, 0.0, 0.0], question, SearchRequest(k=3, mode=mode))
    return found[0]["source"]


@pytest.mark.parametrize("question", ["模板引用访问 DOM 元素", "模板引用存取 DOM 元素"])
def test_the_page_named_by_the_question_comes_first_in_either_script(client, question):
    store = _site(client, PAGES)
    # BM25 alone puts first a page that says the question's words more often...
    assert _first(store, question, "sparse") != "guide/template-refs.md"
    # ... hybrid search the page whose name the question holds whole (Simplified, or the
    # Taiwan wording, 存取 for 访问).
    assert _first(store, question, "hybrid") == "guide/template-refs.md"


def test_a_front_matter_title_names_a_page_before_its_first_heading(client):
    pages = {
        source: ({**metadata, "headings": ["代码演示", *metadata["headings"]]}, text)
        for source, (metadata, text) in PAGES.items()
    }
    # Every page's first heading is now the same; a dumi page's name is in its front matter.
    pages["guide/template-refs.md"][0]["title"] = "Template Refs"
    pages["guide/template-refs.md"][0]["subtitle"] = "模板引用"
    store = _site(client, pages)
    assert _first(store, "模板引用访问 DOM 元素", "hybrid") == "guide/template-refs.md"


def test_without_page_names_hybrid_ranks_a_chinese_question_as_bm25_does(client):
    pages = {source: ({}, text) for source, (_, text) in PAGES.items()}
    store = _site(client, pages)
    question = "模板引用访问 DOM 元素"
    assert _first(store, question, "hybrid") == _first(store, question, "sparse")


def test_a_page_name_is_its_titles_else_its_first_heading():
    assert page_name({"title": "Button", "subtitle": "按钮", "headings": ["API"]}) == "Button 按钮"
    assert page_name({"headings": ["模板引用", "访问"]}) == "模板引用"
    assert page_name({"title": " ", "headings": []}) == ""
    assert page_name({}) == ""


def test_the_share_is_of_the_names_terms_the_question_holds():
    from qdrant_client import models

    def point(name: str) -> models.ScoredPoint:
        payload = {"source": name, "metadata": {"headings": [name]} if name else {}}
        return models.ScoredPoint(id=1, version=0, score=1.0, payload=payload)

    share = name_share({1, 2, 3}, lambda name: frozenset(map(ord, name)) if name else frozenset())
    assert share(point("\x01\x02")) == 1.0
    assert share(point("\x01\x04\x05\x06")) == 0.25
    assert share(point("\x07")) == 0.0
    assert share(point("")) == 0.0


# The tokenizer reads 给页面加水印 as 给 / 页面 / 加水 ("add water") / 印: a page that says 页面
# often outranks the watermark page on its words, and only their CJK bigrams share 水印.
WATERMARK = {
    "components/watermark.md": ({}, "页面需要添加水印标识版权时使用。适用于防止信息盗用。"),
    "components/form.md": ({}, "页面内如果有多个表单，页面滚动定位可能会找到另一个页面的表单项。"),
    "components/button.md": ({}, "按钮用于开始一个即时操作。"),
    "components/image.md": ({}, "可预览的图片，加载大图时使用。"),
    "components/tabs.md": ({}, "选项卡切换组件，提供平级的区域将大块内容进行收纳和展现。"),
}


@pytest.mark.parametrize("question", ["给页面加水印", "給頁面加浮水印"])
def test_cjk_bigrams_find_a_word_the_tokenizer_parts_differently(client, question):
    store = _site(client, WATERMARK)
    assert _first(store, question, "sparse") == "components/watermark.md"
    assert _first(store, question, "hybrid") == "components/watermark.md"


def test_a_store_of_the_scheme_without_bigrams_is_searched_as_it_was_built(client):
    store = _site(client, WATERMARK, sparse.FOLDED_TW_SCHEME)
    assert store.sparse_encoder().scheme == sparse.FOLDED_TW_SCHEME
    assert _first(store, "给页面加水印", "sparse") == "components/form.md"
