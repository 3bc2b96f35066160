"""`archivist eval` against the fake Ollama, whose chat models follow known policies.

qwen2.5:3b calls the best-matching tool with the question (trailing punctuation stripped) as
the query, then answers with the first sentence of the top passage and its citation; it greets
back without a tool. qwen2.5:0.5b has the tools capability but never calls a tool: it answers
"I don't know." (or greets back). gemma-notools:1b lacks the capability, so Archivist runs it in
retrieve-then-answer mode: the application searches every store with the question.
"""

import json
import shutil
import uuid
from pathlib import Path

import pytest
from conftest import ROOT, SHOP, copy_home, run_cli
from fake_ollama import (
    GREETING_REPLY,
    UNKNOWN_REPLY,
    FakeOllama,
    ModelSpec,
    count_tokens,
    relevance,
)

from archivist.app import Archivist
from archivist.evaluation.run import (
    Case,
    check_tools,
    load_dataset,
    parse_case,
    percentile,
    score_turn,
    source_matches,
)
from archivist.settings import Settings
from archivist.tools.errors import ArchivistError

HR = ROOT / "examples" / "hr"
SHOP_ABOUT = "Northwind Outfitters shop policies for customers: refunds, returns, shipping"
HR_ABOUT = "Northwind staff handbook for employees: vacation and sick leave, expenses, benefits"
CASES = [
    {
        "id": "refund",
        "question": "How many days do I have to ask for a refund?",
        "expect_tool": "search_shop_docs",
        "expect_sources": ["refund.md"],
        "answer_contains": ["30 days"],
    },
    {
        "id": "boot",
        "question": "How do I care for the NW-TX-2290?",
        "expect_tool": "search_shop_docs",
        "expect_sources": ["product-care.md"],
        "answer_contains": ["NW-TX-2290"],
    },
    {
        "id": "vacation",
        "question": "How many vacation days do employees get?",
        "expect_tool": "search_hr_docs",
        "expect_sources": ["leave.md"],
        "answer_contains": ["28 vacation days"],
    },
    {"id": "greeting", "question": "hi!", "expect_tool": None},
    {"id": "no-expectation", "question": "What is the capital of France?"},
]
STORES = ["--store", "shop_docs", "--store", "hr_docs"]


@pytest.fixture(scope="module")
def fake() -> FakeOllama:
    with FakeOllama() as server:
        server.add_model(ModelSpec("judge:7b", ["completion"]))
        yield server


@pytest.fixture(scope="module")
def stocked(fake: FakeOllama, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Both sample stores, ingested once; the ranks a search gives each case's question."""
    home = tmp_path_factory.mktemp("eval") / "home"
    app = Archivist(Settings(ollama_host=fake.url, home=home))
    app.ingest([str(SHOP)], "shop_docs", description=SHOP_ABOUT)
    app.ingest([str(HR)], "hr_docs", description=HR_ABOUT)
    ranks = {}
    for case in CASES:
        if "expect_sources" in case:
            store = case["expect_tool"].removeprefix("search_")
            agent_query = case["question"].rstrip("?")  # the fake agent's query
            ranks[case["id"]] = {
                "agent": _first_rank(app.search(agent_query, store), case["expect_sources"]),
                "rta": min(  # retrieve-then-answer searches every store with the question
                    r
                    for s in ("shop_docs", "hr_docs")
                    if (r := _first_rank(app.search(case["question"], s), case["expect_sources"]))
                ),
            }
    app.close()
    return {"home": home, "ranks": ranks}


def _first_rank(results: list[dict], expected: list[str]) -> int | None:
    return next((r["rank"] for r in results if r["source"] in expected), None)


@pytest.fixture
def home_copy(stocked: dict, tmp_path: Path) -> Path:
    """A private copy of the stocked home, so a test cannot disturb another's stores."""
    return copy_home(stocked["home"], tmp_path / "stocked-home")


def write_dataset(path: Path, cases: list[dict]) -> Path:
    path.write_text("\n".join(json.dumps(c, ensure_ascii=False) for c in cases) + "\n")
    return path


def by_case(report: dict, model: str) -> dict[str, list[dict]]:
    runs: dict[str, list[dict]] = {}
    for run in report["runs"]:
        if run["model"] == model:
            runs.setdefault(run["case_id"], []).append(run)
    return runs


def test_eval_tells_a_tool_caller_from_a_model_that_never_calls_tools(
    fake, stocked, home_copy, tmp_path
):
    dataset = write_dataset(tmp_path / "cases.jsonl", CASES)
    out = tmp_path / "report"
    fake.clear_requests()
    result = run_cli(
        "eval", str(dataset), *STORES, "--model", "qwen2.5:3b", "--model", "qwen2.5:0.5b",
        "--model", "gemma-notools:1b", "--repeat", "2", "--seed", "7", "--out", str(out),
        "--json", ollama_url=fake.url, home=home_copy,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr

    report = json.loads((out / "report.json").read_text())
    assert json.loads(result.stdout) == report
    assert (out / "report.md").is_file()
    png = (out / "chart.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and png[12:16] == b"IHDR"
    width, height = int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")
    assert width > 600 and height > 300

    assert (report["k"], report["repeat"], report["seed"], report["cases"]) == (5, 2, 7, 5)
    assert [(m["model"], m["mode"]) for m in report["models"]] == [
        ("qwen2.5:3b", "agent"),
        ("qwen2.5:0.5b", "agent"),
        ("gemma-notools:1b", "retrieve-then-answer"),
    ]
    good, never, notools = (m["metrics"] for m in report["models"])
    support = report["models"][0]["support"]
    ranks = stocked["ranks"]
    agent_mrr = sum(1 / ranks[c]["agent"] for c in ("refund", "boot", "vacation")) / 3
    rta_mrr = sum(1 / ranks[c]["rta"] for c in ("refund", "boot", "vacation")) / 3

    # The tool caller: searches for the four questions, the right store each time, greets back.
    # 4 cases state a tool expectation (the fifth has none), twice each.
    assert good["tool_decision_accuracy"] == 1.0 and support["tool_decision_accuracy"] == 8
    assert good["tool_selection_accuracy"] == 1.0 and support["tool_selection_accuracy"] == 6
    assert good["argument_validity"] == 1.0 and support["argument_validity"] == 8
    assert good["retrieval_hit@k"] == 1.0 and support["retrieval_hit@k"] == 6
    assert good["retrieval_mrr@k"] == pytest.approx(agent_mrr)
    # Its answer is the top passage's first sentence: the refund question's top passage is not
    # refund.md (rank given by `search`), so "30 days" is missing there, and only there.
    assert ranks["refund"]["agent"] > 1 and ranks["boot"]["agent"] == 1
    assert good["answer_contains_rate"] == pytest.approx(2 / 3)
    assert good["citation_validity"] == 1.0 and good["errors"] == 0 and good["runs"] == 10
    assert good["trajectory_agreement"] == 1.0 and good["answer_agreement"] == 1.0

    # The model that never calls tools: right only on the greeting, retrieves nothing.
    assert never["tool_decision_accuracy"] == 0.25
    assert never["tool_selection_accuracy"] is None and never["argument_validity"] is None
    assert never["retrieval_hit@k"] == 0.0 and never["retrieval_mrr@k"] == 0.0
    assert never["answer_contains_rate"] == 0.0 and never["citation_validity"] is None

    # Without tool calling: no tool decision to score, but the application's searches count.
    assert notools["tool_decision_accuracy"] is None
    assert notools["tool_selection_accuracy"] is None and notools["argument_validity"] is None
    assert notools["retrieval_hit@k"] == 1.0
    assert notools["retrieval_mrr@k"] == pytest.approx(rta_mrr)

    runs = by_case(report, "qwen2.5:3b")
    [call] = runs["vacation"][0]["tool_calls"]
    assert call["name"] == "search_hr_docs" and call["by"] == "model"
    assert call["args"] == {"query": "How many vacation days do employees get"}
    assert call["results"][0]["source"] == "leave.md"
    assert set(call["results"][0]) == {"rank", "n", "source", "score", "chunk_id"}
    assert runs["vacation"][0]["outcomes"]["answer_contains"] is True
    assert runs["refund"][0]["outcomes"]["retrieval_rr"] == 1 / ranks["refund"]["agent"]
    assert runs["greeting"][0]["tool_calls"] == []
    assert runs["greeting"][0]["answer"] == GREETING_REPLY
    assert runs["no-expectation"][0]["outcomes"]["tool_decision"] is None
    assert [r["repeat"] for r in runs["boot"]] == [0, 1]
    never_runs = by_case(report, "qwen2.5:0.5b")
    assert never_runs["boot"][0]["answer"] == UNKNOWN_REPLY
    assert never_runs["boot"][0]["tool_calls"] == []
    rta_runs = by_case(report, "gemma-notools:1b")
    assert [(c["name"], c["by"]) for c in rta_runs["greeting"][0]["tool_calls"]] == [
        ("search_shop_docs", "application"),
        ("search_hr_docs", "application"),
    ]

    # On the wire: temperature 0 and the seed on every chat request; each run starts afresh
    # (one user message per request: no case sees another's conversation).
    chats = fake.requests_to("/api/chat")
    assert chats and all(c["options"]["temperature"] == 0 for c in chats)
    assert all(c["options"]["seed"] == 7 for c in chats)
    assert all(sum(m["role"] == "user" for m in c["messages"]) == 1 for c in chats)
    # Token counts are what the fake reported for those requests (prompt_eval_count).
    sent = sum(count_tokens(m.get("content") or "") + 4 for c in chats for m in c["messages"])
    assert sum(m["metrics"]["input_tokens"] for m in report["models"]) == sent
    assert all(r["usage"]["model_calls"] == 2 for r in runs["boot"])

    markdown = (out / "report.md").read_text()
    assert "| retrieval_hit@5 | 1.00 (n=6) | 0.00 (n=6) | 1.00 (n=6) |" in markdown
    assert "**gemma-notools:1b** has no tool calling" in markdown
    assert "gemma-notools:1b cannot call tools" in result.stderr


def test_eval_prints_a_table_and_writes_to_a_default_folder(fake, home_copy, tmp_path):
    name = f"mini-{uuid.uuid4().hex[:8]}"
    dataset = write_dataset(tmp_path / f"{name}.jsonl", CASES[1:2] + CASES[3:4])
    result = run_cli(
        "eval", str(dataset), *STORES, "-m", "qwen2.5:3b", "-m", "qwen2.5:0.5b",
        ollama_url=fake.url, home=home_copy,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "qwen2.5:3b (agent)" in result.stdout and "qwen2.5:0.5b (agent)" in result.stdout
    row = next(line for line in result.stdout.splitlines() if "tool_decision_accuracy" in line)
    assert "1.00 (n=2)" in row and "0.50 (n=2)" in row
    assert (
        "qwen2.5:0.5b never searched: it answered every case without calling a tool "
        "(tool decision 0.50, hit@5 0.00). If it should have, --retrieve-first"
    ) in result.stderr
    assert "qwen2.5:3b never searched" not in result.stderr
    [folder] = (ROOT / "eval-reports").glob(f"{name}-*")
    try:
        assert {p.name for p in folder.iterdir()} == {"report.json", "report.md", "chart.png"}
        assert str(folder.relative_to(ROOT)) in result.stderr
    finally:
        shutil.rmtree(folder)
        if not any(folder.parent.iterdir()):
            folder.parent.rmdir()


def test_retrieve_first_is_said_as_such_not_as_a_model_without_tools(fake, home_copy, tmp_path):
    dataset = write_dataset(tmp_path / "cases.jsonl", CASES[1:2])
    out = tmp_path / "report"
    result = run_cli(
        "eval", str(dataset), *STORES, "-m", "qwen2.5:0.5b", "--retrieve-first",
        "--out", str(out), ollama_url=fake.url, home=home_copy,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "qwen2.5:0.5b: evaluated in retrieve-then-answer mode (--retrieve-first)." in (
        result.stderr
    )
    assert "cannot call tools" not in result.stderr and "never searched" not in result.stderr
    markdown = (out / "report.md").read_text()
    assert "**qwen2.5:0.5b** was evaluated in retrieve-then-answer mode (--retrieve-first" in (
        markdown
    )
    assert "has no tool calling" not in markdown


def test_judge_verdicts_come_from_the_judge_model(fake, home_copy, tmp_path):
    dataset = write_dataset(tmp_path / "cases.jsonl", [CASES[1], CASES[3]])
    verdict = '{{"reasoning": "{}", "score": {}}}'
    fake.script(
        "judge:7b",
        {"content": verdict.format("Answers the care question.", "true")},  # boot: helpful
        {"content": verdict.format("Not in the passages.", "false")},  # boot: grounded
        {"content": verdict.format("A fine greeting.", "true")},  # greeting: helpful only
    )
    fake.clear_requests()
    result = run_cli(
        "eval", str(dataset), *STORES, "-m", "qwen2.5:3b", "--judge", "judge:7b",
        "--out", str(tmp_path / "out"), "--json", ollama_url=fake.url, home=home_copy,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    metrics, support = report["models"][0]["metrics"], report["models"][0]["support"]
    assert report["judge"] == "judge:7b"
    assert metrics["judge_helpfulness"] == 1.0 and support["judge_helpfulness"] == 2
    assert metrics["judge_groundedness"] == 0.0 and support["judge_groundedness"] == 1
    runs = by_case(report, "qwen2.5:3b")
    assert runs["boot"][0]["judge"]["comments"]["judge_groundedness"] == "Not in the passages."
    assert runs["greeting"][0]["judge"]["judge_groundedness"] is None

    judged = [c for c in fake.requests_to("/api/chat") if c["model"] == "judge:7b"]
    assert len(judged) == 3
    assert all(c["format"]["properties"]["score"]["type"] == "boolean" for c in judged)
    assert all(c["options"] == {"temperature": 0, "seed": 42} for c in judged)
    assert "How do I care for the NW-TX-2290?" in judged[0]["messages"][-1]["content"]
    assert runs["boot"][0]["answer"] in judged[1]["messages"][-1]["content"]
    assert "product-care.md" in judged[1]["messages"][-1]["content"]  # the retrieved context
    assert "| judge_groundedness | 0.00 (n=1) |" in (tmp_path / "out" / "report.md").read_text()


def test_a_failing_run_is_counted_as_an_error_and_the_rest_go_on(
    fake, home_copy, tmp_path, monkeypatch
):
    dataset = write_dataset(tmp_path / "cases.jsonl", [CASES[1], CASES[3]])
    # Refused on each of the 4 tries a chat request gets.
    monkeypatch.setattr("archivist.ollama.transport.BACKOFF", 0.01)
    fake.script(
        "qwen2.5:3b", *[{"error": "llama runner process has terminated", "status": 500}] * 4
    )
    result = run_cli(
        "eval", str(dataset), *STORES, "-m", "qwen2.5:3b", "--out", str(tmp_path / "out"),
        "--json", ollama_url=fake.url, home=home_copy,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    metrics = report["models"][0]["metrics"]
    assert metrics["errors"] == 1 and metrics["runs"] == 2
    boot, greeting = report["runs"]
    assert "llama runner process has terminated" in boot["error"]
    assert boot["outcomes"]["tool_decision"] is False and boot["outcomes"]["retrieval_hit"] is False
    assert greeting["error"] is None and greeting["answer"] == GREETING_REPLY
    assert metrics["tool_decision_accuracy"] == 0.5
    assert report["models"][0]["support"]["latency_p50_ms"] == 1  # failed runs have no latency


@pytest.mark.parametrize(
    ("line", "args", "message"),
    [
        ("{not json", STORES, "cases.jsonl, line 2: not valid JSON"),
        ('{"id": "b", "question": "q"}', [*STORES, "-m", "llama9:70b"], "ollama pull llama9:70b"),
    ],
)
def test_bad_input_exits_1_with_the_fix(fake, home_copy, tmp_path, line, args, message):
    dataset = tmp_path / "cases.jsonl"
    dataset.write_text('{"id": "a", "question": "q"}\n' + line + "\n")
    result = run_cli("eval", str(dataset), *args, ollama_url=fake.url, home=home_copy)
    assert result.returncode == 1
    assert message in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (['{"id": "a"}'], "cases.jsonl, line 1: `question` must be a non-empty string"),
        (["", '{"id": "a", "question": "q", "expect_tool": 3}'], "line 2: `expect_tool` must"),
        (['{"id": "a", "question": "q"}'] * 2, "two cases with the id 'a'"),
        (["", " "], "holds no cases"),
    ],
)
def test_a_bad_dataset_is_refused_with_its_line(tmp_path, lines, message):
    dataset = tmp_path / "cases.jsonl"
    dataset.write_text("\n".join(lines) + "\n")
    with pytest.raises(ArchivistError, match=message):
        load_dataset(dataset)


def test_a_case_needing_a_store_not_given_is_refused():
    cases = [Case("a", "q", ("search_hr_docs",))]
    with pytest.raises(ArchivistError) as raised:
        check_tools(cases, ["shop_docs"])
    assert "expects search_hr_docs" in str(raised.value)
    assert "Add --store hr_docs" in raised.value.fix
    check_tools(cases, ["shop_docs", "hr_docs"])


def test_the_sample_dataset_is_valid_and_covers_every_kind_of_case():
    cases = load_dataset(ROOT / "evals" / "shop.jsonl")
    assert len(cases) >= 30
    kinds = {case.extra["kind"] for case in cases}
    assert kinds >= {"direct", "paraphrase", "two-searches", "no-tool", "unanswerable"}
    assert {"multi-store", "both-stores"} <= kinds
    assert {tool for c in cases for tool in c.expect_tools or ()} == {
        "search_shop_docs",
        "search_hr_docs",
    }
    files = {p.name for folder in (SHOP, HR) for p in folder.iterdir()}
    assert {s for c in cases for s in c.expect_sources} <= files


def test_scoring_rules():
    assert source_matches("policies/refund.md", "refund.md")
    assert not source_matches("norefund.md", "refund.md")
    assert percentile([10, 20, 30, 40], 50) == 25 and percentile([], 95) is None
    case = Case("c", "q", ("search_a",), ("a.md",), ("Thirty  Days",))
    results = [{"rank": 1, "source": "x.md"}, {"rank": 2, "source": "docs/a.md"}]
    turn = {
        "answer": "You have thirty days [1] [9].",
        "tool_calls": [{"name": "search_a", "args": {"query": ""}, "results": results}],
        "citations": [{"n": 1}],
        "invalid_citations": [9],
    }
    outcomes = score_turn(case, turn, "agent", k=5)
    assert outcomes["tool_decision"] and outcomes["tool_selection"]
    assert outcomes["retrieval_rr"] == 0.5 and outcomes["answer_contains"]
    assert outcomes["calls"] == 1 and outcomes["valid_calls"] == 0  # an empty query
    assert outcomes["citations_valid"] is False
    assert score_turn(case, turn, "agent", k=1)["retrieval_hit"] is False
    rta = score_turn(case, turn, "retrieve-then-answer", k=5)
    assert rta["tool_decision"] is None and rta["calls"] == 0
    wrong_store = {**turn, "tool_calls": [{**turn["tool_calls"][0], "name": "search_b"}]}
    assert score_turn(case, wrong_store, "agent", k=5)["tool_selection"] is False
    with pytest.raises(ArchivistError, match="here: `expect_sources` must be a list"):
        parse_case({"id": "a", "question": "q", "expect_sources": [1]}, "here")
    both = parse_case({"id": "b", "question": "q", "expect_tool": ["search_a", "search_b"]}, "")
    assert both.expect_tools == ("search_a", "search_b")
    assert parse_case({"id": "c", "question": "q", "expect_tool": None}, "").expect_tools == ()
    assert parse_case({"id": "d", "question": "q"}, "").expect_tools is None


FOLLOW_UP = {
    "id": "refund-then-payment",
    "history": ["How many days do I have to ask for a refund?"],
    "question": "And how is the money paid back?",
    "expect_tool": "search_shop_docs",
    "expect_sources": ["refund.md"],
}
IRRELEVANT = [
    {"id": "greeting", "question": "hi!", "expect_tool": None},
    {"id": "arithmetic", "question": "What is 12 times 7?", "expect_tool": None},
]


def test_a_follow_up_is_asked_after_its_history_and_scored_on_its_own_searches(
    fake, home_copy, tmp_path
):
    dataset = write_dataset(tmp_path / "cases.jsonl", [FOLLOW_UP, CASES[1]])
    out = tmp_path / "report"
    fake.clear_requests()
    result = run_cli(
        "eval", str(dataset), *STORES, "-m", "qwen2.5:3b", "--out", str(out), "--json",
        ollama_url=fake.url, home=home_copy,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["categories"] == {"single-turn": 1, "multi-turn": 1, "irrelevance": 0}
    follow_up = by_case(report, "qwen2.5:3b")["refund-then-payment"][0]
    assert follow_up["category"] == "multi-turn"
    assert follow_up["expect"]["history"] == FOLLOW_UP["history"]

    # The earlier question was asked first, in the same conversation: the follow-up's request
    # carries it and its answer. Only the follow-up's search is scored.
    chats = fake.requests_to("/api/chat")
    asked = [c for c in chats if c["messages"][-1].get("content") == FOLLOW_UP["question"]]
    [request] = asked
    users = [m["content"] for m in request["messages"] if m["role"] == "user"]
    assert users == [*FOLLOW_UP["history"], FOLLOW_UP["question"]]
    assert any(m["role"] == "assistant" and m.get("content") for m in request["messages"])
    # The follow-up is searched with the earlier question's subject (docs/chat.md).
    [call] = follow_up["tool_calls"]
    query = call["args"]["query"]
    assert query.startswith("And how is the money paid back") and "refund" in query

    app = Archivist(Settings(ollama_host=fake.url, home=home_copy))
    try:
        found = app.search(query, "shop_docs")
    finally:
        app.close()
    hit = any(r["source"] == "refund.md" for r in found)
    assert follow_up["outcomes"]["followup_hit"] is hit
    metrics, support = report["models"][0]["metrics"], report["models"][0]["support"]
    assert metrics["followup_hit@k"] == float(hit) and support["followup_hit@k"] == 1
    assert support["retrieval_hit@k"] == 2  # the follow-up counts among all retrieval cases
    markdown = (out / "report.md").read_text()
    assert f"| followup_hit@5 | {float(hit):.2f} (n=1) |" in markdown
    assert "1 multi-turn" in markdown


def test_irrelevance_cases_are_scored_as_such_for_each_model(fake, home_copy, tmp_path):
    dataset = write_dataset(tmp_path / "cases.jsonl", [*IRRELEVANT, CASES[1]])
    out = tmp_path / "report"
    result = run_cli(
        "eval", str(dataset), *STORES, "-m", "qwen2.5:3b", "-m", "qwen2.5:0.5b",
        "-m", "gemma-notools:1b", "--out", str(out), "--json",
        ollama_url=fake.url, home=home_copy,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["categories"]["irrelevance"] == 2
    good, never, notools = report["models"]
    # qwen2.5:3b greets back without a search but searches for the arithmetic question.
    runs = by_case(report, "qwen2.5:3b")
    assert runs["greeting"][0]["tool_calls"] == [] and runs["arithmetic"][0]["tool_calls"]
    assert [runs[c][0]["outcomes"]["irrelevance"] for c in ("greeting", "arithmetic")] == [
        True,
        False,
    ]
    assert runs["boot"][0]["outcomes"]["irrelevance"] is None
    assert good["metrics"]["irrelevance_accuracy"] == 0.5
    assert good["support"]["irrelevance_accuracy"] == 2
    assert runs["greeting"][0]["category"] == "irrelevance"
    # Never searching is right on irrelevance, wrong elsewhere; the report says what to try.
    assert never["metrics"]["irrelevance_accuracy"] == 1.0
    assert never["metrics"]["tool_decision_accuracy"] == pytest.approx(2 / 3)
    # Retrieve-then-answer always searches: the model made no decision to score.
    assert notools["metrics"]["irrelevance_accuracy"] is None
    markdown = (out / "report.md").read_text()
    assert "| irrelevance_accuracy | 0.50 (n=2) | 1.00 (n=2) | – |" in markdown
    assert "**qwen2.5:0.5b** never searched" in markdown and "--retrieve-first" in markdown
    assert "qwen2.5:3b** never searched" not in markdown


def test_rerank_is_compared_with_none_in_one_run(fake, stocked, home_copy, tmp_path):
    def expected_first(query: str, passage: str) -> float:
        wanted = {"refund": "30 days", "NW-TX-2290": "NW-TX-2290", "vacation": "vacation days"}
        return next(
            (0.9 for word, text in wanted.items() if word in query and text in passage), 0.1
        )

    dataset = write_dataset(tmp_path / "cases.jsonl", CASES[:3])
    out = tmp_path / "report"
    fake.score_with(expected_first)
    try:
        result = run_cli(
            "eval", str(dataset), *STORES, "-m", "qwen2.5:3b", "--rerank", "qwen2.5:3b",
            "--out", str(out), "--json", ollama_url=fake.url, home=home_copy,
        )  # fmt: skip
    finally:
        fake.score_with(relevance)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["rerank_model"] == "qwen2.5:3b" and report["rerank_candidates"] == 20
    assert [(m["label"], m["rerank"]) for m in report["models"]] == [
        ("qwen2.5:3b", False),
        ("qwen2.5:3b+rerank", True),
    ]
    plain, reranked = report["reranking"]
    assert (plain["search"], reranked["search"]) == ("hybrid", "hybrid+rerank")
    assert plain["cases"] == reranked["cases"] == 3
    # The refund question's expected source is not first without reranking (see above).
    assert stocked["ranks"]["refund"]["agent"] > 1
    assert reranked["mrr@k"] == 1.0 > plain["mrr@k"] and reranked["hit@k"] == 1.0
    assert plain["rerank_ms_p50"] is None and reranked["rerank_ms_p50"] > 0
    assert report["models"][1]["metrics"]["retrieval_mrr@k"] == 1.0
    for run in report["runs"]:
        [call] = run["tool_calls"]
        assert ("rerank_ms" in call) is run["rerank"]
        assert ("rerank_score" in call["results"][0]) is run["rerank"]
    markdown = (out / "report.md").read_text()
    assert "## Reranking" in markdown and "| hybrid+rerank | 1.00 | 1.00 | 3 |" in markdown
    assert "qwen2.5:3b+rerank (agent)" in markdown


def test_report_md_shows_a_datasets_escape_sequences_as_escapes(fake, home_copy, tmp_path):
    cases = [{"id": "wipe\x1b[2J", "question": "hi! \x1b]0;owned\x07", "expect_tool": None}]
    dataset = write_dataset(tmp_path / "escapes.jsonl", cases)
    out = tmp_path / "out"
    result = run_cli(
        "eval", str(dataset), *STORES, "-m", "qwen2.5:3b", "--out", str(out),
        ollama_url=fake.url, home=home_copy,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    markdown = (out / "report.md").read_text(encoding="utf-8")
    assert "wipe\\x1b[2J" in markdown and "\x1b" not in markdown and "\x07" not in markdown
    # report.json keeps every character (JSON-escaped).
    assert json.loads((out / "report.json").read_text())["models"]


def test_a_dataset_nested_too_deeply_is_refused_by_line(tmp_path):
    path = tmp_path / "deep.jsonl"
    path.write_text('{"id": "a", "question": "q"}\n' + "[" * 100_000 + "]" * 100_000 + "\n")
    with pytest.raises(ArchivistError, match="deep.jsonl, line 2: nested too deeply to read"):
        load_dataset(path)
