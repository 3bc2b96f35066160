"""Render an evaluation report: a terminal table, Markdown, a PNG chart, and the files."""

import json
from pathlib import Path
from typing import Any

from archivist.evaluation.corpus import CORPUS_METRICS
from archivist.evaluation.run import (
    GRADING_METRICS,
    JUDGE_METRICS,
    RATE_METRICS,
    STABILITY_METRICS,
    TEXT_CALL_METRICS,
)
from archivist.printable import printable
from archivist.tools.words import count

LATENCY_METRICS = ("latency_p50_ms", "latency_p95_ms")
TOKEN_METRICS = ("input_tokens", "output_tokens", "model_calls")
NOT_APPLICABLE = "–"


def metric_label(metric: str, k: int) -> str:
    """Name a metric with its cutoff: `retrieval_hit@5`."""
    return metric.replace("@k", f"@{k}")


def metric_rows(report: dict[str, Any]) -> list[str]:
    """The metrics to show, in order: judge and stability rows only when they were measured."""
    rows = list(RATE_METRICS)
    first = report["models"][0]["metrics"] if report["models"] else {}
    models = report["models"]
    rows += [m for m in CORPUS_METRICS if any(s.get("support", {}).get(m) for s in models)]
    rows += [m for m in JUDGE_METRICS if m in first]
    if report["repeat"] > 1:
        rows += list(STABILITY_METRICS)
    rows += [*LATENCY_METRICS, *TOKEN_METRICS, *TEXT_CALL_METRICS]
    if any(s.get("grade") for s in report["models"]):
        rows += list(GRADING_METRICS)
    return rows + ["errors", "runs"]


def format_value(summary: dict[str, Any], metric: str) -> str:
    """Format one metric of one model, with what it counts where that matters."""
    value = summary["metrics"].get(metric)
    if value is None:
        return NOT_APPLICABLE
    if metric in LATENCY_METRICS:
        return f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    support = summary["support"].get(metric)
    return f"{value:.2f} (n={support})" if support is not None else f"{value:.2f}"


def label(summary: dict[str, Any]) -> str:
    """A column's name: the model, `+grade` when its passages were graded."""
    return summary.get("label", summary["model"])


def model_heading(summary: dict[str, Any]) -> str:
    return f"{label(summary)} ({summary['mode']})"


def table(report: dict[str, Any]):
    """Build the Rich table: one row per metric, one column per model."""
    from rich.table import Table

    grid = Table(title=f"archivist eval · {Path(report['dataset']).name} · k={report['k']}")
    grid.add_column("metric", style="bold")
    for summary in report["models"]:
        grid.add_column(model_heading(summary), justify="right")
    for metric in metric_rows(report):
        grid.add_row(
            metric_label(metric, report["k"]), *(format_value(s, metric) for s in report["models"])
        )
    return grid


EMBEDDER_COLUMNS = ("store", "built", "ingest s", "chunks", "dimension", "disk MB")


def _embedder_cells(summary: dict[str, Any]) -> list[str]:
    """An embedder's store figures, then hit@k and MRR@k per search mode."""
    seconds, size = summary.get("ingest_s"), summary.get("disk_bytes")
    cells = [
        summary["store"],
        "reused" if summary["reused"] else "built",
        NOT_APPLICABLE if seconds is None else f"{seconds:.2f}",
        f"{summary['chunks']:,}",
        str(summary["dimension"]),
        NOT_APPLICABLE if size is None else f"{size / 1e6:.2f}",
    ]
    for figures in summary["modes"].values():
        cells += [f"{figures['hit@k']:.2f}", f"{figures['mrr@k']:.2f}"]
    return cells


def _embedder_headers(report: dict[str, Any]) -> list[str]:
    modes = list(report["embedders"][0]["modes"]) if report["embedders"] else []
    k = report["k"]
    return [*EMBEDDER_COLUMNS, *(f"{m} {name}@{k}" for m in modes for name in ("hit", "MRR"))]


def embedder_table(report: dict[str, Any]):
    """Build the Rich table of the embedding models: one row each, retrieval per mode."""
    from rich.table import Table

    grid = Table(
        title=f"embedding models · {Path(report['dataset']).name} · k={report['k']} · "
        "retrieval without a chat model"
    )
    grid.add_column("embedding model", style="bold")
    for header in _embedder_headers(report):
        grid.add_column(header, justify="right")
    for summary in report["embedders"]:
        grid.add_row(summary["label"], *_embedder_cells(summary))
    return grid


RERANK_COLUMNS = ("search", "hit@k", "MRR@k", "cases", "search ms p50", "rerank ms p50")


def _rerank_cells(row: dict[str, Any]) -> list[str]:
    def figure(value: float | None, spec: str) -> str:
        return NOT_APPLICABLE if value is None else format(value, spec)

    return [
        row["search"],
        figure(row["hit@k"], ".2f"),
        figure(row["mrr@k"], ".2f"),
        str(row["cases"]),
        figure(row["search_ms_p50"], ",.0f"),
        figure(row["rerank_ms_p50"], ",.0f"),
    ]


def _rerank_headers(report: dict[str, Any]) -> list[str]:
    return [c.replace("@k", f"@{report['k']}") for c in RERANK_COLUMNS]


def rerank_table(report: dict[str, Any]):
    """Build the Rich table of the searches alone with and without reranking."""
    from rich.table import Table

    grid = Table(
        title=f"reranking by {report['rerank_model']} · {report['rerank_candidates']} "
        f"candidates · k={report['k']} · retrieval without a chat model"
    )
    for n, header in enumerate(_rerank_headers(report)):
        grid.add_column(header, justify="left" if n == 0 else "right", style="bold" * (n == 0))
    for row in report["reranking"]:
        grid.add_row(*_rerank_cells(row))
    return grid


def _rerank_markdown(report: dict[str, Any]) -> list[str]:
    headers = _rerank_headers(report)
    lines = [
        "## Reranking",
        "",
        f"Each question with `expect_sources` searched without a chat model, as it is and with "
        f"its top {report['rerank_candidates']} candidates reranked by "
        f"{report['rerank_model']} (one log-probability request per candidate); the models "
        "below ran both ways too (`MODEL+rerank`).",
        "",
        "| " + " | ".join(headers) + " |",
        "|---|" + "---:|" * (len(headers) - 1),
    ]
    for row in report["reranking"]:
        lines.append("| " + " | ".join(_rerank_cells(row)) + " |")
    return lines


CHAT_EMBEDDER_NOTE = (
    "**{label}** is a chat model, not an embedding model: its vectors are shown only to say "
    "how poorly a chat model's embeddings retrieve. Use an embedding model for a store."
)


def _provenance_lines(report: dict[str, Any]) -> list[str]:
    meta = report.get("provenance")
    if not meta:
        return []
    dropped = ", ".join(f"{n} {why}" for why, n in meta.get("dropped", {}).items()) or "none"
    kinds = ", ".join(f"{n} {kind}" for kind, n in meta.get("kinds", {}).items())
    return [
        f"* generated by `archivist eval generate` from the store {meta['store']} with "
        f"{meta['model']}, seed {meta['seed']}: {kinds}",
        f"* filters: {'; '.join(meta.get('filters', {}).values())}; dropped: {dropped}",
    ]


def markdown(report: dict[str, Any]) -> str:
    """Render the report as Markdown: settings, the chat models' and the embedding models'
    tables, and each case's outcome."""
    lines = [
        f"# Evaluation: {Path(report['dataset']).name}",
        "",
        f"* stores: {', '.join(report['stores'])}; k = {report['k']}; "
        f"{runs_each(report)}; temperature 0, "
        f"seed {report['seed']}",
        *_provenance_lines(report),
        f"* run: {report['started_at']} – {report['finished_at']}",
    ]
    if report.get("embedders"):
        lines += ["", *_embedder_markdown(report)]
    if report.get("reranking"):
        lines += ["", *_rerank_markdown(report)]
    if report["models"]:
        lines += ["", "## Chat models", "", *_chat_markdown(report)]
    return "\n".join(lines) + "\n"


def _embedder_markdown(report: dict[str, Any]) -> list[str]:
    headers = _embedder_headers(report)
    lines = [
        "## Embedding models",
        "",
        "Each question searched without a chat model, in each mode, in a store per embedding "
        "model holding the same chunks. Sparse (BM25) does not use the embedder: it is the "
        "same for all, the line the others are read against.",
        "",
    ]
    for summary in report["embedders"]:
        if summary["chat_model"]:
            lines += [f"* {CHAT_EMBEDDER_NOTE.format(label=summary['embed_model'])}"]
    lines += [
        "",
        "| embedding model | " + " | ".join(headers) + " |",
        "|---|" + "---:|" * len(headers),
    ]
    for summary in report["embedders"]:
        lines.append(f"| {summary['label']} | " + " | ".join(_embedder_cells(summary)) + " |")
    return lines


def _chat_markdown(report: dict[str, Any]) -> list[str]:
    models = report["models"]
    lines = [f"* judge: {report['judge'] or 'none'}"]
    if categories := report.get("categories"):
        lines.append(
            "* cases: "
            + ", ".join(f"{n} {category}" for category, n in categories.items())
            + " (irrelevance: should answer without searching, scored by "
            "irrelevance_accuracy; multi-turn: a follow-up after earlier questions, scored by "
            "followup_hit@k on the follow-up's searches)"
        )
    if any(s.get("grade") for s in models):
        lines.append(
            f"* `+grade`: the chat model grades each search's passages (one structured-output "
            "request per search) and the irrelevant ones are dropped; a search with nothing "
            f"relevant is rewritten and run again, at most {report.get('max_rewrites')} times"
        )
    for summary in models:
        if summary["mode"] != "agent" and summary.get("tools"):
            lines.append(
                f"* **{label(summary)}** was evaluated in {summary['mode']} mode "
                "(--retrieve-first: the application searches every store with the question), "
                "so its tool decision, selection and argument metrics do not apply."
            )
        elif summary["mode"] != "agent":
            lines.append(
                f"* **{label(summary)}** has no tool calling: evaluated in "
                f"{summary['mode']} mode (the application searches every store with the "
                "question), so its tool decision, selection and argument metrics do not apply."
            )
        if note := text_call_note(summary):
            lines.append(f"* {note}")
        if note := never_searched_note(summary, report["k"]):
            lines.append(f"* {note}")
        if summary["unstable_cases"]:
            lines.append(
                f"* {label(summary)} was not stable across repeats on: "
                + ", ".join(summary["unstable_cases"])
            )
    lines += [
        "",
        "| metric | " + " | ".join(model_heading(s) for s in models) + " |",
        "|---|" + "---:|" * len(models),
    ]
    for metric in metric_rows(report):
        values = " | ".join(format_value(s, metric) for s in models)
        lines.append(f"| {metric_label(metric, report['k'])} | {values} |")
    lines += [
        "",
        f"`{NOT_APPLICABLE}`: no case or call the metric applies to. `n` is what a rate counts "
        "(runs for most, tool calls for argument_validity, citations for citation_validity, "
        "passages shown to the model for context_precision). text_calls_recovered: tool calls "
        "the model wrote as text, which were run; text_calls_unrun: calls written as text that "
        "named no offered tool or had arguments that do not fit, left unrun; "
        "wrong_names_retried: calls to a tool that does not exist, corrected later in the turn.",
        "",
        "## Cases",
        "",
        "✓ passed, ✗ failed, · no expectation; per repeat, in order: "
        "tool decision, tool selection, retrieval hit, answer contains.",
        "",
        "| case | " + " | ".join(label(s) for s in models) + " |",
        "|---|" + "---|" * len(models),
    ]
    by_case: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for run in report["runs"]:
        by_case.setdefault(run["case_id"], {}).setdefault(label(run), []).append(run)
    for case_id, per_model in by_case.items():
        cells = [" ".join(_marks(run) for run in per_model.get(label(s), [])) for s in models]
        lines.append(f"| {case_id} | " + " | ".join(cells) + " |")
    return lines


def text_call_note(summary: dict[str, Any]) -> str | None:
    """Say so when a model wrote most of its tool calls as text instead of calling the tool."""
    metrics = summary["metrics"]
    recovered = metrics.get("text_calls_recovered", 0)
    unrun = metrics.get("text_calls_unrun", 0)
    # Recovered calls ran, so they are among the calls argument_validity counts.
    called = summary["support"].get("argument_validity", 0) - recovered
    if recovered + unrun <= called:
        return None
    return (
        f"**{label(summary)}** mostly writes its tool calls as text: {recovered + unrun} of "
        f"{count(recovered + unrun + called, 'call')}, of which {recovered} were recovered and "
        f"run and "
        f"{unrun} could not be (no such tool, or arguments that do not fit)."
    )


def never_searched_note(summary: dict[str, Any], k: int) -> str | None:
    """Say so when a model able to call tools never searched, though cases expected it to,
    and how to make it (as `ask` does for one turn)."""
    metrics, support = summary["metrics"], summary["support"]
    decision = metrics.get("tool_decision_accuracy")
    written = metrics.get("text_calls_recovered", 0) + metrics.get("text_calls_unrun", 0)
    if summary["mode"] != "agent" or support.get("argument_validity", 0) or written:
        return None
    if decision is None or decision == 1:
        return None  # no case expected a search
    scores = [f"tool decision {decision:.2f}"]
    if (hit := metrics.get("retrieval_hit@k")) is not None:
        scores.append(f"hit@{k} {hit:.2f}")
    return (
        f"**{label(summary)}** never searched: it answered every case without calling a tool "
        f"({', '.join(scores)}). If it should have, --retrieve-first (or "
        "ARCHIVIST_RETRIEVE_FIRST=1) searches every store before each answer."
    )


def _marks(run: dict[str, Any]) -> str:
    if run["error"]:
        return "error"
    outcomes = run["outcomes"]
    keys = ("tool_decision", "tool_selection", "retrieval_hit", "answer_contains")
    return "".join("·" if outcomes[key] is None else "✓" if outcomes[key] else "✗" for key in keys)


def runs_each(report: dict[str, Any]) -> str:
    """Say how many cases ran how often: `8 cases, 1 run each`."""
    cases, repeat = report["cases"], report["repeat"]
    return f"{cases} case{'s' * (cases != 1)}, {repeat} run{'s' * (repeat != 1)} each"


def chart(report: dict[str, Any], path: Path) -> None:
    """Draw the models side by side into a PNG: the rates, and latency p50/p95."""
    chart_figure(report).savefig(path, dpi=110)


def chart_figure(report: dict[str, Any], width: float = 13):
    """Draw the models side by side: the rates, and latency p50/p95 (`width` in inches)."""
    # A bare Figure draws with Agg without pyplot, so the caller's backend (a notebook's inline
    # one) stays as it was.
    from matplotlib.figure import Figure

    models = report["models"]
    rates = [
        m for m in metric_rows(report) if m in (*RATE_METRICS, *JUDGE_METRICS, *STABILITY_METRICS)
    ]
    figure = Figure(figsize=(width, 0.45 * len(rates) + 2.5))
    left, right = figure.subplots(1, 2, gridspec_kw={"width_ratios": [3, 1.3]})
    height = 0.8 / max(len(models), 1)
    for i, summary in enumerate(models):
        values = [summary["metrics"].get(m) for m in rates]
        positions = [row + i * height for row in range(len(rates))]
        bars = left.barh(positions, [v or 0 for v in values], height, label=model_heading(summary))
        for bar, value in zip(bars, values, strict=True):
            text = NOT_APPLICABLE if value is None else f"{value:.2f}"
            left.text(bar.get_width() + 0.01, bar.get_y() + height / 2, text, va="center", size=8)
    left.set_yticks([row + height * (len(models) - 1) / 2 for row in range(len(rates))])
    left.set_yticklabels([metric_label(m, report["k"]) for m in rates])
    left.invert_yaxis()
    left.set_xlim(0, 1.12)
    left.set_xlabel("rate (higher is better)")
    width = 0.8 / max(len(models), 1)
    for i, summary in enumerate(models):
        values = [summary["metrics"].get(m) or 0 for m in LATENCY_METRICS]
        right.bar([x + i * width for x in range(2)], values, width)
    right.set_xticks([width * (len(models) - 1) / 2 + x for x in range(2)])
    right.set_xticklabels(["p50", "p95"])
    right.set_ylabel("latency per case (ms)")
    figure.suptitle(
        f"{Path(report['dataset']).name}: {runs_each(report)} · "
        f"stores {', '.join(report['stores'])}"
    )
    handles, labels = left.get_legend_handles_labels()
    figure.legend(handles, labels, loc="lower center", ncol=min(len(models), 4), fontsize=9)
    figure.tight_layout(rect=(0, 0.07, 1, 1))
    return figure


def embedder_chart(report: dict[str, Any], path: Path) -> None:
    """Draw the embedding models side by side into a PNG: hit@k and MRR@k per search mode."""
    embedder_chart_figure(report).savefig(path, dpi=110)


def embedder_chart_figure(report: dict[str, Any], width: float = 11):
    """Draw the embedding models side by side: hit@k and MRR@k per search mode (`width` in
    inches); a chat model given as an embedder is hatched."""
    from matplotlib.figure import Figure

    embedders = report["embedders"]
    modes = list(embedders[0]["modes"])
    figure = Figure(figsize=(width, 1.1 * len(modes) + 2.5))
    axes = figure.subplots(1, 2, sharey=True)
    height = 0.8 / len(embedders)
    for axis, (metric, name) in zip(axes, (("hit@k", "hit"), ("mrr@k", "MRR")), strict=True):
        for i, summary in enumerate(embedders):
            values = [summary["modes"][m][metric] for m in modes]
            positions = [row + i * height for row in range(len(modes))]
            hatch = "//" if summary["chat_model"] else None
            bars = axis.barh(positions, values, height, label=summary["label"], hatch=hatch)
            for bar, value in zip(bars, values, strict=True):
                axis.text(value + 0.01, bar.get_y() + height / 2, f"{value:.2f}", va="center")
        axis.set_xlim(0, 1.15)
        axis.set_xlabel(f"{name}@{report['k']} (higher is better)")
    axes[0].set_yticks([row + height * (len(embedders) - 1) / 2 for row in range(len(modes))])
    axes[0].set_yticklabels(modes)
    axes[0].invert_yaxis()
    figure.suptitle(
        f"embedding models · {Path(report['dataset']).name} · store {report['stores'][0]}"
    )
    handles, labels = axes[0].get_legend_handles_labels()
    figure.legend(handles, labels, loc="lower center", ncol=min(len(embedders), 3), fontsize=9)
    figure.tight_layout(rect=(0, 0.1, 1, 1))
    return figure


def write_report(report: dict[str, Any], out: Path) -> dict[str, Path]:
    """Write report.json, report.md, and the charts (chart.png for the chat models,
    embedders.png for the embedding models) into `out`; return their paths."""
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / "report.json", "markdown": out / "report.md"}
    paths["json"].write_text(json.dumps(report, ensure_ascii=False, indent=2) + "\n", "utf-8")
    # Shown with `cat` on a terminal: a dataset's escape sequences are written as escapes.
    paths["markdown"].write_text(printable(markdown(report)), "utf-8")
    if report["models"]:
        paths["chart"] = out / "chart.png"
        chart(report, paths["chart"])
    if report.get("embedders"):
        paths["embedder_chart"] = out / "embedders.png"
        embedder_chart(report, paths["embedder_chart"])
    return paths
