"""Tool-calling evaluations: the same cases against several models, scored and reported."""

import json
import math
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any

import httpx
from langgraph.checkpoint.memory import InMemorySaver

from archivist.agent.records import Passage, ToolCall, Turn
from archivist.agent.retrieval import format_results
from archivist.agent.setup import AGENT, AgentSetup
from archivist.agent.turn import run_turn
from archivist.app import Archivist
from archivist.evaluation import corpus
from archivist.failures import explain
from archivist.tools.errors import ArchivistError
from archivist.tools.progress import CaseRan, ProgressFn, StoreReady, ignore
from archivist.tools.search import SearchMode

RATE_METRICS = (
    "tool_decision_accuracy",
    "irrelevance_accuracy",
    "tool_selection_accuracy",
    "argument_validity",
    "retrieval_hit@k",
    "followup_hit@k",
    "retrieval_mrr@k",
    "retrieval_recall@k",
    "context_precision",
    "answer_contains_rate",
    "citation_validity",
)
JUDGE_METRICS = ("judge_helpfulness", "judge_groundedness")
STABILITY_METRICS = ("trajectory_agreement", "answer_agreement")
COUNT_METRICS = (
    "latency_p50_ms",
    "latency_p95_ms",
    "input_tokens",
    "output_tokens",
    "model_calls",
    "errors",
    "runs",
)
TEXT_CALL_METRICS = ("text_calls_recovered", "text_calls_unrun", "wrong_names_retried")
"""How a model called its tools: calls it wrote as text and Archivist ran, calls written as text
that could not be run (no such tool, bad arguments), calls to a wrong tool name that it then
corrected within the turn."""
GRADING_METRICS = ("grade_calls", "rewrite_calls", "searches", "passages_shown")
"""Counts that show what grading costs: its model calls, extra searches, passages kept."""
USAGE_KEYS = ("model_calls", "input_tokens", "output_tokens", "grade_calls", "rewrite_calls")
ALLOWED_KEYS = {"id", "question", "expect_tool", "expect_sources", "answer_contains", "history"}
IRRELEVANCE = "irrelevance"
MULTI_TURN = "multi-turn"
SINGLE_TURN = "single-turn"
"""The categories a case falls in: one that should not search (`expect_tool: null`), a
follow-up asked after earlier turns (`history`), or an ordinary question."""


@dataclass(frozen=True)
class Case:
    """One evaluation case: a question and what a good turn does with it."""

    id: str
    question: str
    expect_tools: tuple[str, ...] | None = None
    """The tools a good turn calls; () when it should answer without one; None: no expectation."""
    expect_sources: tuple[str, ...] = ()
    answer_contains: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)
    """Other keys of the dataset line (kind, notes), kept in the report."""
    history: tuple[str, ...] = ()
    """Questions asked earlier in the same conversation, in order; `question` is the
    follow-up, and only its turn is scored."""

    @property
    def category(self) -> str:
        """IRRELEVANCE, MULTI_TURN or SINGLE_TURN."""
        if self.expect_tools == ():
            return IRRELEVANCE
        return MULTI_TURN if self.history else SINGLE_TURN

    def to_dict(self) -> dict[str, Any]:
        """Return the case as the dataset states it."""
        expectation: dict[str, Any] = {"id": self.id, "question": self.question}
        if self.history:
            expectation["history"] = list(self.history)
        if self.expect_tools is not None:
            tools = list(self.expect_tools)
            expectation["expect_tool"] = (
                None if not tools else tools[0] if len(tools) == 1 else tools
            )
        if self.expect_sources:
            expectation["expect_sources"] = list(self.expect_sources)
        if self.answer_contains:
            expectation["answer_contains"] = list(self.answer_contains)
        return {**expectation, **self.extra}


def _strings(value: Any, key: str, where: str) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise ArchivistError(
            f"{where}: `{key}` must be a list of non-empty strings.",
            f'Write it as "{key}": ["..."], or leave it out.',
        )
    return tuple(value)


def parse_case(data: Any, where: str) -> Case:
    """Check one dataset line and turn it into a Case."""
    fix = 'Each line is an object like {"id": "...", "question": "...", "expect_tool": "..."}.'
    if not isinstance(data, dict):
        raise ArchivistError(f"{where}: a case must be a JSON object.", fix)
    for key in ("id", "question"):
        if not isinstance(data.get(key), str) or not data[key].strip():
            raise ArchivistError(f"{where}: `{key}` must be a non-empty string.", fix)
    corpus.check_case(data, where)
    expect_tools = None
    if "expect_tool" in data:
        raw = data["expect_tool"]
        expect_tools = () if raw is None else _strings(raw, "expect_tool", where)
    return Case(
        id=data["id"],
        question=data["question"],
        expect_tools=expect_tools,
        expect_sources=_strings(data.get("expect_sources") or [], "expect_sources", where),
        answer_contains=_strings(data.get("answer_contains") or [], "answer_contains", where),
        extra={k: v for k, v in data.items() if k not in ALLOWED_KEYS},
        history=_strings(data.get("history") or [], "history", where),
    )


def load_dataset(path: Path) -> list[Case]:
    """Read a JSONL dataset, one case a line; blank lines are skipped."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ArchivistError(
            f"Cannot read the dataset {path}: {exc}", "Give the path of a UTF-8 JSONL file."
        ) from None
    cases: list[Case] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{path.name}, line {number}"
        try:
            data = json.loads(line)
        except ValueError as exc:
            raise ArchivistError(
                f"{where}: not valid JSON ({exc}).", "Each line must hold one JSON object."
            ) from None
        except RecursionError:
            raise ArchivistError(
                f"{where}: nested too deeply to read.", "Each line must hold one flat case."
            ) from None
        cases.append(parse_case(data, where))
    if not cases:
        raise ArchivistError(f"The dataset {path} holds no cases.", "Add one JSON object a line.")
    seen: set[str] = set()
    for case in cases:
        if case.id in seen:
            raise ArchivistError(
                f"The dataset {path} has two cases with the id '{case.id}'.",
                "Give every case its own id.",
            )
        seen.add(case.id)
    return cases


def check_tools(cases: Sequence[Case], stores: Sequence[str]) -> None:
    """Refuse cases that expect a tool none of the given stores provides."""
    available = {f"{kind}_{store}" for store in stores for kind in ("search", "list", "read")}
    for case in cases:
        missing = sorted(set(case.expect_tools or ()) - available)
        if missing:
            wanted = ", ".join(f"--store {name.split('_', 1)[1]}" for name in missing)
            raise ArchivistError(
                f"Case '{case.id}' expects {', '.join(missing)}, which the given stores "
                f"({', '.join(stores)}) do not provide.",
                f"Add {wanted}, or remove the case from the dataset.",
            )


def source_matches(source: str, expected: str) -> bool:
    """Tell whether a retrieved chunk's source is the expected one (equal or a path suffix)."""
    return source == expected or source.endswith("/" + expected)


def _normalized(text: str) -> str:
    return " ".join(text.casefold().split())


def _call_is_valid(call: ToolCall) -> bool:
    if "error" in call:
        return False
    if not call["name"].startswith("search_"):
        return True  # a list or read: its schema checked its arguments
    query = call.get("args", {}).get("query")
    return isinstance(query, str) and bool(query.strip())


def _first_match_rank(call: dict[str, Any], expected: Sequence[str], k: int) -> int | None:
    for result in call["results"]:
        if result["rank"] <= k and any(source_matches(result["source"], e) for e in expected):
            return result["rank"]
    return None


@cache
def _unordered_tool_match():
    from agentevals.trajectory.match import create_trajectory_match_evaluator

    return create_trajectory_match_evaluator(
        trajectory_match_mode="unordered", tool_args_match_mode="ignore"
    )


def _tool_match(called: Sequence[str], expected: Sequence[str]) -> bool:
    """Match the distinct tools a turn called against the expected ones, in any order.

    Repeated searches of one store count once: the question is which stores the model chose,
    not how often it searched them (that shows in the trajectory).
    """

    def trajectory(names: Sequence[str]) -> list[dict[str, Any]]:
        calls = [{"function": {"name": n, "arguments": "{}"}} for n in names]
        return [{"role": "assistant", "content": "", "tool_calls": calls}]

    distinct = list(dict.fromkeys(called))
    result = _unordered_tool_match()(
        outputs=trajectory(distinct), reference_outputs=trajectory(expected)
    )
    return bool(result["score"])


def score_turn(case: Case, turn: Turn | None, mode: str, k: int) -> dict[str, Any]:
    """Score one run of a case; an outcome is None where the case sets no expectation.

    `turn` is None when the run failed: it then fails every expectation the case states,
    except those that depend on what the model did (selection, arguments, citations).
    """
    agent = mode == AGENT
    calls = turn["tool_calls"] if turn else []
    outcomes: dict[str, Any] = dict.fromkeys(
        ("tool_decision", "tool_selection", "retrieval_hit", "retrieval_rr", "retrieval_recall")
        + ("answer_contains", "citations_valid", "irrelevance", "followup_hit")
    )
    outcomes["valid_calls"] = outcomes["calls"] = 0
    written = turn.get("text_calls", []) if turn else []
    outcomes["text_calls_recovered"] = sum(1 for c in written if c["recovered"])
    outcomes["text_calls_unrun"] = len(written) - outcomes["text_calls_recovered"]
    outcomes["wrong_names_retried"] = _wrong_names_retried(calls)
    outcomes["valid_citations"] = outcomes["invalid_citations"] = 0
    by_model = [c for c in calls if "rewritten_from" not in c]
    outcomes["searches"] = len(calls)
    shown = [r for c in calls for r in _shown_results(c)]
    outcomes["passages_shown"] = len(shown)
    outcomes["shown_expected"] = None
    if case.expect_sources:
        outcomes["shown_expected"] = sum(
            any(source_matches(r["source"], e) for e in case.expect_sources) for r in shown
        )
    if case.expect_tools is not None and agent:
        outcomes["tool_decision"] = bool(calls) == bool(case.expect_tools)
        if case.category == IRRELEVANCE:
            outcomes["irrelevance"] = outcomes["tool_decision"]
        if case.expect_tools and calls:
            outcomes["tool_selection"] = _tool_match([c["name"] for c in calls], case.expect_tools)
    if agent:
        outcomes["calls"] = len(by_model)
        outcomes["valid_calls"] = sum(_call_is_valid(c) for c in by_model)
    if case.expect_sources:
        ranks = [r for c in calls if (r := _first_match_rank(c, case.expect_sources, k))]
        outcomes["retrieval_hit"] = bool(ranks)
        outcomes["retrieval_rr"] = 1 / min(ranks) if ranks else 0.0
        found = {
            e
            for e in case.expect_sources
            for c in calls
            for r in c["results"]
            if r["rank"] <= k and source_matches(r["source"], e)
        }
        outcomes["retrieval_recall"] = len(found) / len(case.expect_sources)
        if case.history:
            outcomes["followup_hit"] = outcomes["retrieval_hit"]
    if case.answer_contains:
        answer = _normalized(turn["answer"]) if turn else ""
        outcomes["answer_contains"] = all(_normalized(s) in answer for s in case.answer_contains)
    outcomes |= corpus.score(case.extra, turn)
    if turn:
        outcomes["valid_citations"] = len(turn["citations"])
        outcomes["invalid_citations"] = len(turn["invalid_citations"])
        if turn["citations"] or turn["invalid_citations"]:
            outcomes["citations_valid"] = not turn["invalid_citations"]
    return outcomes


def _wrong_names_retried(calls: Sequence[ToolCall]) -> int:
    """Count calls to a tool that does not exist followed, later in the turn, by a call that
    ran: the model read the list of tools it was sent back and corrected itself."""
    last_ran = max((i for i, c in enumerate(calls) if "error" not in c), default=-1)
    return sum(1 for c in calls[:last_ran] if c.get("error") == "unknown tool")


def _shown_results(call: ToolCall) -> list[Passage]:
    """The passages of a search the model was given: after grading, those it `shown`."""
    if "shown" not in call:
        return call["results"]
    shown = set(call["shown"])
    return [r for r in call["results"] if r["n"] in shown]


def retrieval_ranks(
    archivist: Archivist,
    cases: Sequence[Case],
    store: str,
    modes: Sequence[SearchMode] = ("hybrid", "dense", "sparse"),
    k: int = 10,
    rerank: bool = False,
) -> list[dict[str, Any]]:
    """Search `store` with each case's question in each mode, without a model; return, per
    case with `expect_sources` and mode, the best rank of an expected source in the top k
    (`rank` None when none is there) and the top result's source. With `rerank`, the
    searches are reranked by the settings' rerank model."""
    records = []
    for case in cases:
        if not case.expect_sources:
            continue
        for mode in modes:
            results = archivist.search(case.question, store, k, mode, rerank=rerank)
            records.append(
                {
                    "store": store,
                    "mode": mode,
                    "case": case.id,
                    "question": case.question,
                    "expect_sources": list(case.expect_sources),
                    "k": k,
                    "rank": _first_match_rank({"results": results}, case.expect_sources, k),
                    "top_source": results[0]["source"] if results else None,
                }
            )
    return records


def hit_rates(ranks: Sequence[dict[str, Any]], ks: Sequence[int]) -> list[dict[str, Any]]:
    """Summarize `retrieval_ranks` records: hit@k and MRR@k per store and mode, for each k."""
    searched = min((record["k"] for record in ranks), default=0)
    if any(k > searched for k in ks):
        raise ValueError(f"the ranks were searched to k={searched}; ask for no larger k")
    groups: dict[tuple[str, str], list[int | None]] = {}
    for record in ranks:
        groups.setdefault((record["store"], record["mode"]), []).append(record["rank"])
    rows = []
    for (store, mode), found in groups.items():
        for k in ks:
            within = [r for r in found if r is not None and r <= k]
            rows.append(
                {
                    "store": store,
                    "mode": mode,
                    "k": k,
                    "hit_rate": len(within) / len(found),
                    "mrr": sum(1 / r for r in within) / len(found),
                    "cases": len(found),
                }
            )
    return rows


EMBEDDER_MODES: tuple[SearchMode, ...] = ("dense", "hybrid", "sparse")
"""The search modes an embedder comparison reports; sparse (BM25) is the same for every
embedder, the control the others are read against."""


def compare_embedders(
    archivist: Archivist,
    cases: Sequence[Case],
    store: str,
    embed_models: Sequence[str],
    k: int,
    on_progress: ProgressFn = ignore,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Search the same cases in a store per embedding model (built from `store`'s chunks, or
    reused) in each mode; return one summary per model (its store, build time, size, and
    hit@k and MRR@k per mode) and the ranks behind them; `on_progress` hears a `StoreReady`
    as each one's store is about to be made ready."""
    if not any(case.expect_sources for case in cases):
        raise ArchivistError(
            "No case names `expect_sources`, so retrieval cannot be compared.",
            "Use a dataset with expected sources, e.g. one from `archivist eval generate`.",
        )
    summaries, ranks = [], []
    for model in dict.fromkeys(embed_models):
        on_progress(StoreReady(model))
        built = archivist.embedder_store(store, model)
        # Each store's questions are embedded by the model that built it.
        found = retrieval_ranks(archivist, cases, built["store"], EMBEDDER_MODES, k)
        for record in found:
            record["embed_model"] = model
        by_mode = {}
        for mode in EMBEDDER_MODES:
            records = [r for r in found if r["mode"] == mode]
            within = [r["rank"] for r in records if r["rank"] is not None]
            by_mode[mode] = {
                "hit@k": len(within) / len(records),
                "mrr@k": sum(1 / r for r in within) / len(records),
                "cases": len(records),
            }
        label = f"{model} (chat model)" if built["chat_model"] else model
        summaries.append({**built, "label": label, "modes": by_mode})
        ranks.extend(found)
    return summaries, ranks


def compare_reranking(
    archivist: Archivist, cases: Sequence[Case], stores: Sequence[str], k: int
) -> list[dict[str, Any]]:
    """Search each case with `expect_sources` without a chat model, plainly and reranked by
    the settings' rerank model; return one row each: hit@k, MRR@k, the cases counted, and
    the searches' median time and (reranked) the median time reranking took.

    A case searches the stores its `expect_tool` names (all stores when it names none); its
    best rank over them counts. A follow-up is searched with its own words, as a model that
    copies them would."""
    rows = []
    mode = archivist.settings.search_mode
    for rerank in (False, True):
        ranks: list[int | None] = []
        search_ms: list[float] = []
        rerank_ms: list[float] = []
        for case in cases:
            if not case.expect_sources:
                continue
            named = [t.removeprefix("search_") for t in case.expect_tools or ()]
            best = None
            for store in [s for s in stores if s in named] or list(stores):
                started = time.perf_counter()
                results = archivist.search(case.question, store, k, rerank=rerank)
                search_ms.append((time.perf_counter() - started) * 1000)
                if results.rerank_ms is not None:
                    rerank_ms.append(results.rerank_ms)
                rank = _first_match_rank({"results": results}, case.expect_sources, k)
                if rank is not None and (best is None or rank < best):
                    best = rank
            ranks.append(best)
        found = [r for r in ranks if r is not None]
        rows.append(
            {
                "search": mode + "+rerank" if rerank else mode,
                "rerank_model": archivist.settings.rerank_model if rerank else None,
                "hit@k": _ratio(len(found), len(ranks)),
                "mrr@k": sum(1 / r for r in found) / len(ranks) if ranks else None,
                "cases": len(ranks),
                "search_ms_p50": percentile(search_ms, 50),
                "rerank_ms_p50": percentile(rerank_ms, 50) if rerank else None,
            }
        )
    return rows


def percentile(values: Sequence[float], q: float) -> float | None:
    """Return the q-th percentile (0–100) with linear interpolation between ranks."""
    if not values:
        return None
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low, high = math.floor(position), math.ceil(position)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _ratio(numerator: int, denominator: int) -> float | None:
    return numerator / denominator if denominator else None


def _signature(run: dict[str, Any]) -> str:
    calls = [(c["name"], c["args"]) for c in run["tool_calls"]]
    return json.dumps([calls, run["error"]], sort_keys=True, ensure_ascii=False)


def summarize(runs: Sequence[dict[str, Any]], repeat: int) -> dict[str, Any]:
    """Aggregate one model's runs: metrics, their support (what each counts) and unstable cases."""
    outcomes = [r["outcomes"] for r in runs]

    def present(key: str) -> list:
        return [o[key] for o in outcomes if o[key] is not None]

    metrics: dict[str, Any] = {}
    support: dict[str, int] = {}
    for metric, key in (
        ("tool_decision_accuracy", "tool_decision"),
        ("irrelevance_accuracy", "irrelevance"),
        ("tool_selection_accuracy", "tool_selection"),
        ("retrieval_hit@k", "retrieval_hit"),
        ("followup_hit@k", "followup_hit"),
        ("retrieval_mrr@k", "retrieval_rr"),
        ("retrieval_recall@k", "retrieval_recall"),
        ("answer_contains_rate", "answer_contains"),
    ):
        values = present(key)
        metrics[metric] = _mean([float(v) for v in values])
        support[metric] = len(values)
    precise = [o for o in outcomes if o.get("shown_expected") is not None]
    shown = sum(o["passages_shown"] for o in precise)
    metrics["context_precision"] = _ratio(sum(o["shown_expected"] for o in precise), shown)
    support["context_precision"] = shown
    calls = sum(o["calls"] for o in outcomes)
    metrics["argument_validity"] = _ratio(sum(o["valid_calls"] for o in outcomes), calls)
    support["argument_validity"] = calls
    cited = sum(o["valid_citations"] + o["invalid_citations"] for o in outcomes)
    metrics["citation_validity"] = _ratio(sum(o["valid_citations"] for o in outcomes), cited)
    support["citation_validity"] = cited
    found, counted = corpus.summarize(outcomes)
    metrics |= found
    support |= counted
    for metric in JUDGE_METRICS:
        verdicts = [r["judge"][metric] for r in runs if r.get("judge", {}).get(metric) is not None]
        if any("judge" in r for r in runs):
            metrics[metric] = _mean([float(v) for v in verdicts])
            support[metric] = len(verdicts)
    latencies = [r["latency_ms"] for r in runs if r["error"] is None]
    metrics["latency_p50_ms"] = percentile(latencies, 50)
    metrics["latency_p95_ms"] = percentile(latencies, 95)
    support["latency_p50_ms"] = support["latency_p95_ms"] = len(latencies)
    for key in ("input_tokens", "output_tokens", "model_calls", "grade_calls", "rewrite_calls"):
        metrics[key] = sum(r["usage"].get(key, 0) for r in runs)
    for key in TEXT_CALL_METRICS:
        metrics[key] = sum(o[key] for o in outcomes)
    metrics["searches"] = sum(o["searches"] for o in outcomes)
    metrics["passages_shown"] = sum(o["passages_shown"] for o in outcomes)
    metrics["errors"] = sum(r["error"] is not None for r in runs)
    metrics["runs"] = len(runs)
    by_case: dict[str, list[dict[str, Any]]] = {}
    for run in runs:
        by_case.setdefault(run["case_id"], []).append(run)
    if repeat > 1:
        same_calls = [len({_signature(r) for r in rs}) == 1 for rs in by_case.values()]
        same_answer = [len({r["answer"] for r in rs}) == 1 for rs in by_case.values()]
        metrics["trajectory_agreement"] = _mean([float(s) for s in same_calls])
        metrics["answer_agreement"] = _mean([float(s) for s in same_answer])
        support["trajectory_agreement"] = support["answer_agreement"] = len(by_case)
    else:
        metrics["trajectory_agreement"] = metrics["answer_agreement"] = None
    unstable = [
        case
        for case, rs in by_case.items()
        if len({_signature(r) for r in rs}) > 1 or len({r["answer"] for r in rs}) > 1
    ]
    return {"metrics": metrics, "support": support, "unstable_cases": unstable}


GRADING_FIELDS = (
    "rerank_ms",
    "rerank_model",
    "rewritten_from",
    "grades",
    "kept",
    "shown",
    "grade_ms",
    "grading_error",
    "rewrite_error",
)


RESULT_FIELDS = ("rank", "n", "source", "score", "chunk_id", "rerank_score", "retrieval_rank")


def _trajectory(calls: Sequence[ToolCall], agent: bool) -> list[dict[str, Any]]:
    """Describe a turn's tool calls for the report, without the passages' text."""
    return [
        {
            "name": c["name"],
            "args": c["args"],
            "by": "grader" if "rewritten_from" in c else "model" if agent else "application",
            "valid": _call_is_valid(c),
            **({"from_text": True} if c.get("from_text") else {}),
            **({"error": c["error"]} if "error" in c else {}),
            "latency_ms": c.get("latency_ms"),
            **{key: c[key] for key in GRADING_FIELDS if key in c},
            "results": [{k: r[k] for k in RESULT_FIELDS if k in r} for r in c["results"]],
        }
        for c in calls
    ]


class Judge:
    """LLM-as-judge verdicts from openevals, with an Ollama chat model from the Ollama seam."""

    def __init__(self, archivist: Archivist, model: str, seed: int | None) -> None:
        from openevals.llm import create_llm_as_judge
        from openevals.prompts import RAG_GROUNDEDNESS_PROMPT, RAG_HELPFULNESS_PROMPT

        self.model = model
        chat = archivist.ollama.chat_model(model, temperature=0, seed=seed)
        self.helpfulness = create_llm_as_judge(
            prompt=RAG_HELPFULNESS_PROMPT, feedback_key="helpfulness", judge=chat
        )
        self.groundedness = create_llm_as_judge(
            prompt=RAG_GROUNDEDNESS_PROMPT, feedback_key="groundedness", judge=chat
        )

    def __call__(self, turn: Turn) -> dict[str, Any]:
        """Judge whether the answer helps with the question and is grounded in what was found."""
        verdicts: dict[str, Any] = {"judge_helpfulness": None, "judge_groundedness": None}
        comments: dict[str, str] = {}
        errors: list[str] = []
        context = "\n\n".join(
            format_results(c["name"], str(c["args"].get("query", "")), c["results"])
            for c in turn["tool_calls"]
            if c["results"]
        )
        checks = [("judge_helpfulness", self.helpfulness, {"inputs": turn["question"]})]
        if context:
            checks.append(("judge_groundedness", self.groundedness, {"context": context}))
        for metric, evaluator, inputs in checks:
            try:
                result = evaluator(outputs=turn["answer"], **inputs)
            except Exception as exc:  # a judge that cannot produce the verdict's JSON
                _raise_if_unreachable(exc, self.model)
                errors.append(f"{metric}: {exc}")
                continue
            verdicts[metric] = bool(result["score"])
            comments[metric] = str(result.get("comment") or "")
        return {**verdicts, "comments": comments, "errors": errors}


def _raise_if_unreachable(exc: BaseException, model: str) -> None:
    """Stop the whole evaluation when Ollama is gone: every further case would fail too."""
    if isinstance(exc, ConnectionError | httpx.ConnectError):
        raise ArchivistError(
            f"Lost the connection to Ollama while evaluating {model}.",
            "Start Ollama again (`ollama serve`) and re-run the evaluation.",
        ) from None


def variant_label(model: str, grade: bool, rerank: bool = False, toolset: str | None = None) -> str:
    """Name a model's column in the report: `MODEL`, `MODEL+grade` with grading,
    `MODEL+rerank` with reranking (`MODEL+grade+rerank` with both), `MODEL+all-tools` when
    the model had each store's list and read tools too."""
    label = model + ("+grade" if grade else "") + ("+rerank" if rerank else "")
    return label + ("+all-tools" if toolset == "all" else "")


def evaluate(
    archivist: Archivist,
    dataset: Path,
    cases: Sequence[Case],
    stores: Sequence[str],
    model_names: Sequence[str],
    repeat: int = 1,
    seed: int | None = 42,
    judge_model: str | None = None,
    on_progress: ProgressFn = ignore,
    grading: Sequence[bool] = (False,),
    embed_models: Sequence[str] = (),
    toolsets: Sequence[str | None] = (None,),
) -> dict[str, Any]:
    """Run every case `repeat` times against every model; return the report.

    `grading` lists the variants to run per model: without grading (False), with it (True),
    or both, each reported in its own column. With a rerank model in the settings every
    variant also runs reranked (`MODEL+rerank`), and `reranking` compares the searches alone
    with and without it. `embed_models` are compared on retrieval alone (`compare_embedders`).
    `on_progress` hears a `CaseRan` after each run of a case and a `StoreReady` as each
    embedder's store is made ready. `toolsets` lists the tools each model is run with
    (`search`, `all`; None: the settings'), each variant in its own column.
    """
    if repeat < 1:
        raise ArchivistError("--repeat must be at least 1.", "Use --repeat 1 or more.")
    if not model_names and not embed_models:
        raise ArchivistError("No model to evaluate.", "Name one or more with --model M.")
    if embed_models and len(stores) != 1:
        raise ArchivistError(
            "Embedding models are compared on one store at a time.",
            "Give one --store with --embed-model.",
        )
    # A failed evaluation (a model not pulled, Ollama gone) releases a store it opened: a
    # notebook's kernel lives on after the cell.
    with archivist.released_on_failure():
        check_tools(cases, stores)
        k = archivist.settings.k
        started = datetime.now(UTC)
        rerank_model = archivist.settings.rerank_model
        reranking = [False, True] if rerank_model else [False]
        # Build every graph first: a missing model or store fails before any time is spent.
        # A checkpointer keeps a multi-turn case's earlier turns; every run has its own thread.
        memory = InMemorySaver()
        setups = [
            (
                archivist.agent(
                    stores,
                    name,
                    seed=seed,
                    grade=grade,
                    rerank=rerank,
                    checkpointer=memory,
                    tools=toolset,
                ),
                rerank,
                toolset or archivist.settings.tools,
            )
            for name in dict.fromkeys(model_names)
            for toolset in dict.fromkeys(toolsets)
            for grade in dict.fromkeys(grading)
            for rerank in reranking
        ]
        if judge_model:
            archivist.ollama.show(judge_model)
        judge = Judge(archivist, judge_model, seed) if judge_model else None
        embedders, embedder_ranks = (
            compare_embedders(archivist, cases, stores[0], embed_models, k, on_progress)
            if embed_models
            else ([], [])
        )
        compared = compare_reranking(archivist, cases, stores, k) if rerank_model else []
        runs: list[dict[str, Any]] = []
        summaries = []
        for setup, rerank, toolset in setups:
            label = variant_label(setup.model, setup.grade, rerank, toolset)
            model_runs = []
            for case in cases:
                for attempt in range(repeat):
                    run = _run_case(archivist, setup, case, attempt, judge, rerank)
                    model_runs.append({**run, "label": label, "toolset": toolset})
                    on_progress(CaseRan(label, case.id, attempt))
            about = {
                "model": setup.model,
                "label": label,
                "grade": setup.grade,
                "rerank": rerank,
                "mode": setup.mode,
                "toolset": toolset,
            }
            # Whether the model can call tools: retrieve-then-answer is then --retrieve-first.
            about["tools"] = bool(setup.info and setup.info.tools)
            summaries.append({**about, **summarize(model_runs, repeat)})
            runs.extend(model_runs)
        return {
            "dataset": str(dataset),
            "stores": list(stores),
            "k": k,
            "repeat": repeat,
            "seed": seed,
            "temperature": 0,
            "judge": judge_model,
            "grading": ["on" if g else "off" for g in dict.fromkeys(grading)],
            "toolsets": list(dict.fromkeys(t for _, _, t in setups)),
            "max_rewrites": archivist.settings.max_rewrites,
            "rerank_model": rerank_model or None,
            "rerank_candidates": archivist.settings.rerank_candidates if rerank_model else None,
            "reranking": compared,
            "categories": {
                category: sum(1 for case in cases if case.category == category)
                for category in (SINGLE_TURN, MULTI_TURN, IRRELEVANCE)
            },
            "cases": len(cases),
            "started_at": started.isoformat(timespec="seconds"),
            "finished_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "models": summaries,
            "runs": runs,
            "embedders": embedders,
            "embedder_ranks": embedder_ranks,
            "provenance": provenance(dataset),
        }


def provenance(dataset: Path) -> dict[str, Any] | None:
    """How a generated dataset was made (store, model, seed, filters, drops), else None."""
    from archivist.evaluation.generate import read_meta

    meta = read_meta(dataset)
    if meta is None:
        return None
    return {k: v for k, v in meta.items() if k not in ("tried", "dropped_cases")}


def _run_case(
    archivist: Archivist,
    setup: AgentSetup,
    case: Case,
    attempt: int,
    judge: Judge | None,
    rerank: bool = False,
) -> dict[str, Any]:
    """Run one case once in a fresh thread and score it: its earlier questions (`history`)
    first, in the same thread, then the question scored."""
    model, mode, grade = setup.model, setup.mode, setup.grade
    turn: Turn | None = None
    error = None
    thread = f"eval-{uuid.uuid4()}"
    try:
        for earlier in case.history:
            run_turn(setup, earlier, thread)
        turn = run_turn(setup, case.question, thread)
    except Exception as exc:
        _raise_if_unreachable(exc, model)
        explained = explain(exc, archivist.settings)
        error = str(explained) if explained else f"{type(exc).__name__}: {exc}"
    run: dict[str, Any] = {
        "model": model,
        "label": variant_label(model, grade, rerank),
        "grade": grade,
        "rerank": rerank,
        "mode": mode,
        "case_id": case.id,
        "category": case.category,
        "repeat": attempt,
        "question": case.question,
        "expect": case.to_dict(),
        "answer": turn["answer"] if turn else None,
        "tool_calls": _trajectory(turn["tool_calls"], mode == AGENT) if turn else [],
        "text_calls": turn["text_calls"] if turn else [],
        "searched": turn["searched"] if turn else None,
        "citations": turn["citations"] if turn else [],
        "invalid_citations": turn["invalid_citations"] if turn else [],
        "latency_ms": turn["latency_ms"] if turn else None,
        "usage": turn["usage"] if turn else dict.fromkeys(USAGE_KEYS, 0),
        "error": error,
        "outcomes": score_turn(case, turn, mode, archivist.settings.k),
    }
    if judge and turn:
        run["judge"] = judge(turn)
    return run
