"""Follow-up benchmark: hit@1 and hit@5 of a conversation's second question, searched as typed,
with the earlier subject added by the rule (archivist.agent.followup), and with the whole
previous question prepended (the naive way to carry a subject).

    .venv/bin/python benchmarks/followups.py [--embedder hashing|minilm]

The set is our own: the sample shop (examples/shop) and three short Chinese policies written
here, with conversations of two questions whose second leans on the first ("and how do I make
a claim?", "那如何申请?"), and conversations whose second question changes the topic (the
rule must leave those alone). A hit is the follow-up's gold document among the top results of
hybrid search through the retrieval tool. The chat model's own condensing is not measured: it
depends on the model, and the fake's does nothing useful on purpose. The embedder is the fake
Ollama's hashing one by default (no model needed) or, with `--embedder minilm`, the offline
all-MiniLM-L6-v2 of benchmarks/retrieval.py. It prints a table; these are figures, not tests.
"""

import argparse
import shutil
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from fake_ollama import embed_text  # noqa: E402
from langchain_core.embeddings import Embeddings  # noqa: E402
from qdrant_client import QdrantClient  # noqa: E402

from archivist.agent.followup import with_subject  # noqa: E402
from archivist.agent.retrieval import make_retrieval_tool  # noqa: E402
from archivist.ingest.graph import build_ingest_graph, run_ingest  # noqa: E402
from archivist.ingest.request import IngestRequest  # noqa: E402
from archivist.tools.embedding import PrefixedEmbeddings  # noqa: E402
from archivist.tools.search import SearchRequest  # noqa: E402
from archivist.tools.store import KnowledgeStore  # noqa: E402

CHINESE = {
    "保修政策.md": (
        "# 保修政策\n\n## 保修期限\n\n"
        "帐篷和背包的保修期为两年，登山鞋为一年，自收货之日起计算。\n\n"
        "## 如何申请保修\n\n申请保修时，请在账户中提交订单号和损坏部位的照片，"
        "我们会在五个工作日内答复。\n"
    ),
    "会员积分.md": (
        "# 会员积分\n\n## 获得积分\n\n"
        "每消费一欧元可获得一个积分，撰写商品评价可额外获得十个积分。\n\n"
        "## 积分有效期\n\n积分自获得之日起二十四个月后过期，账户每年会收到一次过期提醒。\n"
    ),
    "退款政策.md": (
        "# 退款政策\n\n## 退款期限\n\n收货后三十天内可以申请退款。\n\n"
        "## 损坏或错发的商品\n\n收到损坏或错发的商品时，请在四十八小时内联系客服，"
        "我们承担退货运费并全额退款。\n"
    ),
}
FOLLOW_UPS = [
    ("How are refunds paid back?", "how long does it take?", "refund.md"),
    ("How do I pay in instalments with PayLater?", "is there a fee?", "payment.md"),
    ("How do I make a warranty claim?", "how long does it take?", "warranty.md"),
    ("How do I request a return authorisation?", "is there a fee?", "returns.md"),
    ("Which carriers deliver my parcel?", "can I track it?", "shipping.md"),
    ("How do I send an item back?", "can I track it?", "returns.md"),
    ("How long do you keep my data?", "how do I contact you about it?", "privacy.md"),
    ("How should I clean my tent?", "and re-waterproofing?", "product-care.md"),
    ("What does standard delivery cost?", "and what if it is late?", "shipping.md"),
    ("How do I redeem Trail Points?", "what happens to them after a return?", "loyalty.md"),
    ("帐篷的保修期是多久?", "那如何申请?", "保修政策.md"),
    ("退款期限是多少天?", "损坏的呢?", "退款政策.md"),
    ("如何获得会员积分?", "那它们什么时候过期?", "会员积分.md"),
    ("配送到香港需要多久?", "那退货呢?", "配送说明.md"),
]
TOPIC_CHANGES = [
    ("How long is the warranty on tents?", "Which carriers deliver parcels?", "shipping.md"),
    ("How do I earn Trail Points?", "What payment methods do you accept?", "payment.md"),
    ("What is the refund window?", "How do I clean a down jacket?", "product-care.md"),
    ("How long do you keep my data?", "How do I print the return label?", "returns.md"),
    ("帐篷的保修期是多久?", "退款期限是多少天?", "退款政策.md"),
    ("如何获得会员积分?", "配送到香港需要多久?", "配送说明.md"),
]
METHODS: dict[str, Callable[[str, str], str]] = {
    "as typed": lambda first, second: second,
    "rule (earlier subject)": lambda first, second: with_subject(second, [first]),
    "previous question prepended": lambda first, second: f"{first} {second}",
}
K = 5


class Hashing(Embeddings):
    """The fake Ollama's embedding: hashed words, CJK characters and bigrams (no model)."""

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        return [embed_text(text, 256) for text in texts]

    def embed_query(self, text: str) -> list[float]:
        return embed_text(text, 256)


def build(workdir: Path, embedder: Embeddings):
    folder = workdir / "docs"
    shutil.copytree(ROOT / "examples" / "shop", folder)
    for name, text in CHINESE.items():
        (folder / name).write_text(text, encoding="utf-8")
    client = QdrantClient(path=str(workdir / "qdrant"))
    store = KnowledgeStore(client, "docs")
    embeddings = PrefixedEmbeddings(embedder, "all-minilm")
    store.ensure(embeddings.fingerprint(len(embeddings.embed_query("dimension"))))
    report = run_ingest(build_ingest_graph(store, embeddings), IngestRequest((str(folder),)))
    assert not report.failed, report.failed
    return client, make_retrieval_tool(store, embeddings, SearchRequest(k=K))


def hits(tool, cases, method, log: Callable[[str], None]) -> tuple[float, float]:
    at1 = at5 = 0
    for first, second, gold in cases:
        query = method(first, second)
        message = tool.invoke(
            {"name": tool.name, "args": {"query": query}, "id": "q", "type": "tool_call"}
        )
        sources = [r["source"] for r in message.artifact]
        log(f"  {query!r}: {', '.join(sources[:3])}{'' if sources[:1] == [gold] else '  ✗'}")
        at1 += sources[:1] == [gold]
        at5 += gold in sources[:K]
    return at1 / len(cases), at5 / len(cases)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--embedder", choices=["hashing", "minilm"], default="hashing")
    parser.add_argument("--verbose", action="store_true", help="each query's top sources")
    args = parser.parse_args()

    def log(line: str) -> None:
        if args.verbose:
            print(line, file=sys.stderr)

    if args.embedder == "minilm":
        from retrieval import MiniLM

        embedder: Embeddings = MiniLM()
    else:
        embedder = Hashing()
    with tempfile.TemporaryDirectory() as workdir:
        client, tool = build(Path(workdir), embedder)
        try:
            rows = [
                (
                    name,
                    hits(tool, FOLLOW_UPS, method, log),
                    hits(tool, TOPIC_CHANGES, method, log),
                )
                for name, method in METHODS.items()
            ]
        finally:
            client.close()
    print(f"embedder: {args.embedder}; hybrid search, k = {K}")
    print(f"{len(FOLLOW_UPS)} follow-ups, {len(TOPIC_CHANGES)} changes of topic\n")
    print("| query searched | follow-up hit@1 | hit@5 | topic change hit@1 | hit@5 |")
    print("|---|---|---|---|---|")
    for name, (f1, f5), (t1, t5) in rows:
        print(f"| {name} | {f1:.2f} | {f5:.2f} | {t1:.2f} | {t5:.2f} |")


if __name__ == "__main__":
    main()
