"""Render an evaluation report: a terminal table, Markdown, a PNG chart, and the files."""

import json
from pathlib import Path
from typing import Any

from archivist.evaluation.run import (
    GRADING_METRICS,
    JUDGE_METRICS,
    RATE_METRICS,
    STABILITY_METRICS,
    TEXT_CALL_METRICS,
)

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


def markdown(report: dict[str, Any]) -> str:
    """Render the report as Markdown: settings, the metrics table, and each case's outcome."""
    models = report["models"]
    lines = [
        f"# Evaluation: {Path(report['dataset']).name}",
        "",
        f"* stores: {', '.join(report['stores'])}; k = {report['k']}; "
        f"{runs_each(report)}; temperature 0, "
        f"seed {report['seed']}",
        f"* judge: {report['judge'] or 'none'}",
        f"* run: {report['started_at']} – {report['finished_at']}",
    ]
    if any(s.get("grade") for s in models):
        lines.append(
            f"* `+grade`: the chat model grades each search's passages (one structured-output "
            "request per search) and the irrelevant ones are dropped; a search with nothing "
            f"relevant is rewritten and run again, at most {report.get('max_rewrites')} times"
        )
    for summary in models:
        if summary["mode"] != "agent":
            lines.append(
                f"* **{label(summary)}** has no tool calling: evaluated in "
                f"{summary['mode']} mode (the application searches every store with the "
                "question), so its tool decision, selection and argument metrics do not apply."
            )
        if note := text_call_note(summary):
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
    return "\n".join(lines) + "\n"


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
        f"{recovered + unrun + called} calls, of which {recovered} were recovered and run and "
        f"{unrun} could not be (no such tool, or arguments that do not fit)."
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


def write_report(report: dict[str, Any], out: Path) -> dict[str, Path]:
    """Write report.json, report.md and chart.png into `out`; return their paths."""
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / "report.json", "markdown": out / "report.md", "chart": out / "chart.png"}
    paths["json"].write_text(json.dumps(report, ensure_ascii=False, indent=2) + "\n", "utf-8")
    paths["markdown"].write_text(markdown(report), "utf-8")
    chart(report, paths["chart"])
    return paths
