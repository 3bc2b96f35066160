"""Generated test sets: questions a chat model writes from a store's own passages, filtered.

The set keeps the dataset format `archivist eval` reads; its provenance (store, model, seed,
filters, what was dropped and why) is written beside it in FILE.meta.json, which also lets an
interrupted run resume where it stopped.
"""

import json
import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from archivist.tools.errors import ArchivistError
from archivist.tools.progress import Generated, ProgressFn, ignore
from archivist.tools.sparse import CJK

if TYPE_CHECKING:
    from archivist.app import Archivist

SCHEMA = {
    "type": "object",
    "properties": {"question": {"type": "string"}, "fragment": {"type": "string"}},
    "required": ["question", "fragment"],
}
"""The structured output asked of the model for each passage."""

SYSTEM = (
    "You write test questions for a search engine over a user's documents. Given one passage, "
    "write one question a user could ask that this passage answers, and a short fragment "
    "copied word for word from the passage that a correct answer must contain. The question "
    "must make sense on its own, without seeing the passage: name the subject, never say "
    '"this passage", "this section" or "the text". Do not copy sentences of the passage into '
    "the question. Reply with JSON only."
)
REQUEST = (
    "Passage from {source}:\n<passage>\n{text}\n</passage>\n\n"
    "Write the question in {language}. The fragment: 1 to 6 words copied exactly from the "
    "passage."
)
LANGUAGES = {"zh": "Chinese", "ja": "Japanese", "ko": "Korean", "en": "the passage's language"}

MIN_PASSAGE_CHARS = 80
"""Shorter chunks (a heading, a signature) rarely answer a question worth asking."""
COPY_RUN = 8
"""A question sharing this many consecutive words (CJK: characters) with its passage copies it."""
DUPLICATE_SIMILARITY = 0.8
"""Questions whose word sets overlap this much (Jaccard) are one question asked twice."""
FILTERS = {
    "empty": "the reply had no question or no fragment",
    "copies_passage": f"the question copies {COPY_RUN}+ consecutive words of the passage",
    "needs_passage": 'the question needs the passage to make sense ("this section")',
    "duplicate": f"the question repeats an earlier one (word overlap >= {DUPLICATE_SIMILARITY})",
    "fragment_not_in_passage": "the fragment is not in the passage",
    "wrong_language": "the question is not in the passage's language",
    "unreadable": "the reply was not the JSON asked for",
}
"""Why a generated case is dropped, by the name the report counts it under."""

_NEEDS_PASSAGE = re.compile(
    r"\b(?:this|the above|the following|the given|the provided|the preceding)\s+"
    r"(?:passage|section|text|excerpt|paragraph|document|snippet|chunk|article)\b"
    r"|\b(?:the|this)\s+(?:passage|excerpt|snippet)\b"
    r"|\baccording to the (?:passage|text|section|document|excerpt)\b"
    r"|这段|本段|此段|上文|上述|本文|这篇|该段|这一节|本节",
    re.IGNORECASE,
)
_UNIT = re.compile(rf"[{CJK}]|[^\W_{CJK}]+")
_CJK_CHAR = re.compile(f"[{CJK}]")
_KANA = re.compile("[\u3040-\u30ff]")
_HANGUL = re.compile("[\uac00-\ud7af]")

NO_TOOL = {
    "en": ["Hello! Who are you?", "Thanks, that was helpful.", "What is 12 times 12?"],
    "zh": ["你好！你是谁？", "谢谢你的帮助。", "十二乘以十二等于多少？"],
}
"""Questions a good agent answers without searching (small talk, arithmetic)."""
UNANSWERABLE = {
    "en": [
        "What did the author eat for breakfast on the day this was written?",
        "What is the phone number of the chief executive's dentist?",
        "How many moons did the documents' authors count on 3 March 1802?",
    ],
    "zh": [
        "作者写这些文件那天早餐吃了什么？",
        "首席执行官的牙医电话号码是多少？",
        "1802年3月3日作者数了几颗月亮？",
    ],
}
"""Questions no user's documents answer: a good agent searches, then says it does not know."""


def language(text: str) -> str:
    """Guess a passage's language as generation needs it: zh, ja, ko or en (any other)."""
    units = _UNIT.findall(text)
    cjk = [u for u in units if _CJK_CHAR.fullmatch(u)]
    if not units or len(cjk) < 0.3 * len(units):
        return "en"
    if _KANA.search(text):
        return "ja"
    if _HANGUL.search(text):
        return "ko"
    return "zh"


def _units(text: str) -> list[str]:
    return _UNIT.findall(text.casefold())


def _normalized(text: str) -> str:
    return " ".join(_units(text))


def copies_passage(question: str, passage: str) -> bool:
    """Tell whether a question holds a run of COPY_RUN consecutive words of its passage."""
    asked, source = _units(question), _units(passage)
    runs = {tuple(source[i : i + COPY_RUN]) for i in range(len(source) - COPY_RUN + 1)}
    return any(tuple(asked[i : i + COPY_RUN]) in runs for i in range(len(asked) - COPY_RUN + 1))


def similar(a: str, b: str) -> bool:
    """Tell whether two questions are the same question (word-set overlap)."""
    x, y = set(_units(a)), set(_units(b))
    return bool(x | y) and len(x & y) / len(x | y) >= DUPLICATE_SIMILARITY


def check(
    question: str, fragment: str, passage: str, lang: str, earlier: Sequence[str]
) -> str | None:
    """Return why a generated case is bad (a FILTERS key), or None for a good one."""
    if not question.strip() or not fragment.strip():
        return "empty"
    if _NEEDS_PASSAGE.search(question):
        return "needs_passage"
    if copies_passage(question, passage):
        return "copies_passage"
    if _normalized(fragment) not in _normalized(passage):
        return "fragment_not_in_passage"
    if lang in ("zh", "ja", "ko") and not _CJK_CHAR.search(question):
        return "wrong_language"
    if any(similar(question, e) for e in earlier):
        return "duplicate"
    return None


def sample(chunks: Sequence[dict[str, Any]], seed: int) -> list[dict[str, Any]]:
    """Order a store's chunks for generation: each language and each source in proportion to
    its share of the store's chunks, at every length of the list (a store one third Chinese
    gives about one Chinese passage in three from the start), in a seeded order; within a
    source, over sizes (short, middle, long thirds in turn)."""
    rng = random.Random(seed)
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for chunk in chunks:
        if len(chunk["text"].strip()) >= MIN_PASSAGE_CHARS:
            groups.setdefault((language(chunk["text"]), chunk["source"]), []).append(chunk)
    queues = []
    for key in sorted(groups):
        ordered = sorted(groups[key], key=lambda c: (c["size"], c["chunk_index"]))
        third = max(1, -(-len(ordered) // 3))
        bands = [ordered[i : i + third] for i in range(0, len(ordered), third)]
        for band in bands:
            rng.shuffle(band)
        rng.shuffle(bands)
        longest = max(len(b) for b in bands)
        queues.append([b[i] for i in range(longest) for b in bands if i < len(b)])
    rng.shuffle(queues)
    by_language: dict[str, list[list[dict[str, Any]]]] = {}
    for queue in queues:
        by_language.setdefault(language(queue[0]["text"]), []).append(queue)
    return _spread([_spread(group) for group in by_language.values()])


def _spread(queues: Sequence[Sequence[Any]]) -> list[Any]:
    """Merge queues so that each is spread evenly over the result in proportion to its length:
    the j-th of a queue of n goes at (j + 1/2) / n along it; ties go in the queues' order."""
    placed = [
        ((j + 0.5) / len(queue), turn, j)
        for turn, queue in enumerate(queues)
        for j in range(len(queue))
    ]
    return [queues[turn][j] for _, turn, j in sorted(placed)]


def passage_key(chunk: dict[str, Any]) -> str:
    """Name a passage in the set's provenance: source#chunk_index."""
    return f"{chunk['source']}#{chunk['chunk_index']}"


def meta_path(out: Path) -> Path:
    """Where a generated set's provenance is kept: FILE.meta.json beside FILE."""
    return out.with_name(out.stem + ".meta.json")


def read_meta(dataset: Path) -> dict[str, Any] | None:
    """Return a generated set's provenance, or None for a dataset written by hand."""
    path = meta_path(dataset)
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


Ask = Callable[[str, str], Any]
"""Send (system, request) to the chat model with SCHEMA as its output format; return the
parsed JSON, or raise ValueError when the reply is not JSON."""


@dataclass
class Plan:
    """What to generate: from which store and model, how many, with which seed."""

    store: str
    tool: str
    model: str
    n: int
    seed: int


def generate(
    plan: Plan,
    chunks: Sequence[dict[str, Any]],
    ask: Ask,
    out: Path,
    on_progress: ProgressFn = ignore,
) -> dict[str, Any]:
    """Write (or finish) a generated set at `out`; return its provenance.

    Passages are tried in `sample` order until `plan.n` cases pass the filters; each kept
    case is appended to `out` and each passage tried is recorded in the meta file as it
    goes, so a run that stops resumes after the last passage tried.
    """
    meta = _resume(plan, out)
    if meta["done"]:
        return meta
    # The fixed cases are written last, all at once: a run stopped among them writes them again.
    cases = [c for c in _read_cases(out) if c.get("kind") == "passage"] if meta["tried"] else []
    out.parent.mkdir(parents=True, exist_ok=True)
    # Rewritten whole on resume: drops a line cut short when the run stopped.
    out.write_text("".join(json.dumps(c, ensure_ascii=False) + "\n" for c in cases), "utf-8")
    tried = set(meta["tried"])
    for case in cases:
        if "passage" in case and case["passage"] not in tried:
            meta["tried"].append(case["passage"])
            tried.add(case["passage"])
    questions = [c["question"] for c in cases]
    generated = list(cases)
    for chunk in sample(chunks, plan.seed):
        if len(generated) >= plan.n:
            break
        key = passage_key(chunk)
        if key in tried:
            continue
        lang = language(chunk["text"])
        request = REQUEST.format(
            source=chunk["source"], text=chunk["text"], language=LANGUAGES[lang]
        )
        try:
            reply = ask(SYSTEM, request)
            question = str(reply.get("question") or "").strip()
            fragment = str(reply.get("fragment") or "").strip()
        except (ValueError, AttributeError):
            reason: str | None = "unreadable"
        else:
            reason = check(question, fragment, chunk["text"], lang, questions)
        if reason is None:
            case = {
                "id": f"{plan.store}-{len(generated) + 1:03d}",
                "question": question,
                "expect_tool": plan.tool,
                "expect_sources": [chunk["source"]],
                "answer_contains": [fragment],
                "kind": "passage",
                "language": lang,
                "passage": key,
            }
            _append(out, case)
            generated.append(case)
            questions.append(question)
        else:
            meta["dropped"][reason] = meta["dropped"].get(reason, 0) + 1
            meta["dropped_cases"].append({"passage": key, "reason": reason})
        meta["tried"].append(key)
        tried.add(key)
        _write_meta(out, meta)
        on_progress(Generated(len(generated), len(meta["tried"])))
    if not meta["done"]:
        extra = _fixed_cases(plan, generated)
        for case in extra:
            _append(out, case)
        meta.update(done=True, cases=len(generated) + len(extra), generated=len(generated))
        meta["kinds"] = {
            kind: sum(1 for c in generated + extra if c["kind"] == kind)
            for kind in ("passage", "no_tool", "unanswerable")
        }
        _write_meta(out, meta)
    if not generated:
        raise ArchivistError(
            f"No case survived the filters ({_dropped_text(meta['dropped'])}).",
            "Try another --model (one that follows instructions), or a store with longer passages.",
        )
    return meta


def _fixed_cases(plan: Plan, generated: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """A few cases that need no tool and a few the store cannot answer, in the set's main
    language: about one of each per ten generated cases, at most three of each."""
    zh = sum(c["language"] == "zh" for c in generated) > len(generated) / 2
    lang = "zh" if zh else "en"
    count = min(3, max(1, len(generated) // 10))
    cases = []
    for number, question in enumerate(NO_TOOL[lang][:count], start=1):
        cases.append(
            {
                "id": f"{plan.store}-no-tool-{number}",
                "question": question,
                "expect_tool": None,
                "kind": "no_tool",
                "language": lang,
            }
        )
    for number, question in enumerate(UNANSWERABLE[lang][:count], start=1):
        cases.append(
            {
                "id": f"{plan.store}-unanswerable-{number}",
                "question": question,
                "expect_tool": plan.tool,
                "kind": "unanswerable",
                "language": lang,
            }
        )
    return cases


def _dropped_text(dropped: dict[str, int]) -> str:
    return ", ".join(f"{count} {reason}" for reason, count in dropped.items()) or "none dropped"


def dropped_summary(meta: dict[str, Any]) -> str:
    """Say how many generated cases were dropped, and why, in one line."""
    total = sum(meta["dropped"].values())
    if not total:
        return "Dropped no case."
    return f"Dropped {total}: {_dropped_text(meta['dropped'])}."


def _resume(plan: Plan, out: Path) -> dict[str, Any]:
    """Start the provenance afresh, or pick up an interrupted run of the same plan."""
    fresh = {
        "store": plan.store,
        "model": plan.model,
        "seed": plan.seed,
        "n": plan.n,
        "filters": FILTERS,
        "copy_run": COPY_RUN,
        "duplicate_similarity": DUPLICATE_SIMILARITY,
        "min_passage_chars": MIN_PASSAGE_CHARS,
        "tried": [],
        "dropped": {},
        "dropped_cases": [],
        "done": False,
    }
    meta = read_meta(out)
    if not out.exists() or meta is None:
        if out.exists() and out.stat().st_size:
            raise ArchivistError(
                f"{out} exists and was not generated by `archivist eval generate`.",
                "Give another --out, or delete the file.",
            )
        return fresh
    same = all(meta.get(key) == fresh[key] for key in ("store", "model", "seed", "n"))
    if not same:
        was = ", ".join(f"{key} {meta.get(key)}" for key in ("store", "model", "seed", "n"))
        raise ArchivistError(
            f"{out} was generated with other settings ({was}).",
            "Give another --out, repeat those settings to resume it, or delete both "
            f"{out.name} and {meta_path(out).name}.",
        )
    return meta


def _read_cases(out: Path) -> list[dict[str, Any]]:
    cases = []
    for line in out.read_text(encoding="utf-8").splitlines():
        try:
            cases.append(json.loads(line))
        except ValueError:
            break  # the line being written when the run stopped
    return cases


def _append(out: Path, case: dict[str, Any]) -> None:
    with out.open("a", encoding="utf-8") as file:
        file.write(json.dumps(case, ensure_ascii=False) + "\n")


def _write_meta(out: Path, meta: dict[str, Any]) -> None:
    path = meta_path(out)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(meta, ensure_ascii=False, indent=1), encoding="utf-8")
    partial.replace(path)


def generate_from_store(
    archivist: "Archivist",
    store: str,
    out: Path,
    n: int = 40,
    model: str | None = None,
    seed: int = 42,
    on_progress: ProgressFn = ignore,
) -> dict[str, Any]:
    """Generate (or resume) a test set of `n` cases from a store's passages; return its
    provenance. The model must exist before any passage is tried."""
    from archivist.agent.retrieval import tool_name
    from archivist.failures import explained

    if n < 1:
        raise ArchivistError("-n must be at least 1.", "Ask for one case or more, e.g. -n 40.")
    chunks = archivist.store(store).chunks()
    if not chunks:
        raise ArchivistError(
            f"The store '{store}' holds no passages.",
            f"Ingest documents first: archivist ingest PATH --store {store}",
        )
    name = model or archivist.settings.chat_model
    with explained(archivist.settings):
        info = archivist.ollama.show(name)
    if "completion" not in info.capabilities:
        raise ArchivistError(
            f"'{name}' cannot chat, so it cannot write questions.",
            "Give a chat model with --model.",
        )
    plan = Plan(store, tool_name(store), name, n, seed)
    ask = archivist.ollama.structured(name, SCHEMA, seed)
    resume = f"Run the same command again to resume from {out}."
    with explained(archivist.settings, doing="Generation stopped", then=resume):
        return generate(plan, chunks, ask, out, on_progress)
