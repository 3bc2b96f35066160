"""Corpus-level evaluation cases, and toolsets compared per model in one run, on the sample
set over the shipped examples (evals/documents.jsonl)."""

import json

import pytest
from conftest import ROOT
from fake_ollama import CONFUSED_MODEL

from archivist.evaluation import corpus
from archivist.evaluation.run import evaluate, load_dataset, parse_case
from archivist.tools.errors import ArchivistError

DATASET = ROOT / "evals" / "documents.jsonl"
EXAMPLES = [str(ROOT / "examples" / "shop"), str(ROOT / "examples" / "hr")]


def test_the_sample_set_compares_toolsets_per_model(archivist, fake_models):
    fake_models.add_model(CONFUSED_MODEL)
    archivist.ingest(EXAMPLES, "examples")
    cases = load_dataset(DATASET)
    report = evaluate(
        archivist,
        DATASET,
        cases,
        ["examples"],
        ["qwen2.5:3b", CONFUSED_MODEL.name],
        toolsets=["search", "all"],
    )
    by_label = {s["label"]: s for s in report["models"]}
    assert list(by_label) == [
        "qwen2.5:3b",
        "qwen2.5:3b+all-tools",
        "small-confused:1b",
        "small-confused:1b+all-tools",
    ]
    assert report["toolsets"] == ["search", "all"]
    capable, searching = by_label["qwen2.5:3b+all-tools"], by_label["qwen2.5:3b"]
    for metric in corpus.CORPUS_METRICS:
        assert capable["metrics"][metric] == 1.0, metric
    assert searching["metrics"]["document_read_rate"] == 0.0
    assert searching["metrics"]["count_exact_rate"] == 0.0
    assert searching["metrics"]["source_set_recall"] < 0.5
    # Each corpus metric counts the cases that ask for it.
    assert capable["support"]["source_set_recall"] == 5
    assert capable["support"]["count_exact_rate"] == 2
    assert capable["support"]["document_read_rate"] == 3
    assert capable["support"]["read_around_rate"] == 2
    # The same search cases, answered as well either way.
    for metric in ("retrieval_hit@k", "answer_contains_rate"):
        assert capable["metrics"][metric] == searching["metrics"][metric]
    # A small model that picks tools by their words chooses worse among more of them.
    alone = by_label["small-confused:1b"]["metrics"]
    among = by_label["small-confused:1b+all-tools"]["metrics"]
    assert among["tool_selection_accuracy"] < alone["tool_selection_accuracy"]
    assert among["argument_validity"] < alone["argument_validity"] == 1.0
    assert among["model_calls"] > alone["model_calls"]
    runs = [r for r in report["runs"] if r["label"] == "qwen2.5:3b+all-tools"]
    count = next(r for r in runs if r["case_id"] == "count-voucher")
    assert count["tool_calls"][0]["name"] == "list_examples"
    assert count["outcomes"]["count_exact"] is True
    json.dumps(report)  # the report stays JSON


def test_scoring_of_each_corpus_expectation():
    turn = {
        "answer": "3 sources contain it: a.md [1], b.md [2], c.md [3].",
        "citations": [{"n": 1, "source": "docs/a.md"}, {"n": 4, "source": "x/read.md"}],
        "tool_calls": [
            {
                "name": "list_s",
                "args": {"contains": "it"},
                "results": [{"source": "docs/a.md"}, {"source": "b.md"}, {"source": "c.md"}],
            },
            {"name": "read_s", "args": {"around": 2}, "results": [{"source": "x/read.md"}]},
        ],
    }
    expect = {
        "expect_source_set": ["a.md", "b.md", "d.md"],
        "expect_count": 3,
        "expect_read": "read.md",
        "expect_read_around": "read.md",
    }
    scored = corpus.score(expect, turn)
    assert scored["source_set_precision"] == pytest.approx(2 / 4)  # a, b of a, b, c, read
    assert scored["source_set_recall"] == pytest.approx(2 / 3)
    assert scored["count_exact"] is True
    assert scored["document_read"] is True and scored["around"] is True
    assert corpus.score({"expect_count": 4}, turn)["count_exact"] is False
    assert corpus.score(expect, None)["document_read"] is False
    assert corpus.score({}, turn) == dict.fromkeys(scored)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ({"expect_count": "4"}, "`expect_count` must be a whole number"),
        ({"expect_source_set": "a.md"}, "`expect_source_set` must be a list of source names"),
        ({"expect_read": ""}, "`expect_read` must be a source's name"),
    ],
)
def test_a_malformed_corpus_expectation_is_refused_with_the_fix(line, message):
    with pytest.raises(ArchivistError, match=message):
        parse_case({"id": "c", "question": "q?", **line}, "cases.jsonl, line 1")
