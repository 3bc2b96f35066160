"""A fake Ollama HTTP server that speaks the real API, for tests, notebooks and CLI subprocesses.

Embeddings use a hashing trick over words, CJK characters and CJK bigrams. Token counts (for
`truncate: false`, context truncation and eval counts) are approximate: one token per Latin
word or number and one per CJK character. The chat model follows a simple policy: call the
best-matching tool for a question, answer from `<search_results>` with the first sentence of
the best result and a `[n]` citation, greet back on small talk; `script()` overrides it. A model
with the `thinking` capability asked to `think` streams its reasoning (a turn's `thinking`, or
a restatement of the question) in `message.thinking` before the answer.

A request with a JSON schema in `format` (structured output) and no scripted turn gets JSON
built from the schema and the prompt (`structured_policy`): a list of objects with an integer
`n` gets one item per `<result n=…>` passage in the prompt, its booleans true when the passage
shares at least two content words (one, for a one-word question) with the `Question:` line or
its known paraphrases (`PARAPHRASES`); a string field named `query`, or a list of strings, gets
the question rewritten as its content words with paraphrases applied; other booleans are false,
numbers 0, strings empty. A request for a `question` and a `fragment` about a `<passage>`
(`eval generate`) gets `written_question`.

A model with the behaviour `chat_embeddings` answers /api/embed as a chat model does: with
near-constant vectors (one shared direction plus a small part that depends on the whole text,
not its words), so a search with them ranks passages at random.

Log-probabilities (`"logprobs": true`, `"top_logprobs": N`, Ollama 0.12.11 and later) come as
the real server sends them: a top-level `logprobs` list on each answer object, one entry per
token it holds, `{"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob",
"bytes"}, …]}`. A relevance judgement — a user message with a `Query:` line and a
`<passage>` block (`is_judgement`) — is answered "yes" or "no" with P("yes") from
`relevance` (the share of the query's content words, paraphrases applied, that the passage
holds), or from a scorer set with `FakeOllama.score_with`. A server older than
LOGPROBS_VERSION (`FakeOllama(version=…)`) and a model served with `logprobs=False` ignore the
flags and send no `logprobs`, as real ones do; `top_logprobs` outside 0–20 is refused (400).
`options.num_predict` cuts an answer short (`done_reason: "length"`).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import html
import json
import math
import operator
import random
import re
import signal
import socket
import struct
import sys
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import orjson

VERSION = "0.13.1"
LOGPROBS_VERSION = "0.12.11"
"""The first Ollama release that returns log-probabilities."""
MAX_TOP_LOGPROBS = 20
MODIFIED_AT = "2025-06-01T12:00:00.000000000Z"
GREETING_REPLY = "Hello! Ask me anything about the knowledge base."
NOT_FOUND_REPLY = "I could not find this in the knowledge base."
UNKNOWN_REPLY = "I don't know."

_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af"
_UNIT = re.compile(rf"[{_CJK}]|[^\W{_CJK}]+")
_CJK_RUN = re.compile(rf"[{_CJK}]+")
_STREAM_PIECE = re.compile(rf"[{_CJK}]|\s*[^\s{_CJK}]+|\s+")
_TASK_PREFIX = re.compile(
    r"^\s*(?:search_document|search_query|clustering|classification)\s*:\s*", re.IGNORECASE
)
_GREETING = re.compile(
    r"^\W*(?:(?:hi|hello|hey|thanks|thank you|good (?:morning|afternoon|evening))\b|你好|谢谢)",
    re.IGNORECASE,
)
_RESULT = re.compile(r'<result\s+n="(\d+)"[^>]*>(.*?)</result>', re.DOTALL)
_SENTENCE = re.compile(r".*?(?:[.!?](?=\s|$)|[。！？])", re.DOTALL)
_WORD = re.compile(r"[^\W_]+")
PARAPHRASES = {
    "money back": "refund",
    "send back": "return",
    "sent back": "return",
    "smashed": "damaged",
    "broken": "damaged",
    "unboxed": "opened",
    "gadget": "electronics",
    "helpdesk": "support",
    "conversations": "chat transcripts",
    "erase": "delete",
    "profile": "account",
    "bit by bit": "instalments",
    "guarantee": "warranty",
    "delivery": "shipping",
}
"""Phrases the fake's grader and rewriter read as the words the shop's documents use."""
_PASSAGE = re.compile(r"<passage>\s*(.*?)\s*</passage>", re.DOTALL)
_QUESTION_LINE = re.compile(r"^Question:\s*(.+)$", re.MULTILINE)
_STOP_WORD = re.compile(
    r"a|an|and|are|about|can|do|does|for|from|how|i|in|is|it|me|my|of|on|or|search|the|to"
    r"|what|when|where|which|who|why|with|you|your"
)


@dataclass
class ModelSpec:
    """A model the fake serves, with its capabilities and chat behaviour."""

    name: str
    capabilities: list[str]
    behaviour: str = "tools"
    embedding_length: int = 768
    context_length: int = 8192
    family: str = "qwen2"
    parameter_size: str = "3B"
    logprobs: bool = True
    """Whether its runner returns log-probabilities when asked (False: the flags are ignored)."""
    served_length: int | None = None
    """The length of the vectors /api/embed answers, when not the declared `embedding_length`
    (a model file replaced under its name)."""


DEFAULT_MODELS: list[ModelSpec] = [
    ModelSpec("qwen2.5:3b", ["completion", "tools"], context_length=32768, parameter_size="3.1B"),
    ModelSpec(
        "nomic-embed-text:latest",
        ["embedding"],
        context_length=2048,
        family="nomic-bert",
        parameter_size="137M",
    ),
    ModelSpec(
        "all-minilm:latest",
        ["embedding"],
        embedding_length=384,
        context_length=512,
        family="bert",
        parameter_size="23M",
    ),
    ModelSpec("gemma-notools:1b", ["completion"], family="gemma3", parameter_size="1B"),
    ModelSpec(
        "qwen2.5:0.5b", ["completion", "tools"], behaviour="never_tools", parameter_size="494M"
    ),
]


SMALL_MODELS: list[ModelSpec] = [
    ModelSpec(f"small-{shape}:1b", ["completion", "tools"], behaviour=shape, parameter_size="1B")
    for shape in (
        "json",
        "parameters",
        "tagged",
        "fenced",
        "list",
        "pythonic",
        "mistral",
        "unknown",
        "wrongname",
        "think",
    )
]
"""Tool-capable models that misbehave as real small ones do (serve them with add_model):
`small-json` .. `small-mistral` write their tool call as text in one of the shapes of
`written_call` instead of calling it; `small-unknown` writes a call to `web_search`, a tool
never offered; `small-wrongname` calls `search_knowledge_base` first and the right tool once
told the tools' names; `small-think` puts `<think>…</think>` before what it says."""
CONFUSED_MODEL = ModelSpec(
    "small-confused:1b", ["completion", "tools"], behaviour="confused", parameter_size="1B"
)
"""A small model that picks a tool by the words its name and description share with the
question, whatever the tool does, and always passes the question as `query` (as small models
do among many tools); with one search tool a store it searches as a capable model does."""
ECHO_MODEL = ModelSpec(
    "small-echo:1b", ["completion", "tools"], behaviour="echo", parameter_size="1B"
)
"""A small model that writes its call as JSON text (as `small-json`) and answers by quoting
the top passage whole, as small models copy what they read (serve it with add_model)."""
CHAT_EMBEDDER = ModelSpec(
    "llama3.2:1b",
    ["completion", "tools"],
    behaviour="chat_embeddings",
    embedding_length=256,
    family="llama",
    parameter_size="1.2B",
)
"""A chat model that, asked for embeddings, gives near-constant vectors (serve with add_model)."""
WRONG_TOOL = "search_knowledge_base"
UNKNOWN_TOOL = "web_search"


def written_call(shape: str, name: str, args: dict[str, Any]) -> str:
    """Write a tool call as text, the way a small model's chat template taught it to."""
    call = {"name": name, "arguments": args}
    plain = json.dumps(call, ensure_ascii=False)
    if shape == "parameters":
        return json.dumps({"name": name, "parameters": args}, ensure_ascii=False)
    if shape == "tagged":
        return f"I will look that up.\n<tool_call>\n{plain}\n</tool_call>"
    if shape == "fenced":
        return f"Let me search the documents:\n```json\n{plain}\n```"
    if shape == "list":
        return json.dumps([call], ensure_ascii=False)
    if shape == "pythonic":
        written = ", ".join(f"{key}={json.dumps(value)}" for key, value in args.items())
        return f"[{name}({written})]"
    if shape == "mistral":
        return "[TOOL_CALLS]" + json.dumps([call], ensure_ascii=False)
    return plain


def full_name(name: str) -> str:
    """Add Ollama's implicit `:latest` tag to a model name without one."""
    return name if ":" in name.rsplit("/", 1)[-1] else f"{name}:latest"


def count_tokens(text: str) -> int:
    """Approximate a token count: Latin words and numbers plus CJK characters."""
    return len(_UNIT.findall(text))


def embed_text(text: str, dimensions: int, max_tokens: int | None = None) -> list[float]:
    """Embed text as a unit vector with the hashing trick, ignoring a nomic task prefix.

    The features are the text's units (words, numbers, single CJK characters) and the
    bigrams of adjacent CJK characters; each adds ±1 to one dimension."""
    text = _TASK_PREFIX.sub("", text, count=1).lower()
    features = _UNIT.findall(text)
    if max_tokens is not None and len(features) > max_tokens:
        features = features[:max_tokens]
        text = text[: list(_UNIT.finditer(text))[max_tokens - 1].end()]
    for run in _CJK_RUN.findall(text):
        features.extend(map(operator.add, run, run[1:]))
    # The sums are small whole numbers, so counting first gives exactly the same floats.
    buckets = _BUCKETS.setdefault(dimensions, {})
    if len(buckets) > _BUCKETS_KEPT:
        buckets.clear()
    sums: dict[int, float] = {}
    for feature, count in Counter(features).items():
        found = buckets.get(feature)
        if found is None:
            found = buckets[feature] = _bucket(feature, dimensions)
        index, sign = found
        sums[index] = sums.get(index, 0.0) + sign * count
    vector = [0.0] * dimensions
    norm = math.sqrt(sum(v * v for v in sums.values()))
    if norm == 0:
        vector[0] = 1.0
        return vector
    for index, value in sums.items():
        vector[index] = value / norm
    return vector


def chat_vector(text: str, dimensions: int) -> list[float]:
    """Embed text as a chat model does: nearly the same unit vector for every text, its small
    variation drawn from the whole text's hash, so similar texts are no closer than others."""
    seed = hashlib.blake2b(text.encode(), digest_size=8).digest()
    noise = random.Random(seed)
    vector = [1.0 + 0.02 * noise.uniform(-1, 1) for _ in range(dimensions)]
    norm = math.sqrt(sum(v * v for v in vector))
    return [v / norm for v in vector]


# Where each feature seen lands, by dimensions (a dict, not lru_cache: its call costs more
# than the lookup). The fake's CPU time is not part of the embedding cost it models.
_BUCKETS: dict[int, dict[str, tuple[int, float]]] = {}
_BUCKETS_KEPT = 1 << 18


def _bucket(feature: str, dimensions: int) -> tuple[int, float]:
    """Where a feature lands in the hashed vector, and with which sign."""
    h = int.from_bytes(hashlib.blake2b(feature.encode(), digest_size=8).digest(), "big")
    return (h >> 1) % dimensions, 1.0 if h & 1 else -1.0


def _content(message: dict[str, Any]) -> str:
    """Return a chat message's text content."""
    content = message.get("content")
    return content if isinstance(content, str) else ""


def _is_greeting(text: str) -> bool:
    """Tell whether a message is short small talk."""
    return bool(_GREETING.match(text)) and count_tokens(text) <= 5


def _words(text: str) -> set[str]:
    """Return the lowercase content words of a text, splitting on underscores."""
    return {word for word in _WORD.findall(text.lower()) if not _STOP_WORD.fullmatch(word)}


def _pick_tool(tools: list[dict[str, Any]], question: str) -> str:
    """Name the tool whose name or description shares the most words with the question."""
    asked = _words(question)

    def overlap(tool: dict[str, Any]) -> int:
        function = tool.get("function", {})
        name = str(function.get("name", "")).removeprefix("search_")
        return len(asked & _words(f"{name} {function.get('description', '')}"))

    return str(max(tools, key=overlap)["function"]["name"])


def _answer_from_results(text: str) -> str:
    """Answer with the first sentence of the lowest-numbered result and its citation."""
    results = [(int(n), body) for n, body in _RESULT.findall(text)]
    if not results:
        return NOT_FOUND_REPLY
    n, body = min(results, key=lambda result: result[0])
    passage = " ".join(html.unescape(body).split())
    match = _SENTENCE.match(passage)
    sentence = (match.group() if match else passage)[:300].strip()
    return f"{sentence} [{n}]"


def _quote_results(text: str) -> str:
    """Answer by quoting the lowest-numbered result whole, with its citation."""
    results = [(int(n), body) for n, body in _RESULT.findall(text)]
    if not results:
        return NOT_FOUND_REPLY
    n, body = min(results, key=lambda result: result[0])
    return f"The document says: {html.unescape(body).strip()} [{n}]"


def _answer_without_tools(messages: list[dict[str, Any]]) -> str:
    """Answer from the last message holding results, else greet back or admit ignorance."""
    for message in reversed(messages):
        if _RESULT.search(_content(message)):
            return _answer_from_results(_content(message))
    users = [message for message in messages if message.get("role") == "user"]
    if users and _is_greeting(_content(users[-1])):
        return GREETING_REPLY
    return UNKNOWN_REPLY


def chat_policy(spec: ModelSpec, messages: list[dict[str, Any]], tools: list[Any]) -> dict:
    """Decide the unscripted turn of a chat model: a tool call or an answer."""
    last = messages[-1]
    if spec.behaviour == "think":
        turn = chat_policy(ModelSpec(spec.name, spec.capabilities), messages, tools)
        asked = next((_content(m) for m in reversed(messages) if m.get("role") == "user"), "")
        thought = f"<think>The user asks: {asked}</think>\n"
        return {**turn, "content": thought + turn.get("content", "")}
    if spec.behaviour == "chat_embeddings":
        return chat_policy(ModelSpec(spec.name, spec.capabilities), messages, tools)
    if spec.behaviour == "echo":
        turn = chat_policy(ModelSpec(spec.name, spec.capabilities), messages, tools)
        if "tool_calls" in turn:
            [call] = turn["tool_calls"]
            return {"content": written_call("json", call["name"], call["arguments"])}
        if last.get("role") == "tool":
            return {"content": _quote_results(_content(last))}
        return turn
    if spec.behaviour == "confused" and tools:
        return _confused_turn(messages, tools)
    if spec.behaviour not in ("tools", "never_tools") and tools:
        turn = chat_policy(ModelSpec(spec.name, spec.capabilities), messages, tools)
        if spec.behaviour == "wrongname" and "tool_calls" in turn:
            told = last.get("role") == "tool" and "there is no tool" in _content(last)
            if not told:
                turn["tool_calls"][0]["name"] = WRONG_TOOL
            return turn
        if "tool_calls" in turn:
            [call] = turn["tool_calls"]
            name = UNKNOWN_TOOL if spec.behaviour == "unknown" else call["name"]
            return {"content": written_call(spec.behaviour, name, call["arguments"])}
        return turn
    if spec.behaviour == "tools" and tools:
        text = _content(last)
        if last.get("role") == "user" and _is_greeting(text):
            return {"content": GREETING_REPLY}
        if _offered(tools, "list_", "read_") and (turn := _document_turn(messages, tools)):
            return turn
        documents = _offered(tools, "list_", "read_")
        tools = [t for t in tools if t not in documents] or tools
        told = last.get("role") == "tool" and "there is no tool" in text
        if last.get("role") == "user" or told:
            if told:
                text = next(_content(m) for m in reversed(messages) if m.get("role") == "user")
            query = re.sub(r"[\s?!.？！。]+$", "", text).strip()
            return {
                "tool_calls": [{"name": _pick_tool(tools, text), "arguments": {"query": query}}]
            }
        if last.get("role") == "tool":
            return {"content": _answer_from_results(text)}
    return {"content": _answer_without_tools(messages)}


def _offered(tools: list[dict[str, Any]], *prefixes: str) -> list[dict[str, Any]]:
    """The offered tools whose names start with one of `prefixes`."""
    return [t for t in tools if str(t.get("function", {}).get("name", "")).startswith(prefixes)]


_QUOTED = re.compile(r"[\"'`“‘]([^\"'`”’]{2,80})[\"'`”’]")
_MENTION = re.compile(
    r"\b(?:how many|which|what|list)\b.*?\b(?:mention|mentions|contain|contains)\s+(.+?)[?.!]*$",
    re.IGNORECASE,
)
_SUMMARY = re.compile(r"\bsummari[sz]e\s+(?:the\s+)?(.+?)[?.!]*$", re.IGNORECASE)
_AROUND = re.compile(r"\[(\d+)\]")
_AROUND_WORDS = re.compile(r"\b(?:after|around|before|else|next|more)\b", re.IGNORECASE)
_LIST_ALL = re.compile(r"\b(?:list|which|what)\b.*\b(?:documents|sources|files)\b", re.I)
_READ_ON = re.compile(r"For the rest call (read_\w+)\(source=\"([^\"]+)\", lines=\"([^\"]+)\"\)")
_LIST_TOTAL = re.compile(r"^(\d[\d,]* sources? contains?[^\n]*?times? in all)", re.MULTILINE)


def _document_intent(question: str) -> tuple[str, dict[str, Any]] | None:
    """What a capable model does with a corpus question given list and read tools: the kind
    of tool (list or read) and its arguments; None for a question search answers."""
    if (around := _AROUND.search(question)) and _AROUND_WORDS.search(question):
        return "read_", {"around": int(around.group(1))}
    if mention := _MENTION.search(question):
        quoted = _QUOTED.search(question)
        term = quoted.group(1) if quoted else mention.group(1)
        return "list_", {"contains": term.strip(" \"'`")}
    if summary := _SUMMARY.search(question):
        return "read_", {"source": summary.group(1).strip()}
    if _LIST_ALL.search(question):
        return "list_", {}
    return None


def _document_turn(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict | None:
    """The turn of a capable model offered list and read tools: call them for corpus-level
    questions (which, how many, summarize, around [n]), read on while a reading says lines
    are left, and answer from what they showed; None where it searches as before."""
    last = messages[-1]
    start = max(i for i, m in enumerate(messages) if m.get("role") == "user")
    question = _content(messages[start])
    intent = _document_intent(question)
    if intent is None:
        return None
    kind, args = intent
    if "around" in args and last.get("role") == "user":
        # Nothing found yet to read around: search first, then read around what it found.
        query = _AROUND.sub("", question.split(",")[0]).strip(" ?.!")
        search = _offered(tools, "search_")
        return {"tool_calls": [{"name": _pick_tool(search, query), "arguments": {"query": query}}]}
    if "around" in args and "<search_results" in _content(last):
        read = _pick_tool(_offered(tools, "read_"), question)
        return {"tool_calls": [{"name": read, "arguments": args}]}
    told = last.get("role") == "tool" and "there is no tool" in _content(last)
    if last.get("role") == "user" or told:
        return {
            "tool_calls": [{"name": _pick_tool(_offered(tools, kind), question), "arguments": args}]
        }
    text = _content(last)
    if last.get("role") != "tool" or text.startswith("Error"):
        return None
    if more := _READ_ON.search(text):
        tool, source, lines = more.groups()
        return {"tool_calls": [{"name": tool, "arguments": {"source": source, "lines": lines}}]}
    replies = [_content(m) for m in messages[start:] if m.get("role") == "tool"]
    found = [(int(n), body) for reply in replies for n, body in _RESULT.findall(reply)]
    if not found:
        return {"content": NOT_FOUND_REPLY}
    if total := _LIST_TOTAL.search(text):
        named = ", ".join(
            f"{html.unescape(body).strip().split(' ', 1)[0]} [{n}]" for n, body in found
        )
        return {"content": f"{total.group(1)}: {named}."}
    sentences = []
    for n, body in found:
        passage = " ".join(html.unescape(body).split())
        match = _SENTENCE.match(passage)
        sentences.append(f"{(match.group() if match else passage)[:200].strip()} [{n}]")
    return {"content": " ".join(sentences)}


def _confused_turn(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict:
    """A small model among many tools: it picks the tool whose name and description share
    the most words with the question, whatever it does, and passes the question as `query`;
    told its call was wrong, it falls back to a search."""
    last = messages[-1]
    question = next(_content(m) for m in reversed(messages) if m.get("role") == "user")
    query = re.sub(r"[\s?!.？！。]+$", "", question).strip()
    if last.get("role") == "user":
        if _is_greeting(question):
            return {"content": GREETING_REPLY}
        return {"tool_calls": [{"name": _pick_any(tools, question), "arguments": {"query": query}}]}
    text = _content(last)
    if last.get("role") == "tool" and text.startswith("Error"):
        search = _offered(tools, "search_") or tools
        return {
            "tool_calls": [{"name": _pick_tool(search, question), "arguments": {"query": query}}]
        }
    return {"content": _answer_without_tools(messages)}


def _pick_any(tools: list[dict[str, Any]], question: str) -> str:
    """The tool whose whole name and description share the most words with the question."""
    asked = _words(question)

    def overlap(tool: dict[str, Any]) -> int:
        function = tool.get("function", {})
        return len(asked & _words(f"{function.get('name', '')} {function.get('description', '')}"))

    return str(max(tools, key=overlap)["function"]["name"])


def _paraphrased(text: str) -> str:
    """Replace known paraphrases with the documents' words."""
    text = text.lower()
    for phrase, plain in PARAPHRASES.items():
        text = re.sub(rf"\b{re.escape(phrase)}\b", plain, text)
    return text


def _stem(word: str) -> str:
    return word[:-1] if len(word) > 3 and word.endswith("s") else word


def _content_words(text: str) -> list[str]:
    """The content words of a text, stemmed crudely, in order, once each."""
    words = [_stem(w) for w in _WORD.findall(text.lower()) if not _STOP_WORD.fullmatch(w)]
    return list(dict.fromkeys(words))


def _relevant(passage: str, question: str) -> bool:
    """Tell whether a passage shares enough content words with a question (or its paraphrase)."""
    asked = set(_content_words(question)) | set(_content_words(_paraphrased(question)))
    shared = asked & set(_content_words(html.unescape(passage)))
    return len(shared) >= min(2, len(asked))


def _rewritten(question: str) -> str:
    """Rewrite a question as a search: its content words, paraphrases replaced."""
    return " ".join(_content_words(_paraphrased(question))) or question


def _resolve(schema: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/"):
        target: Any = root
        for part in ref[2:].split("/"):
            target = target.get(part, {})
        return _resolve(target, root)
    return schema


def written_question(passage: str) -> dict[str, str]:
    """Write a test question about a passage, as `eval generate` asks: one about the first
    sentence of its body (headings skipped), in its language, and a fragment copied from it."""
    body = " ".join(line for line in passage.splitlines() if not line.lstrip().startswith("#"))
    match = _SENTENCE.match(body.strip())
    sentence = (match.group() if match else body).strip()
    cjk = "".join(_CJK_RUN.findall(sentence))
    if len(cjk) > len(sentence) / 3:
        return {"question": f"关于{cjk[:6]}有什么规定？", "fragment": cjk[:4]}
    words = [
        w
        for w in _WORD.findall(sentence)
        if not _STOP_WORD.fullmatch(w.lower()) and w.lower() not in ("this", "that", "these")
    ]
    fragment = re.match(r"\W*((?:[^\W_]+\W+){2}[^\W_]+)", sentence)
    return {
        "question": f"What is true about {' '.join(words[:4]).lower()}?",
        "fragment": fragment.group(1) if fragment else sentence,
    }


def structured_policy(schema: dict[str, Any], messages: list[dict[str, Any]]) -> dict:
    """Answer a structured-output request with JSON that fits its schema (see the module doc)."""
    prompt = next((_content(m) for m in reversed(messages) if m.get("role") == "user"), "")
    passage = _PASSAGE.search(prompt)
    if passage and {"question", "fragment"} <= set(schema.get("properties", {})):
        return {"content": json.dumps(written_question(passage.group(1)), ensure_ascii=False)}
    questions = _QUESTION_LINE.findall(prompt)
    question = questions[-1].strip() if questions else prompt
    passages = [(int(n), body) for n, body in _RESULT.findall(prompt)]

    def value(node: dict[str, Any], name: str = "", passage: str | None = None) -> Any:
        node = _resolve(node, schema)
        kind = node.get("type")
        if kind == "object" or "properties" in node:
            properties = node.get("properties", {})
            return {key: value(sub, key, passage) for key, sub in properties.items()}
        if kind == "array":
            items = _resolve(node.get("items", {}), schema)
            if items.get("properties", {}).get("n", {}).get("type") == "integer":
                return [
                    {
                        key: n if key == "n" else value(sub, key, body)
                        for key, sub in items["properties"].items()
                    }
                    for n, body in passages
                ]
            if items.get("type") == "string":
                return [_rewritten(question)]
            return []
        if kind == "boolean":
            return passage is not None and _relevant(passage, question)
        if kind in ("integer", "number"):
            return 0
        if kind == "string":
            return _rewritten(question) if name == "query" else ""
        return None

    return {"content": json.dumps(value(schema), ensure_ascii=False)}


_JUDGED_QUERY = re.compile(r"^Query:\s*(.+)$", re.MULTILINE)
_FILLER_TOKENS = (".", ",", " the", " and", "\n")


def is_judgement(messages: list[dict[str, Any]]) -> tuple[str, str] | None:
    """Return (query, passage) when the last user message asks for a relevance judgement: a
    `Query:` line and a `<passage>` block (the passage's text unescaped)."""
    prompt = next((_content(m) for m in reversed(messages) if m.get("role") == "user"), "")
    query, passage = _JUDGED_QUERY.search(prompt), _PASSAGE.search(prompt)
    if query is None or passage is None:
        return None
    return query.group(1).strip(), html.unescape(passage.group(1))


def relevance(query: str, passage: str) -> float:
    """The fake's P("yes") that a passage is relevant to a query: 0.05 plus 0.9 times the
    share of the query's content words (or their paraphrases' words) the passage holds."""
    asked = set(_content_words(query)) | set(_content_words(_paraphrased(query)))
    if not asked:
        return 0.05
    held = set(_content_words(passage)) | set(_content_words(_paraphrased(passage)))
    return 0.05 + 0.9 * len(asked & held) / len(asked)


def _token_logprob(token: str, logprob: float) -> dict[str, Any]:
    return {"token": token, "logprob": logprob, "bytes": list(token.encode())}


def judgement_logprobs(p_yes: float, top: int) -> tuple[str, list[dict[str, Any]]]:
    """The one-token answer to a relevance judgement and its logprobs entry: "yes" or "no",
    whichever is likelier, with both (and "Yes", "No") among the top alternatives: read over
    the top five, "yes" against "no" is exactly `p_yes`."""
    p_yes = min(max(p_yes, 1e-6), 1 - 1e-6)
    options = sorted(
        [
            ("yes", 0.97 * p_yes),
            ("no", 0.97 * (1 - p_yes)),
            ("Yes", 0.02 * p_yes),
            ("No", 0.02 * (1 - p_yes)),
            ("**", 0.01),
        ],
        key=lambda option: -option[1],
    )
    token, p = options[0]
    entry = _token_logprob(token, math.log(p))
    entry["top_logprobs"] = [_token_logprob(t, math.log(q)) for t, q in options[:top]]
    return token, [entry]


def token_logprobs(piece: str, top: int) -> list[dict[str, Any]]:
    """A logprobs entry for one streamed piece of an ordinary answer: the piece, nearly sure."""
    entry = _token_logprob(piece, -0.01)
    alternatives = [_token_logprob(piece, -0.01)]
    alternatives += [_token_logprob(t, -5.0 - n) for n, t in enumerate(_FILLER_TOKENS)]
    entry["top_logprobs"] = alternatives[:top]
    return [entry]


def sends_logprobs(version: str, spec: ModelSpec, body: dict[str, Any]) -> bool:
    """Whether an answer carries logprobs: asked for, a recent enough server, a model that has
    them."""
    return (
        bool(body.get("logprobs"))
        and spec.logprobs
        and _release(version) >= _release(LOGPROBS_VERSION)
    )


def _release(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version)[:3])


def top_logprobs_error(body: dict[str, Any]) -> str | None:
    """What Ollama answers (400) to a `top_logprobs` outside 0–20, else None."""
    top = body.get("top_logprobs")
    if top is None or (isinstance(top, int) and 0 <= top <= MAX_TOP_LOGPROBS):
        return None
    return f"top_logprobs must be between 0 and {MAX_TOP_LOGPROBS}"


def show_body(spec: ModelSpec, name: str) -> dict[str, Any]:
    """What /api/show answers for a served model (asked for by `name`)."""
    tools = "{{ if .Tools }}{{ .Tools }}{{ end }}" if "tools" in spec.capabilities else ""
    return {
        "license": "",
        "modelfile": f'# Modelfile generated by "ollama show"\nFROM {full_name(name)}\n',
        "parameters": f"num_ctx {spec.context_length}",
        "template": tools + "{{ .Prompt }}",
        "details": _details(spec),
        "model_info": {
            "general.architecture": spec.family,
            f"{spec.family}.context_length": spec.context_length,
            f"{spec.family}.embedding_length": spec.embedding_length,
        },
        "capabilities": list(spec.capabilities),
        "modified_at": MODIFIED_AT,
    }


def _guess_spec(name: str) -> ModelSpec:
    """Guess a pulled model's spec from its name."""
    if "embed" in name.lower() or "minilm" in name.lower():
        dimensions = 384 if "minilm" in name.lower() else 768
        return ModelSpec(name, ["embedding"], embedding_length=dimensions, family="bert")
    return ModelSpec(name, ["completion", "tools"])


def _size_bytes(spec: ModelSpec) -> int:
    """Estimate a 4-bit quantised model's size from its parameter count."""
    match = re.match(r"([\d.]+)([MB])", spec.parameter_size)
    params = float(match.group(1)) * (1e9 if match.group(2) == "B" else 1e6) if match else 1e9
    return int(params * 0.6)


def _now() -> str:
    """Return the current time in Ollama's created_at format."""
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


class ServedModels:
    """The models a fake serves, by full name, behind the fake's lock (HTTP and in-process)."""

    _lock: threading.Lock
    _models: dict[str, ModelSpec]

    def add_model(self, spec: ModelSpec) -> None:
        """Serve a model (replacing one of the same name)."""
        with self._lock:
            self._models[full_name(spec.name)] = spec

    def remove_model(self, name: str) -> None:
        """Stop serving a model, as if it were deleted."""
        with self._lock:
            self._models.pop(full_name(name), None)

    def model(self, name: str) -> ModelSpec | None:
        """Return the spec served under a name, if any."""
        with self._lock:
            return self._models.get(full_name(name))


class FakeOllama(ServedModels):
    """An Ollama server double on a loopback port, recording every request."""

    def __init__(
        self,
        models: list[ModelSpec] | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        token_delay: float = 0.0,
        embed_delay: float = 0.0,
        embed_delay_per_text: float = 0.0,
        embed_concurrency: int | None = None,
        embed_delay_per_char: float = 0.0,
        version: str = VERSION,
        drip_interval: float = 0.05,
    ) -> None:
        self.host, self.port = host, port
        self.version = version
        """What /api/version answers; before LOGPROBS_VERSION, logprobs are ignored."""
        self.scorer: Callable[[str, str], float] = relevance
        self.peak_chat_concurrency = 0
        self._chats_in_flight = 0
        self.drip_interval = drip_interval
        """Seconds between two bytes of an answer with the `drip` fault."""
        self.token_delay = token_delay
        self.embed_delay = embed_delay
        self.embed_delay_per_text = embed_delay_per_text
        # A real model's work grows with the text it reads, not only with the inputs.
        self.embed_delay_per_char = embed_delay_per_char
        self.url = ""
        self.requests: list[dict[str, Any]] = []
        self._raw_bodies: list[tuple[str, bytes]] = []
        self.peak_embed_concurrency = 0
        self._lock = threading.Lock()
        self._models: dict[str, ModelSpec] = {}
        self._scripts: dict[str, deque[dict]] = {}
        self._failures: dict[str, deque[tuple[int | str, str] | None]] = {}
        self._faults: dict[str, str] = {}
        self._credentials: str | None = None
        self._embed_slots = (
            threading.BoundedSemaphore(embed_concurrency) if embed_concurrency else None
        )
        self._embeds_in_flight = 0
        self._refused_inputs: list[str] = []
        self._stopped = threading.Event()
        self._opened = threading.Event()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        for spec in DEFAULT_MODELS if models is None else models:
            self.add_model(spec)

    def start(self) -> FakeOllama:
        """Serve in a daemon thread; after stop(), serve again on the same port."""
        if self._server is None:
            self._stopped.clear()
            self._server = _Server((self.host, self.port), self)
            self.port = self._server.server_address[1]
            self.url = f"http://{self.host}:{self.port}"
            self._thread = threading.Thread(
                target=self._server.serve_forever, args=(0.05,), name="fake-ollama", daemon=True
            )
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving, cutting short any stream in progress."""
        if self._server is not None and self._thread is not None:
            self._stopped.set()
            self._server.shutdown()
            self._server.server_close()
            self._thread.join()
            self._server = self._thread = None

    def __enter__(self) -> FakeOllama:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def requests_to(self, path: str) -> list[Any]:
        """Return the bodies of the recorded requests to a path."""
        with self._lock:
            return [request["body"] for request in self.requests if request["path"] == path]

    def agents_to(self, path: str) -> list[str]:
        """Return the User-Agent of each recorded request to a path ("" when none was sent:
        Archivist's own light client sends none, the ollama client names itself)."""
        with self._lock:
            return [r["agent"] for r in self.requests if r["path"] == path]

    def request_times(self, path: str | None = None) -> list[float]:
        """Return when each recorded request (to a path, or any) arrived, as time.time()."""
        with self._lock:
            return [r["time"] for r in self.requests if path is None or r["path"] == path]

    def clear_requests(self) -> None:
        """Forget the recorded requests."""
        with self._lock:
            self.requests.clear()
            self._raw_bodies.clear()

    def script(self, model: str, *turns: dict) -> None:
        """Queue chat turns for a model, each used by one /api/chat call before the policy.

        A turn is `{"content": …}`, `{"tool_calls": [{"name", "arguments"}]}`, `{"error": …,
        "status": …}`, `{"mid_stream_error": …}` or `{"thinking": …}` with content; with
        `"hold_after": N` its stream stops after N pieces until `open_gate()` (or stop()), so
        a test can act mid-answer however slow the machine is."""
        if any("hold_after" in turn for turn in turns):
            self._opened.clear()  # a newly held turn waits for a new open_gate()
        with self._lock:
            self._scripts.setdefault(full_name(model), deque()).extend(turns)

    def score_with(self, scorer: Callable[[str, str], float]) -> None:
        """Answer relevance judgements with P("yes") = scorer(query, passage)."""
        self.scorer = scorer

    def open_gate(self) -> None:
        """Let every stream held at a turn's `hold_after` go on (see script)."""
        self._opened.set()

    def _held(self) -> bool:
        """Wait at a turn's gate until the test opens it; return True if the server stopped."""
        while not self._opened.wait(0.05):
            if self._stopped.is_set():
                return True
        return False

    def fail(self, path: str, status: int, error: str, times: int = 1, after: int = 0) -> None:
        """Answer `times` requests to a path with an HTTP error, once `after` more were
        answered as usual (a client that runs requests ahead fails at a known one)."""
        with self._lock:
            queue = self._failures.setdefault(path, deque())
            queue.extend([None] * after + [(status, error)] * times)

    FAULTS = ("drip", "not_json", "empty", "nan", "reset")

    def misbehave(self, path: str, fault: str, times: int | None = None, after: int = 0) -> None:
        """Answer requests to a path as a broken server or proxy does, every one (`times`
        None) or `times` of them once `after` more were answered as usual. The faults:
        `drip` sends the real answer, status line and headers included, one byte every
        `drip_interval` seconds; `not_json` a 200 HTML page; `empty` a 200 with no body;
        `nan` the real answer with NaN numbers in it (a vector's first value, a chat's
        durations); `reset` reads the request and resets the connection."""
        if fault not in self.FAULTS:
            raise ValueError(f"unknown fault {fault!r}")
        with self._lock:
            if times is None:
                self._faults[path] = fault
            else:
                queue = self._failures.setdefault(path, deque())
                queue.extend([None] * after + [(fault, "")] * times)

    def behave(self) -> None:
        """Stop every fault set with `misbehave` (queued ones and HTTP errors too)."""
        with self._lock:
            self._faults.clear()
            self._failures.clear()

    def require_auth(self, user: str, password: str) -> None:
        """Answer 401 to every request without this user and password (HTTP Basic), as
        an authenticating proxy in front of Ollama does."""
        pair = base64.b64encode(f"{user}:{password}".encode()).decode()
        with self._lock:
            self._credentials = f"Basic {pair}"

    def refuse_inputs_containing(self, fragment: str) -> None:
        """Refuse (400) every /api/embed request with an input containing `fragment`, as
        Ollama refuses one input it cannot embed: the whole request fails."""
        with self._lock:
            self._refused_inputs.append(fragment)

    def stop_after(self, path: str, requests: int) -> None:
        """Die as a killed Ollama does once `requests` more requests to a path were answered:
        the next one gets no answer, and the server stops."""
        self.fail(path, 0, "", after=requests)

    def models(self) -> list[tuple[str, ModelSpec]]:
        """Return the served models with their full names."""
        with self._lock:
            return list(self._models.items())

    def raw_requests_to(self, path: str) -> list[bytes]:
        """Return the bytes of the recorded request bodies to a path, as sent on the wire."""
        with self._lock:
            return [raw for recorded, raw in self._raw_bodies if recorded == path]

    def _record(
        self,
        method: str,
        path: str,
        body: Any,
        raw: bytes = b"",
        authorization: str = "",
        agent: str = "",
    ) -> None:
        with self._lock:
            self.requests.append(
                {
                    "method": method,
                    "path": path,
                    "body": body,
                    "time": time.time(),
                    "authorization": authorization,
                    "agent": agent,
                }
            )
            self._raw_bodies.append((path, raw))

    def _next_failure(self, path: str) -> tuple[int | str, str] | None:
        with self._lock:
            queue = self._failures.get(path)
            if queue:
                return queue.popleft()
            fault = self._faults.get(path)
            return (fault, "") if fault else None

    def _authorized(self, header: str) -> bool:
        with self._lock:
            return self._credentials is None or header == self._credentials

    def _next_turn(self, model: str) -> dict | None:
        with self._lock:
            queue = self._scripts.get(full_name(model))
            return queue.popleft() if queue else None

    @contextmanager
    def _chat_slot(self) -> Iterator[None]:
        """Count a chat request in flight, tracking the peak."""
        with self._lock:
            self._chats_in_flight += 1
            self.peak_chat_concurrency = max(self.peak_chat_concurrency, self._chats_in_flight)
        try:
            yield
        finally:
            with self._lock:
                self._chats_in_flight -= 1

    @contextmanager
    def _embed_slot(self) -> Iterator[None]:
        """Hold one of the embed_concurrency slots, tracking the peak in use."""
        with self._embed_slots or nullcontext():
            with self._lock:
                self._embeds_in_flight += 1
                self.peak_embed_concurrency = max(
                    self.peak_embed_concurrency, self._embeds_in_flight
                )
            try:
                yield
            finally:
                with self._lock:
                    self._embeds_in_flight -= 1


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    request_queue_size = 128  # bursts of parallel embed requests must not overflow the backlog

    def __init__(self, address: tuple[str, int], fake: FakeOllama) -> None:
        super().__init__(address, _Handler)
        self.fake = fake


class _Drip:
    """A connection's writer that sends one byte every `interval` seconds."""

    def __init__(self, inner: Any, interval: float, stopped: threading.Event) -> None:
        self.inner, self.interval, self.stopped = inner, interval, stopped

    def write(self, data: bytes) -> int:
        for at in range(len(data)):
            if self.stopped.wait(self.interval):
                raise BrokenPipeError("the fake stopped")
            self.inner.write(data[at : at + 1])
            self.inner.flush()
        return len(data)

    def flush(self) -> None:
        self.inner.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    _fault = ""

    def log_message(self, format: str, *args: Any) -> None:
        """Keep test output quiet."""

    def do_GET(self) -> None:
        self._dispatch()

    def do_POST(self) -> None:
        self._dispatch()

    def _dispatch(self) -> None:
        """Record the request, then answer an injected failure or route it."""
        fake = self.server.fake
        path = self.path.split("?", 1)[0]
        raw = self._read_raw()
        body = self._parse(raw)
        authorization = self.headers.get("Authorization") or ""
        agent = self.headers.get("User-Agent") or ""
        fake._record(self.command, path, body, raw, authorization, agent)
        self._fault = ""
        try:
            if fake._stopped.is_set():
                self.close_connection = True  # a kept-alive connection to a stopped server
            elif not fake._authorized(authorization):
                self._send_json(401, {"error": "unauthorized"})
            elif failure := fake._next_failure(path):
                self._fail(*failure, path, body)
            else:
                self._route(path, body)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _route(self, path: str, body: Any) -> None:
        if (route := _ROUTES.get((self.command, path))) is None:
            self._send(404, b"404 page not found", "text/plain")
        elif self.command == "POST" and not isinstance(body, dict):
            self._send_json(400, {"error": "invalid request body"})
        else:
            route(self, body)

    def _fail(self, status: int | str, error: str, path: str, body: Any) -> None:
        """Answer with an injected HTTP error or fault (see FakeOllama.fail and misbehave)."""
        fake = self.server.fake
        if status == 0:  # stop_after: no answer, and the server goes away
            self.close_connection = True
            fake.stop()
        elif status == "reset":
            # Linger 0: closing sends a reset (RST), not an orderly end (FIN).
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.rfile.close()
            self.connection.close()
            self.close_connection = True
        elif status == "not_json":
            page = b"<html><body><h1>502 Bad Gateway</h1></body></html>"
            self._send(200, page, "text/html")
        elif status == "empty":
            self._send(200, b"", "application/json; charset=utf-8")
        elif status == "drip":
            self.wfile = _Drip(self.wfile, fake.drip_interval, fake._stopped)
            self.close_connection = True
            self._route(path, body)
        elif status == "nan":
            self._fault = "nan"
            self._route(path, body)
        else:
            self._send_json(int(status), {"error": error})

    def _read_raw(self) -> bytes:
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    @staticmethod
    def _parse(raw: bytes) -> Any:
        try:
            return json.loads(raw) if raw else None
        except ValueError:
            return None

    def _send(self, status: int, payload: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def _send_json(self, status: int, obj: Any) -> None:
        # Compact, as Ollama (Go) writes it; orjson keeps the fake's CPU out of the timings.
        # (The `nan` fault needs the standard library, which writes NaN as Go never does.)
        payload = json.dumps(obj).encode() if self._fault == "nan" else orjson.dumps(obj)
        self._send(status, payload, "application/json; charset=utf-8")

    def _stream(self, lines: Iterable[dict]) -> None:
        """Send NDJSON lines, flushing each one."""
        self.send_response(200)
        self.send_header("Content-Type", "application/x-ndjson")
        self.end_headers()
        for line in lines:
            self.wfile.write(json.dumps(line).encode() + b"\n")
            self.wfile.flush()

    def _root(self, _: Any) -> None:
        self._send(200, b"Ollama is running", "text/plain; charset=utf-8")

    def _version(self, _: Any) -> None:
        self._send_json(200, {"version": self.server.fake.version})

    def _tags(self, _: Any) -> None:
        models = [
            {
                "name": name,
                "model": name,
                "modified_at": MODIFIED_AT,
                "size": _size_bytes(spec),
                "digest": hashlib.sha256(name.encode()).hexdigest(),
                "details": _details(spec),
            }
            for name, spec in self.server.fake.models()
        ]
        self._send_json(200, {"models": models})

    def _show(self, body: dict) -> None:
        name = str(body.get("model") or body.get("name") or "")
        spec = self.server.fake.model(name)
        if spec is None:
            return self._send_json(404, {"error": f"model '{name}' not found"})
        self._send_json(200, show_body(spec, name))

    def _embed(self, body: dict) -> None:
        fake, started = self.server.fake, time.perf_counter_ns()
        name = str(body.get("model") or "")
        spec = fake.model(name)
        if spec is None:
            error = f'model "{name}" not found, try pulling it first'
            return self._send_json(404, {"error": error})
        as_chat = spec.behaviour == "chat_embeddings"
        if "embedding" not in spec.capabilities and not as_chat:
            return self._send_json(400, {"error": f'"{name}" does not support embeddings'})
        raw = body.get("input")
        texts = [raw] if isinstance(raw, str) else [str(text) for text in raw or []]
        tokens = [count_tokens(text) for text in texts]  # once: the fake's CPU is no model's cost
        if body.get("truncate") is False and any(n > spec.context_length for n in tokens):
            error = "the input length exceeds the context length"
            return self._send_json(400, {"error": error})
        with fake._lock:
            refused = any(f in text for f in fake._refused_inputs for text in texts)
        if refused:
            return self._send_json(400, {"error": "failed to process inputs"})
        # The vectors are worked out before a slot is taken: the slot's time is the cost
        # model's alone (a real model's work), not the fake's own Python.
        length = spec.served_length or spec.embedding_length
        vectors = [
            chat_vector(t, length) if as_chat else embed_text(t, length, spec.context_length)
            for t in texts
        ]
        if self._fault == "nan" and vectors:
            vectors[0][0] = math.nan
        with fake._embed_slot():
            time.sleep(
                fake.embed_delay
                + fake.embed_delay_per_text * len(texts)
                + fake.embed_delay_per_char * sum(map(len, texts))
            )
        self._send_json(
            200,
            {
                "model": name,
                "embeddings": vectors,
                "total_duration": time.perf_counter_ns() - started,
                "load_duration": 250_000,
                "prompt_eval_count": sum(min(n, spec.context_length) for n in tokens),
            },
        )

    def _chat(self, body: dict) -> None:
        with self.server.fake._chat_slot():
            self._answer_chat(body)

    def _answer_chat(self, body: dict) -> None:
        fake, started = self.server.fake, time.perf_counter_ns()
        name = str(body.get("model") or "")
        spec = fake.model(name)
        tools = body.get("tools") or []
        if spec is None:
            return self._send_json(404, {"error": f"model '{name}' not found"})
        if "completion" not in spec.capabilities:
            return self._send_json(400, {"error": f'"{name}" does not support chat'})
        if tools and "tools" not in spec.capabilities:
            error = f"registry.ollama.ai/library/{name.split(':')[0]} does not support tools"
            return self._send_json(400, {"error": error})
        if body.get("think") and "thinking" not in spec.capabilities:
            return self._send_json(400, {"error": f'"{name}" does not support thinking'})
        if error := top_logprobs_error(body):
            return self._send_json(400, {"error": error})
        head = {"model": name, "created_at": _now()}
        messages = body.get("messages") or []
        if not messages:
            reply = {**head, "message": {"role": "assistant", "content": ""}}
            return self._send_json(200, {**reply, "done_reason": "load", "done": True})
        turn = fake._next_turn(name)
        if turn is None and isinstance(body.get("format"), dict):
            turn = structured_policy(body["format"], messages)
        with_logprobs = sends_logprobs(fake.version, spec, body)
        top = int(body.get("top_logprobs") or 0)
        judged = None if turn is not None or tools else is_judgement(messages)
        if judged is not None:
            answer, judgement = judgement_logprobs(fake.scorer(*judged), top)
            turn = {"content": answer}
        turn = turn or chat_policy(spec, messages, tools)
        if "error" in turn:
            return self._send_json(int(turn.get("status", 500)), {"error": turn["error"]})
        broken = "mid_stream_error" in turn
        pieces = _STREAM_PIECE.findall(turn.get("content", "Let me check" if broken else ""))
        limit = (body.get("options") or {}).get("num_predict")
        stopped = "stop"
        if isinstance(limit, int) and 0 < limit < len(pieces):
            pieces, stopped = pieces[:limit], "length"

        def logprobs(index: int) -> dict[str, Any]:
            if not with_logprobs:
                return {}
            if judged is not None and index == 0:
                return {"logprobs": judgement}
            return {"logprobs": token_logprobs(pieces[index], top)}

        thoughts: list[str] = []
        if body.get("think") and "thinking" in spec.capabilities:
            asked = next((_content(m) for m in reversed(messages) if m.get("role") == "user"), "")
            thoughts = _STREAM_PIECE.findall(turn.get("thinking", f"The user asks: {asked}"))
        calls = [
            {"function": {"name": call["name"], "arguments": call.get("arguments", {})}}
            for call in turn.get("tool_calls", [])
        ]
        prompt_tokens = sum(count_tokens(_content(message)) + 4 for message in messages)

        def done() -> dict:
            elapsed = time.perf_counter_ns() - started
            prompt_ns = 20_000 * prompt_tokens
            eval_count = len(thoughts) + len(pieces) + len(calls)
            return {
                "done": True,
                "done_reason": stopped,
                "total_duration": math.nan
                if self._fault == "nan"
                else 250_000 + prompt_ns + elapsed,
                "load_duration": 250_000,
                "prompt_eval_count": prompt_tokens,
                "prompt_eval_duration": prompt_ns,
                "eval_count": eval_count,
                "eval_duration": elapsed,
            }

        if not body.get("stream", True):
            if broken:
                return self._send_json(500, {"error": turn["mid_stream_error"]})
            # A model takes its time per token whether or not the answer is streamed.
            if fake._stopped.wait(fake.token_delay * (len(thoughts) + len(pieces))):
                return None
            message: dict[str, Any] = {"role": "assistant", "content": "".join(pieces)}
            if thoughts:
                message["thinking"] = "".join(thoughts)
            if calls:
                message["tool_calls"] = calls
            answer = {**head, "message": message, **done()}
            if with_logprobs:
                answer["logprobs"] = [
                    e for i in range(len(pieces)) for e in logprobs(i)["logprobs"]
                ]
            return self._send_json(200, answer)

        def lines() -> Iterator[dict]:
            for piece in thoughts:
                if fake._stopped.wait(fake.token_delay):
                    return
                message = {"role": "assistant", "content": "", "thinking": piece}
                yield {**head, "message": message, "done": False}
            for index, piece in enumerate(pieces):
                if index == turn.get("hold_after") and fake._held():
                    return
                if fake._stopped.wait(fake.token_delay):
                    return
                message = {"role": "assistant", "content": piece}
                yield {**head, "message": message, "done": False, **logprobs(index)}
            if broken:
                yield {"error": turn["mid_stream_error"]}
                return
            if calls:
                message = {"role": "assistant", "content": "", "tool_calls": calls}
                yield {**head, "message": message, "done": False}
            yield {**head, "message": {"role": "assistant", "content": ""}, **done()}

        self._stream(lines())

    def _pull(self, body: dict) -> None:
        fake = self.server.fake
        name = full_name(str(body.get("model") or body.get("name") or ""))
        spec = fake.model(name)
        if spec is None:
            spec = _guess_spec(name)
            fake.add_model(spec)
        if not body.get("stream", True):
            return self._send_json(200, {"status": "success"})
        digest = "sha256:" + hashlib.sha256(name.encode()).hexdigest()
        total = _size_bytes(spec)
        layer = {"status": f"pulling {digest[7:19]}", "digest": digest, "total": total}
        self._stream(
            [
                {"status": "pulling manifest"},
                *({**layer, "completed": part * total // 2} for part in range(3)),
                {"status": "verifying sha256 digest"},
                {"status": "writing manifest"},
                {"status": "success"},
            ]
        )


def _details(spec: ModelSpec) -> dict[str, Any]:
    """Return a model's `details` object as /api/tags and /api/show give it."""
    return {
        "parent_model": "",
        "format": "gguf",
        "family": spec.family,
        "families": [spec.family],
        "parameter_size": spec.parameter_size,
        "quantization_level": "F16" if "embedding" in spec.capabilities else "Q4_K_M",
    }


_ROUTES: dict[tuple[str, str], Callable[[_Handler, Any], None]] = {
    ("GET", "/"): _Handler._root,
    ("GET", "/api/version"): _Handler._version,
    ("GET", "/api/tags"): _Handler._tags,
    ("POST", "/api/show"): _Handler._show,
    ("POST", "/api/embed"): _Handler._embed,
    ("POST", "/api/chat"): _Handler._chat,
    ("POST", "/api/pull"): _Handler._pull,
}


def main(argv: list[str] | None = None) -> int:
    """Serve a fake Ollama until SIGTERM or SIGINT, announcing its URL on stdout."""
    parser = argparse.ArgumentParser(description="Serve a fake Ollama for tests.")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--token-delay", type=float, default=0.0)
    parser.add_argument("--embed-delay", type=float, default=0.0)
    parser.add_argument("--embed-delay-per-text", type=float, default=0.0)
    parser.add_argument("--embed-concurrency", type=int, default=None)
    parser.add_argument("--models", help="JSON file: a list of ModelSpec field objects")
    parser.add_argument("--ollama-version", default=VERSION, help="What /api/version answers.")
    args = parser.parse_args(argv)
    models = None
    if args.models:
        with open(args.models, encoding="utf-8") as file:
            models = [ModelSpec(**fields) for fields in json.load(file)]
    stopping = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stopping.set())
    fake = FakeOllama(
        models,
        port=args.port,
        token_delay=args.token_delay,
        embed_delay=args.embed_delay,
        embed_delay_per_text=args.embed_delay_per_text,
        embed_concurrency=args.embed_concurrency,
        version=args.ollama_version,
    )
    with fake:
        print(f"FAKE_OLLAMA_URL={fake.url}", flush=True)
        while not stopping.wait(0.1):
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
