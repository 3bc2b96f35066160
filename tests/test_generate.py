"""`archivist eval generate`: test sets written from a store's passages by the fake's chat model.

The fake answers a request for a `question` and a `fragment` about a `<passage>` with a
question about the first sentence of the passage's body, in its language, and that sentence's
first words as the fragment (`written_question`); scripted turns stand for a model's bad output.
"""

import json
from pathlib import Path

from conftest import run_cli
from fake_ollama import FakeOllama, written_question

from archivist.app import Archivist
from archivist.evaluation.generate import (
    COPY_RUN,
    SCHEMA,
    Plan,
    check,
    language,
    meta_path,
    passage_key,
    sample,
)
from archivist.evaluation.generate import generate as generate_set
from archivist.evaluation.run import load_dataset


def chunks_in_order(archivist: Archivist, store: str, seed: int = 42) -> list[dict]:
    """The store's passages in the order generation tries them; the store is released after."""
    order = sample(archivist.store(store).chunks(), seed)
    archivist.close()
    return order


def generate(ollama: FakeOllama, home: Path, out: Path, *args: str):
    return run_cli(
        "eval", "generate", "--store", "shop_docs", "--out", str(out), *args,
        ollama_url=ollama.url, home=home,
    )  # fmt: skip


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_generate_writes_cases_eval_reads_whose_sources_hold_the_passage(
    ollama, home, archivist, store, tmp_path
):
    order = chunks_in_order(archivist, store)
    passages = {passage_key(c): c for c in order}
    out = tmp_path / "sets" / "shop.jsonl"

    done = generate(ollama, home, out, "-n", "10")

    assert done.returncode == 0, done.stderr
    cases = load_dataset(out)  # the format `archivist eval` reads
    written = lines(out)
    generated = [c for c in written if c["kind"] == "passage"]
    assert len(generated) == 10
    # Ten sources, one passage from each first: the set spreads over the store.
    assert [c["passage"] for c in generated] == [passage_key(c) for c in order[:10]]
    assert len({c["expect_sources"][0] for c in generated}) == 10
    for case in generated:
        passage = passages[case["passage"]]
        assert case["expect_sources"] == [passage["source"]]
        assert case["expect_tool"] == "search_shop_docs"
        assert case["question"] == written_question(passage["text"])["question"]
        assert case["answer_contains"][0] in passage["text"]
        assert case["language"] == language(passage["text"])
    chinese = [c for c in generated if c["expect_sources"] == ["配送说明.md"]]
    assert chinese and chinese[0]["language"] == "zh" and "关于" in chinese[0]["question"]
    assert [(c["kind"], c["expect_tool"]) for c in written[10:]] == [
        ("no_tool", None),
        ("unanswerable", "search_shop_docs"),
    ]
    assert [c.id for c in cases] == [c["id"] for c in written]
    # Each passage went to the model once, with the schema as Ollama's `format`.
    chats = ollama.requests_to("/api/chat")
    assert len(chats) == 10 and all(c["format"] == SCHEMA for c in chats)
    assert all(c["options"]["temperature"] == 0 and c["options"]["seed"] == 42 for c in chats)
    assert "<passage>" in chats[0]["messages"][-1]["content"]
    meta = json.loads(meta_path(out).read_text(encoding="utf-8"))
    assert (meta["store"], meta["model"], meta["seed"], meta["n"]) == (
        "shop_docs",
        "qwen2.5:3b",
        42,
        10,
    )
    assert meta["done"] and meta["dropped"] == {} and meta["cases"] == 12
    assert "Wrote 12 cases" in done.stderr and "Dropped no case." in done.stderr


def test_each_kind_of_bad_case_is_dropped_and_counted(ollama, home, archivist, store, tmp_path):
    order = chunks_in_order(archivist, store)
    first_words = " ".join(order[0]["text"].split()[: COPY_RUN + 4])
    good = written_question(order[2]["text"])
    fragment = written_question(order[1]["text"])["fragment"]
    replies = [
        {"question": f"Is it true that {first_words}?", "fragment": fragment},
        {"question": "What does this section say?", "fragment": fragment},
        good,
        {"question": good["question"], "fragment": written_question(order[3]["text"])["fragment"]},
        {"question": "Which colour are the elephants?", "fragment": "purple elephants"},
        {"question": "", "fragment": "x"},
    ]
    ollama.script(
        "qwen2.5:3b",
        *({"content": json.dumps(r)} for r in replies),
        {"content": "Sure! Here is a question about it."},
    )
    out = tmp_path / "shop.jsonl"

    done = generate(ollama, home, out, "-n", "3")

    assert done.returncode == 0, done.stderr
    meta = json.loads(meta_path(out).read_text(encoding="utf-8"))
    reasons = [
        "copies_passage",
        "needs_passage",
        "duplicate",
        "fragment_not_in_passage",
        "empty",
        "unreadable",
    ]
    assert meta["dropped_cases"] == [
        {"passage": passage_key(order[i]), "reason": r}
        for i, r in zip([0, 1, 3, 4, 5, 6], reasons, strict=True)
    ]
    assert meta["dropped"] == dict.fromkeys(reasons, 1)
    kept = [c for c in lines(out) if c["kind"] == "passage"]
    assert [c["passage"] for c in kept] == [passage_key(order[i]) for i in (2, 7, 8)]
    assert kept[0]["question"] == good["question"]
    assert (
        "Dropped 6: 1 copies_passage, 1 needs_passage, 1 duplicate, 1 fragment_not_in_passage, "
        "1 empty, 1 unreadable." in done.stderr
    )


def test_the_filters(tmp_path):
    passage = "Refunds are paid within 14 days to the card used for the order, minus fees."
    ok = "How long does a refund take to arrive?"
    assert check(ok, "14 days", passage, "en", []) is None
    assert check(ok, "within 14 DAYS", passage, "en", []) is None  # case and spacing aside
    assert check("What does the passage say?", "14 days", passage, "en", []) == "needs_passage"
    assert check("According to the text, when?", "14 days", passage, "en", []) == "needs_passage"
    copied = "Are refunds paid within 14 days to the card used for the order?"
    assert check(copied, "14 days", passage, "en", []) == "copies_passage"
    assert check(ok, "30 days", passage, "en", []) == "fragment_not_in_passage"
    assert check("How long does a refund take to arrive", "14 days", passage, "en", [ok]) == (
        "duplicate"
    )
    assert check("Who pays the fees on a refund?", "fees", passage, "en", [ok]) is None
    chinese = "包裹发出后，时效通常为 10–15 个工作日。"
    assert language(chinese) == "zh" and language(passage) == "en"
    assert check("包裹多久能送到？", "10–15 个工作日", chinese, "zh", []) is None
    assert check("这段说了什么？", "工作日", chinese, "zh", []) == "needs_passage"
    assert check("How long is delivery?", "工作日", chinese, "zh", []) == "wrong_language"


def test_sampling_spreads_over_sources_and_sizes_and_follows_the_seed():
    chunks = [
        {"source": s, "chunk_index": i, "size": 100 + 50 * i, "text": "x" * (100 + 50 * i)}
        for s in ("a.md", "b.md", "c.md")
        for i in range(9)
    ] + [{"source": "tiny.md", "chunk_index": 0, "size": 20, "text": "Signature."}]
    order = sample(chunks, 7)
    assert len(order) == 27  # too-short passages are never asked about
    assert {c["source"] for c in order[:3]} == {"a.md", "b.md", "c.md"}
    first_of_a = [c["chunk_index"] // 3 for c in order if c["source"] == "a.md"][:3]
    assert sorted(first_of_a) == [0, 1, 2]  # one short, one middle, one long
    assert sample(chunks, 7) == order
    assert sample(chunks, 8) != order


def test_the_same_seed_writes_the_same_set_and_another_seed_another(ollama, home, store, tmp_path):
    first, again, other = tmp_path / "a.jsonl", tmp_path / "b.jsonl", tmp_path / "c.jsonl"
    assert generate(ollama, home, first, "-n", "4").returncode == 0
    assert generate(ollama, home, again, "-n", "4").returncode == 0
    assert generate(ollama, home, other, "-n", "4", "--seed", "7").returncode == 0
    assert first.read_bytes() == again.read_bytes()
    assert lines(first) != lines(other)


def test_an_interrupted_generation_resumes_where_it_stopped(ollama, home, store, tmp_path):
    whole, out = tmp_path / "whole.jsonl", tmp_path / "out.jsonl"
    assert generate(ollama, home, whole, "-n", "8").returncode == 0
    ollama.clear_requests()
    ollama.stop_after("/api/chat", 3)

    stopped = generate(ollama, home, out, "-n", "8")

    assert stopped.returncode == 1
    assert "Generation stopped: Cannot reach Ollama" in stopped.stderr
    assert "Run the same command again to resume" in stopped.stderr
    assert "Traceback" not in stopped.stderr
    assert len(lines(out)) == 3
    ollama.start()
    ollama.clear_requests()

    resumed = generate(ollama, home, out, "-n", "8")

    assert resumed.returncode == 0, resumed.stderr
    assert out.read_bytes() == whole.read_bytes()
    assert len(ollama.requests_to("/api/chat")) == 5  # no passage asked about twice
    ollama.clear_requests()
    finished = generate(ollama, home, out, "-n", "8")
    assert finished.returncode == 0 and "Wrote 10 cases" in finished.stderr
    assert out.read_bytes() == whole.read_bytes() and ollama.requests_to("/api/chat") == []
    clash = generate(ollama, home, out, "-n", "8", "--seed", "1")
    assert clash.returncode == 1
    assert "was generated with other settings" in clash.stderr


def test_eval_generate_sits_beside_eval_dataset_in_the_help(ollama, home):
    listed = run_cli("--help", ollama_url=ollama.url, home=home)
    assert "eval generate" in listed.stdout
    usage = run_cli("eval", "generate", "--help", ollama_url=ollama.url, home=home)
    assert usage.returncode == 0 and "--seed" in usage.stdout and "-n" in usage.stdout
    missing = run_cli(
        "eval", "generate", "--store", "nope", ollama_url=ollama.url, home=home
    )  # fmt: skip
    assert missing.returncode == 1 and "Traceback" not in missing.stderr


def test_a_store_one_third_chinese_gives_about_one_third_chinese_cases(tmp_path):
    """Sampling follows the store's language and source shares, however many are asked for:
    the Chinese chunks sit in one source among six English ones."""
    english = [
        {
            "source": f"guide-{s}.md",
            "chunk_index": i,
            "size": 300 + i,
            "text": f"Section {s}{i}: the {word} policy covers item {s * 10 + i} for members. " * 3,
        }
        for s, word in enumerate(("refund", "shipping", "warranty", "privacy", "payment", "care"))
        for i in range(4)
    ]
    openings = [
        "包裹发出后", "运费按每单", "海关查验时", "退货申请须", "积分会员可", "发票开具前",
        "保修期内若", "换货流程由", "客服热线在", "春节长假期", "香港地址须", "关税由顾客",
    ]  # fmt: skip
    chinese = [
        {
            "source": "配送说明.md",
            "chunk_index": i,
            "size": 200 + i,
            "text": f"{opening}，相关规定适用于所有寄往中国大陆的订单，请仔细阅读。" * 4,
        }
        for i, opening in enumerate(openings)
    ]
    chunks = english + chinese
    assert sum(language(c["text"]) == "zh" for c in chunks) == len(chunks) // 3

    for n in (6, 9, 12, 18):
        order = sample(chunks, seed=3)[:n]
        assert sum(language(c["text"]) == "zh" for c in order) == n // 3
    nine = sample(chunks, seed=3)[:9]
    assert len({c["source"] for c in nine if language(c["text"]) == "en"}) == 6

    def ask(system: str, request: str) -> dict:
        return written_question(request.split("<passage>", 1)[1].split("</passage>", 1)[0])

    plan = Plan(store="docs", tool="search_docs", model="m", n=9, seed=3)
    generate_set(plan, chunks, ask, tmp_path / "set.jsonl")
    cases = [c for c in load_dataset(tmp_path / "set.jsonl") if c.extra["kind"] == "passage"]
    assert len(cases) == 9
    assert sum(c.extra["language"] == "zh" for c in cases) == 3
