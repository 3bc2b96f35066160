"""Tool calls a model wrote as text, and thinking it wrote into its answer.

Small models often answer a request that offers tools with the call written out as text instead
of a structured tool call. The shapes recognised here are those their chat templates teach:

* a JSON object with `name` and `arguments` (Hermes, Qwen) or `parameters` (Llama 3), also
  nested as `{"function": {...}}` or listed under `tool_calls`, alone or in a list;
* the same inside `<tool_call>…</tool_call>` tags, after `<|python_tag|>`, or in a fenced code
  block, with words around it or not;
* Mistral's `[TOOL_CALLS]` prefix, before a JSON list or as `name[ARGS]{...}`;
* `<function=name>{...}</function>`;
* the pythonic list `[search_x(query="…", source='a.md')]`.

A call is run only when it names an offered tool (exactly, or the one tool whose name holds a
plain near-miss such as `search` or `read`) and its arguments fit the tool's schema; any other
call-shaped text is reported and never shown as an answer. A call is recovered only from what
the model wrote itself: one that a tool result of the turn holds too (a document's text, which
the model may quote in its answer) is never run, however it is written. All but `settle` are pure
functions of text.
"""

import ast
import html
import json
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

from archivist.agent.context import turn_start

Schema = Mapping[str, Any]
"""A tool's parameters as a JSON schema (an object with `properties` and `required`)."""

_THINK = re.compile(r"^\s*<(think|thinking|reasoning)>(.*?)(?:</\1>|$)", re.DOTALL)
_THINK_END = re.compile(r"</(?:think|thinking|reasoning)>")
_TAGGED = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.DOTALL)
_FUNCTION_TAG = re.compile(r"<function=([\w.-]+)>(.*?)(?:</function>|$)", re.DOTALL)
_FENCE = re.compile(r"```[\w-]*[ \t]*\n?(.*?)(?:```|$)", re.DOTALL)
_PYTHON_TAG = "<|python_tag|>"
_MISTRAL = "[TOOL_CALLS]"
_MISTRAL_ARGS = re.compile(r"\s*([\w.-]+)\s*\[ARGS\]")
_PYTHONIC_START = re.compile(r"\[\s*[A-Za-z_][\w.]*\s*\(")
_ARG_KEYS = ("arguments", "parameters", "args")
_WORDS = re.compile(r"[a-z0-9]+")
_JSON = json.JSONDecoder()


@dataclass(frozen=True)
class TextCall:
    """One tool call found in a model's text, and what became of it."""

    name: str
    """The name as the model wrote it."""
    args: dict[str, Any]
    tool: str | None = None
    """The offered tool it runs as; None when it cannot be run."""
    problem: str | None = None
    """Why it cannot be run (no such tool, arguments that do not fit)."""

    def record(self) -> dict[str, Any]:
        """Describe the call for a turn's record."""
        described = {"name": self.name, "args": self.args, "recovered": self.problem is None}
        if self.tool and self.tool != self.name:
            described["tool"] = self.tool
        if self.problem:
            described["error"] = self.problem
        return described


@dataclass(frozen=True)
class Reading:
    """A model's text taken apart: its thinking, the answer left, the calls it wrote."""

    answer: str
    thinking: str
    calls: tuple[TextCall, ...]


def split_thinking(text: str) -> tuple[str, str]:
    """Separate leading `<think>…</think>` text from the answer; return (thinking, answer).

    A closing tag with no opening one (a template that opened it for the model) ends the
    thinking too.
    """
    match = _THINK.match(text)
    if match:
        return match.group(2).strip(), text[match.end() :].lstrip()
    end = _THINK_END.search(text)
    if end:
        return text[: end.start()].strip(), text[end.end() :].lstrip()
    return "", text


QUOTED = "it repeats a call written in a search result (a document's text), not one the model made"


def read_text(text: str, tools: Mapping[str, Schema], quoted: Sequence[str] = ()) -> Reading:
    """Find the thinking and the tool calls written in `text`, resolved against `tools`; a
    call that one of the `quoted` texts (the turn's tool results) holds too is not run."""
    thinking, rest = split_thinking(text)
    found, spans = find_calls(rest)
    answer = rest
    for start, end in reversed(spans):
        answer = answer[:start] + answer[end:]
    answer = re.sub(r"\n{3,}", "\n\n", answer).strip() if spans else answer
    seen = quoted_calls(quoted) if found else set()
    calls = tuple(
        TextCall(name, args if isinstance(args, dict) else {}, None, QUOTED)
        if _call_key(name, args) in seen
        else resolve(name, args, tools)
        for name, args in found
    )
    return Reading(answer, thinking, calls)


def quoted_calls(texts: Sequence[str]) -> set[str]:
    """The calls written in `texts` (tool results, escaped as the model reads them), as keys
    that compare a call's name and arguments whatever its shape or spacing."""
    return {
        _call_key(name, args)
        for text in texts
        if "{" in text or "[" in text
        for name, args in find_calls(html.unescape(text))[0]
    }


def _call_key(name: str, args: Any) -> str:
    plain = name.removeprefix("functions.").strip().casefold()
    return json.dumps([plain, args], sort_keys=True, ensure_ascii=False, default=repr)


def find_calls(text: str) -> tuple[list[tuple[str, Any]], list[tuple[int, int]]]:
    """Return the call-shaped pieces of `text` as (name, raw arguments), in the order written,
    and the spans of text they take."""
    pieces: list[tuple[int, int, list[tuple[str, Any]]]] = []

    def spans() -> list[tuple[int, int]]:
        return [(start, end) for start, end, _ in pieces]

    for pattern in (_TAGGED, _FUNCTION_TAG, _FENCE):
        for match in pattern.finditer(text):
            if _overlaps(match.span(), spans()):
                continue
            if pattern is _FUNCTION_TAG:
                args = _json_at(match.group(2).strip())
                found = [(match.group(1), args)] if isinstance(args, dict) else []
            else:
                found = _calls_in(match.group(1).strip())
            if found:
                pieces.append((*match.span(), found))
    for marker in (_MISTRAL, _PYTHON_TAG):
        at = text.find(marker)
        while at >= 0 and not _overlaps((at, at + len(marker)), spans()):
            end, found = _after_marker(text, at + len(marker), marker == _MISTRAL)
            if not found:
                break
            pieces.append((at, end, found))
            at = text.find(marker, end)
    position = 0
    while (at := _next_opening(text, position)) >= 0:
        inside = next((end for start, end in spans() if start <= at < end), None)
        if inside is not None:
            position = inside
            continue
        end, found = _bare_at(text, at)
        if found:
            pieces.append((at, end, found))
        position = end if found else at + 1
    pieces.sort(key=lambda piece: piece[0])
    return [call for *_, found in pieces for call in found], [(s, e) for s, e, _ in pieces]


def _overlaps(span: tuple[int, int], spans: Sequence[tuple[int, int]]) -> bool:
    return any(span[0] < end and start < span[1] for start, end in spans)


def _next_opening(text: str, position: int) -> int:
    indexes = [i for i in (text.find("{", position), text.find("[", position)) if i >= 0]
    return min(indexes, default=-1)


def _json_at(text: str, start: int = 0) -> Any:
    try:
        return _JSON.raw_decode(text, start)[0]
    except ValueError:
        return None


def _bare_at(text: str, at: int) -> tuple[int, list[tuple[str, Any]]]:
    """A bare JSON call (or list of them), or a pythonic list, starting at `at`."""
    try:
        value, end = _JSON.raw_decode(text, at)
    except ValueError:
        value, end = None, at
    if value is not None:
        return end, _calls_of(value)
    if _PYTHONIC_START.match(text, at):
        return _pythonic_at(text, at)
    return at, []


def _after_marker(text: str, start: int, mistral: bool) -> tuple[int, list[tuple[str, Any]]]:
    """The calls after `[TOOL_CALLS]` or `<|python_tag|>`: JSON, or Mistral's name[ARGS]{…}."""
    found: list[tuple[str, Any]] = []
    position = start
    while mistral and (match := _MISTRAL_ARGS.match(text, position)):
        args = _json_at(text, match.end())
        if not isinstance(args, dict):
            break
        _, position = _JSON.raw_decode(text, match.end())
        found.append((match.group(1), args))
        position = _skip(text, position, ",")
        if text.startswith(_MISTRAL, position):
            position += len(_MISTRAL)
    if found:
        return position, found
    position = _skip(text, start, "")
    end, found = _bare_at(text, position)
    return end, found


def _skip(text: str, position: int, also: str) -> int:
    while position < len(text) and (text[position].isspace() or text[position] in also):
        position += 1
    return position


def _calls_in(body: str) -> list[tuple[str, Any]]:
    """The calls a tagged or fenced body holds (all of it must be calls), else none."""
    value = _json_at(body)
    if value is not None:
        try:
            _, end = _JSON.raw_decode(body)
        except ValueError:
            return []
        calls = _calls_of(value)
        # Several objects one after another (one per line) are several calls.
        rest = body[end:].strip()
        while calls and rest:
            more = _json_at(rest)
            if more is None or not _calls_of(more):
                return []
            calls += _calls_of(more)
            rest = rest[_JSON.raw_decode(rest)[1] :].strip()
        return calls
    if _PYTHONIC_START.match(body):
        end, calls = _pythonic_at(body, 0)
        return calls if not body[end:].strip() else []
    return []


def _calls_of(value: Any) -> list[tuple[str, Any]]:
    """Read a decoded JSON value as calls: an object, a list of them, or `tool_calls`."""
    if isinstance(value, list):
        calls = [call for item in value for call in _calls_of(item)]
        return calls if value and len(calls) == len(value) else []
    if not isinstance(value, dict):
        return []
    if isinstance(value.get("tool_calls"), list):
        return _calls_of(value["tool_calls"])
    if isinstance(value.get("function"), dict):
        return _calls_of(value["function"])
    name = value.get("name")
    key = next((k for k in _ARG_KEYS if k in value), None)
    if not isinstance(name, str) or not name.strip() or key is None:
        return []
    args = value[key]
    if isinstance(args, str):
        # OpenAI-style arguments are a JSON string.
        decoded = _json_at(args.strip()) if args.strip() else {}
        args = decoded if decoded is not None else args
    return [(name.strip(), args)]


def _pythonic_at(text: str, at: int) -> tuple[int, list[tuple[str, Any]]]:
    """Parse `[f(a="x"), g(b=1)]` starting at `at`; return its end and the calls."""
    close = text.find("]", at)
    while close >= 0:
        try:
            tree = ast.parse(text[at : close + 1], mode="eval").body
        except SyntaxError:
            close = text.find("]", close + 1)
            continue
        calls = _pythonic_calls(tree)
        return (close + 1, calls) if calls else (at, [])
    return at, []


def _pythonic_calls(tree: ast.AST) -> list[tuple[str, Any]]:
    if not isinstance(tree, ast.List) or not tree.elts:
        return []
    calls = []
    for element in tree.elts:
        if not isinstance(element, ast.Call):
            return []
        name = ast.unparse(element.func)
        if not re.fullmatch(r"[A-Za-z_][\w.]*", name):
            return []
        try:
            args: dict[str, Any] = {k.arg: ast.literal_eval(k.value) for k in element.keywords}
            positional = [ast.literal_eval(a) for a in element.args]
        except ValueError:
            return []
        if None in args:
            return []
        if positional:
            args["*"] = positional
        calls.append((name, args))
    return calls


def resolve(name: str, args: Any, tools: Mapping[str, Schema]) -> TextCall:
    """Decide which offered tool a written call means and whether its arguments fit."""
    tool = match_tool(name, tools)
    if not isinstance(args, dict):
        return TextCall(name, {}, None, "its arguments are not an object")
    if tool is None:
        return TextCall(name, args, None, f"no offered tool is named {name}")
    args = _place_positional(args, tools[tool])
    problem = check_args(args, tools[tool])
    return TextCall(name, args, None if problem else tool, problem)


def match_tool(name: str, tools: Mapping[str, Schema]) -> str | None:
    """The offered tool `name` means: itself, or the one tool a plain near-miss fits."""
    plain = name.removeprefix("functions.").strip()
    for tool in tools:
        if tool == plain or tool.casefold() == plain.casefold():
            return tool
    # A plain near-miss (`search`, `read`, `list_docs`) means the one offered tool whose name
    # holds all its words: with a store's search, list and read tools, `read` is its read.
    words = set(_WORDS.findall(plain.casefold()))
    fitting = [t for t in tools if words and words <= set(_WORDS.findall(t.casefold()))]
    if len(fitting) == 1:
        return fitting[0]
    return None


def _place_positional(args: dict[str, Any], schema: Schema) -> dict[str, Any]:
    """Give pythonic positional arguments the names of the schema's properties, in order."""
    if "*" not in args:
        return args
    named = {k: v for k, v in args.items() if k != "*"}
    free = [p for p in schema.get("properties", {}) if p not in named]
    if len(args["*"]) > len(free):
        return args
    return {**named, **dict(zip(free, args["*"], strict=False))}


_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list,),
    "object": (dict,),
    "null": (type(None),),
}


def check_args(args: Mapping[str, Any], schema: Schema) -> str | None:
    """Say what is wrong with `args` for a tool's JSON schema, or None when they fit."""
    properties = schema.get("properties", {})
    unknown = [k for k in args if k not in properties]
    if unknown:
        return f"it has no argument {', '.join(unknown)}"
    missing = [k for k in schema.get("required", ()) if k not in args]
    if missing:
        return f"it needs {', '.join(missing)}"
    for key, value in args.items():
        if not _fits(value, properties[key]):
            return f"{key} cannot be {json.dumps(value, ensure_ascii=False)}"
    return None


def _fits(value: Any, schema: Schema) -> bool:
    options = schema.get("anyOf") or schema.get("oneOf")
    if options:
        return any(_fits(value, option) for option in options)
    if "enum" in schema and value not in schema["enum"]:
        return False
    kinds = schema.get("type")
    if kinds is None:
        return True
    kinds = [kinds] if isinstance(kinds, str) else kinds
    for kind in kinds:
        types = _TYPES.get(kind, (object,))
        # A bool is an int in Python, never a number in JSON.
        if isinstance(value, types) and not (isinstance(value, bool) and kind != "boolean"):
            return True
    return False


def describe_tools(tools: Mapping[str, Schema]) -> str:
    """Name the tools with their arguments: `search_x(query: string, source?: string)`."""
    described = []
    for name, schema in tools.items():
        required = set(schema.get("required", ()))
        params = []
        for key, prop in schema.get("properties", {}).items():
            kinds = [o.get("type") for o in prop.get("anyOf", [prop]) if o.get("type") != "null"]
            kind = "/".join(str(k) for k in kinds if k) or "any"
            params.append(f"{key}{'' if key in required else '?'}: {kind}")
        described.append(f"{name}({', '.join(params)})")
    return "; ".join(described)


_LITERAL_OPENERS = (_MISTRAL, _PYTHON_TAG, "<tool_call>", "<function=")
_OPENER = re.compile(
    r"\[TOOL_CALLS\]|<\|python_tag\|>|<tool_call>|<function="
    r"|\{\s*\"|\[\s*\{|\[\s*[A-Za-z_][\w.]*\s*\(|```[\w-]*\s*[\[{<]"
)
_MAYBE = re.compile(r"\{\s*|\[\s*|\[\s*[A-Za-z_][\w.]*\s*|`{1,3}|```[\w-]*\s*")
_THINK_OPEN = ("<think>", "<thinking>", "<reasoning>")


class StreamFilter:
    """Split a model's streamed text into answer and thinking, holding back what may be a call.

    Text that starts like a written tool call (or a thinking tag) is held until it is clear
    what it is; a call is never released. `feed` and `end` return (kind, text) pieces, kind
    "token" or "thinking", in order.
    """

    def __init__(self) -> None:
        self.text = ""
        self.released = 0
        self.holding_call = False
        self.thinking_tag: str | None = None
        self.started = False
        self.after_thinking = False

    def feed(self, token: str) -> list[tuple[str, str]]:
        """Take the next streamed piece; return what can be shown now."""
        self.text += token
        out: list[tuple[str, str]] = []
        if not self.started:
            head = self.text.lstrip()
            if not head or any(t.startswith(head) and t != head for t in _THINK_OPEN):
                return out
            opened = next((t for t in _THINK_OPEN if head.startswith(t)), None)
            self.started = True
            if opened:
                self.thinking_tag = opened
                self.released = self.text.index(opened) + len(opened)
        if self.thinking_tag is not None:
            closing = "</" + self.thinking_tag[1:]
            end = self.text.find(closing, self.released)
            if end < 0:
                # Keep back a possible half-written closing tag.
                safe = len(self.text) - len(closing) + 1
                if safe > self.released:
                    out.append(("thinking", self.text[self.released : safe]))
                    self.released = safe
                return out
            if end > self.released:
                out.append(("thinking", self.text[self.released : end]))
            self.released = end + len(closing)
            self.thinking_tag = None
            self.after_thinking = True
        return out + self._answer()

    def _answer(self) -> list[tuple[str, str]]:
        if self.holding_call:
            return []
        if self.after_thinking:
            # The answer starts at its first character, not the line break after the tag.
            while self.released < len(self.text) and self.text[self.released].isspace():
                self.released += 1
            self.after_thinking = self.released == len(self.text)
        pending = self.text[self.released :]
        cut = len(pending)
        for match in re.finditer(r"[\[{<`]", pending):
            rest = pending[match.start() :]
            if _OPENER.match(rest):
                self.holding_call = True
                cut = match.start()
                break
            if _may_open(rest):
                cut = match.start()
                break
        shown = pending[:cut]
        self.released += cut
        return [("token", shown)] if shown else []

    def end(self) -> list[tuple[str, str]]:
        """The stream is over: release what was held unless it holds a call."""
        pending = self.text[self.released :]
        self.released = len(self.text)
        if self.thinking_tag is not None:
            return [("thinking", pending)] if pending else []
        if not self.started:
            pending = self.text
        calls, spans = find_calls(pending)
        for start, finish in reversed(spans):
            pending = pending[:start] + pending[finish:]
        pending = pending.rstrip() if calls else pending
        return [("token", pending)] if pending.strip() else []


def _may_open(rest: str) -> bool:
    """Whether `rest` (text from a bracket on) could still grow into a call's opening."""
    if any(o.startswith(rest) for o in _LITERAL_OPENERS):
        return True
    return bool(_MAYBE.fullmatch(rest))


def settle(
    response: AIMessage, tools: Mapping[str, Schema], quoted: Sequence[str] = ()
) -> tuple[AIMessage, list[str]]:
    """Turn calls a model wrote as text into real tool calls, and its thinking into reasoning.

    Returns the message to keep and notes on written calls that could not be run. The message
    records every written call under `response_metadata["text_calls"]`; recovered calls keep
    their id there, so the tool records can be marked. A call that one of the `quoted` texts
    (the turn's tool results: `turn_results`) holds too is the model quoting a document, and
    is never run.
    """
    if not isinstance(response.content, str) or not response.content:
        return response, []
    if response.tool_calls:
        thinking, answer = split_thinking(response.content)
        reading = Reading(answer, thinking, ())
    else:
        reading = read_text(response.content, tools, quoted)
    if not reading.thinking and not reading.calls:
        return response, []
    records, calls, notes = [], [], []
    for number, call in enumerate(reading.calls):
        record = call.record()
        if call.tool is not None:
            record["id"] = f"text_{uuid.uuid4().hex[:12]}_{number}"
            calls.append({"name": call.tool, "args": call.args, "id": record["id"]})
        else:
            notes.append(
                f"The model wrote a call to {call.name} as text; it was not run because "
                f"{call.problem}. The tools are {describe_tools(tools) or 'none at this step'}."
            )
        records.append(record)
    extra = dict(response.additional_kwargs)
    if reading.thinking:
        earlier = extra.get("reasoning_content")
        extra["reasoning_content"] = "\n".join(t for t in (earlier, reading.thinking) if t)
    metadata = dict(response.response_metadata)
    if records:
        metadata["text_calls"] = records
    settled = AIMessage(
        content=reading.answer,
        tool_calls=[*response.tool_calls, *calls],
        additional_kwargs=extra,
        response_metadata=metadata,
        usage_metadata=response.usage_metadata,
        id=response.id,
    )
    return settled, notes


def turn_results(messages: Sequence[BaseMessage]) -> list[str]:
    """The text of the current turn's tool results: what a written call may be quoting."""
    return [
        message.content
        for message in messages[turn_start(messages) :]
        if isinstance(message, ToolMessage) and isinstance(message.content, str)
    ]


def recovered_ids(message: AIMessage) -> set[str]:
    """The ids of the tool calls on `message` that were recovered from its text."""
    return {r["id"] for r in message.response_metadata.get("text_calls", ()) if "id" in r}


def turn_text_calls(messages: Sequence[BaseMessage]) -> list[dict[str, Any]]:
    """The calls the model wrote as text in the last turn (recovered or not), in order."""
    return [
        {k: v for k, v in record.items() if k != "id"}
        for message in messages[turn_start(messages) :]
        if isinstance(message, AIMessage)
        for record in message.response_metadata.get("text_calls", ())
    ]
