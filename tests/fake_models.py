"""In-process doubles of Ollama's models, at the Ollama seam's wire (`archivist.ollama.wire`).

`FakeModels` serves the same models as the fake Ollama (`fake_ollama.DEFAULT_MODELS`), with
the same behaviour, without HTTP: its chat model is a LangChain `BaseChatModel` that follows
`fake_ollama.chat_policy` (and `structured_policy` for structured output) unless a turn is
scripted, and its embeddings are `fake_ollama.embed_text`'s hashing vectors, so a store built
with either double is the same store (tests/test_fake_models.py checks it). `/api/show`
answers are the fake Ollama's too (`show_body`), read by the seam's own `show` and
`embed_context`; everything above the wire (the checks of answers, the retries, relevance
scoring) is the seam's own code.

What the models were sent is recorded in the fake Ollama's request shape
(`chat_requests()`: `{"model", "messages": [{"role", "content", "tool_calls"?}], "tools",
"format"?, "options"}`; `embed_requests()`: lists of inputs), so a test's assertions read the
same either way. The fixture `fake_models` (conftest.py) installs it.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Iterator, Sequence
from typing import Any

import ollama
from fake_ollama import (
    _STREAM_PIECE,
    DEFAULT_MODELS,
    VERSION,
    ModelSpec,
    ServedModels,
    chat_policy,
    chat_vector,
    count_tokens,
    embed_text,
    full_name,
    is_judgement,
    judgement_logprobs,
    relevance,
    sends_logprobs,
    show_body,
    structured_policy,
    token_logprobs,
    top_logprobs_error,
)
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.embeddings import Embeddings
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.output_parsers import JsonOutputParser, PydanticOutputParser
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.runnables import RunnableMap, RunnablePassthrough
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import BaseModel, ConfigDict


class FakeModels(ServedModels):
    """The models an in-process fake Ollama serves, their scripts and what they were sent."""

    def __init__(self, models: Sequence[ModelSpec] = DEFAULT_MODELS) -> None:
        self._lock = threading.Lock()
        self._models = {full_name(spec.name): spec for spec in models}
        self._scripts: dict[str, deque[dict]] = {}
        self._chats: list[dict[str, Any]] = []
        self._embeds: list[list[str]] = []
        self.ollama_version = VERSION
        """The Ollama release it stands for: before 0.12.11, logprobs are ignored."""
        self.scorer = relevance

    def score_with(self, scorer: Any) -> None:
        """Answer relevance judgements with P("yes") = scorer(query, passage)."""
        self.scorer = scorer

    def script(self, model: str, *turns: dict) -> None:
        """Queue chat turns for a model, as `FakeOllama.script` does (the same turn shapes;
        `hold_after` has no meaning here: nothing streams across a process)."""
        with self._lock:
            self._scripts.setdefault(full_name(model), deque()).extend(turns)

    def chat_requests(self) -> list[dict[str, Any]]:
        """The chat requests made, as the fake Ollama records /api/chat bodies."""
        with self._lock:
            return list(self._chats)

    def embed_requests(self) -> list[list[str]]:
        """The inputs of each embedding request made, in order."""
        with self._lock:
            return [list(inputs) for inputs in self._embeds]

    def clear_requests(self) -> None:
        """Forget the recorded requests."""
        with self._lock:
            self._chats.clear()
            self._embeds.clear()

    def _next_turn(self, model: str) -> dict | None:
        with self._lock:
            queue = self._scripts.get(full_name(model))
            return queue.popleft() if queue else None

    def _served(self, name: str) -> ModelSpec:
        spec = self.model(name)
        if spec is None:
            raise ollama.ResponseError(f"model '{name}' not found", 404)
        return spec

    def wire(self, settings: Any) -> FakeWire:
        """Stand in for `archivist.ollama.wire.connect`: the requests, answered here."""
        return FakeWire(self)


def install(fake: FakeModels, monkeypatch: Any) -> FakeModels:
    """Put `fake`'s models behind the Ollama seam for the test (through `monkeypatch`)."""
    from archivist.ollama import wire

    monkeypatch.setattr(wire, "connect", fake.wire)
    return fake


class FakeWire:
    """The requests to Ollama (`archivist.ollama.wire.Wire`), answered by `FakeModels` as the
    fake Ollama answers them over HTTP."""

    host = "fake-ollama-in-process"

    def __init__(self, models: FakeModels) -> None:
        self.models = models

    def show(self, model: str) -> dict[str, Any]:
        return show_body(self.models._served(model), model)

    def embed(self, model: str, texts: Sequence[str]) -> list[list[float]]:
        return HashingEmbeddings(self.models, model).embed_documents(list(texts))

    def version(self) -> str:
        return self.models.ollama_version

    def chat_model(self, model: str, **options: Any) -> FakeChatModel:
        return FakeChatModel(models=self.models, model=model, options=options)

    def pull(self, model: str) -> Iterator[ollama.ProgressResponse]:
        yield ollama.ProgressResponse(status="pulling manifest")
        yield ollama.ProgressResponse(status="success")

    def chat(
        self,
        model: str = "",
        messages: Sequence[dict[str, Any]] | None = None,
        *,
        stream: bool = False,
        think: bool | None = None,
        logprobs: bool | None = None,
        top_logprobs: int | None = None,
        options: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> ollama.ChatResponse:
        """Answer a plain (tool-less, unstreamed) chat request as the fake Ollama does,
        relevance judgements and logprobs included; recorded in the /api/chat body shape."""
        models = self.models
        spec = models._served(model)
        if "completion" not in spec.capabilities:
            raise ollama.ResponseError(f'"{model}" does not support chat', 400)
        if think and "thinking" not in spec.capabilities:
            raise ollama.ResponseError(f'"{model}" does not support thinking', 400)
        sent = [dict(m) for m in messages or []]
        body: dict[str, Any] = {"model": model, "messages": sent, "stream": stream}
        for key, value in (
            ("think", think),
            ("logprobs", logprobs),
            ("top_logprobs", top_logprobs),
        ):
            if value is not None:
                body[key] = value
        body["options"] = dict(options or {})
        if error := top_logprobs_error(body):
            raise ollama.ResponseError(error, 400)
        with models._lock:
            models._chats.append(body)
        top = int(top_logprobs or 0)
        turn = models._next_turn(model)
        judged = None if turn is not None else is_judgement(sent)
        if judged is not None:
            content, entries = judgement_logprobs(models.scorer(*judged), top)
        else:
            turn = turn or chat_policy(spec, sent, [])
            if "error" in turn:
                raise ollama.ResponseError(turn["error"], int(turn.get("status", 500)))
            content = turn.get("content", "")
            entries = [e for p in _STREAM_PIECE.findall(content) for e in token_logprobs(p, top)]
        answer: dict[str, Any] = {
            "model": model,
            "message": {"role": "assistant", "content": content},
            "done": True,
            "done_reason": "stop",
        }
        if sends_logprobs(models.ollama_version, spec, body):
            answer["logprobs"] = entries
        return ollama.ChatResponse(**answer)


class HashingEmbeddings(Embeddings):
    """The fake Ollama's embedder in this process: the same vectors, the same refusals."""

    def __init__(self, models: FakeModels, model: str) -> None:
        self.models, self.model = models, model

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        spec = self.models.model(self.model)
        if spec is None:
            raise ollama.ResponseError(f'model "{self.model}" not found, try pulling it first', 404)
        as_chat = spec.behaviour == "chat_embeddings"
        if "embedding" not in spec.capabilities and not as_chat:
            raise ollama.ResponseError(f'"{self.model}" does not support embeddings', 400)
        if any(count_tokens(text) > spec.context_length for text in texts):
            raise ollama.ResponseError("the input length exceeds the context length", 400)
        with self.models._lock:
            self.models._embeds.append(list(texts))
        if as_chat:
            return [chat_vector(text, spec.embedding_length) for text in texts]
        return [embed_text(text, spec.embedding_length, spec.context_length) for text in texts]

    def embed_query(self, text: str) -> list[float]:
        return self.embed_documents([text])[0]


def ollama_message(message: BaseMessage) -> dict[str, Any]:
    """A LangChain message as Ollama's /api/chat receives it."""
    content = message.content if isinstance(message.content, str) else str(message.content)
    if isinstance(message, SystemMessage):
        return {"role": "system", "content": content}
    if isinstance(message, HumanMessage):
        return {"role": "user", "content": content}
    if isinstance(message, ToolMessage):
        return {"role": "tool", "content": content, "tool_call_id": message.tool_call_id}
    if isinstance(message, AIMessage):
        body: dict[str, Any] = {"role": "assistant", "content": content}
        if message.tool_calls:
            body["tool_calls"] = [
                {"function": {"name": call["name"], "arguments": call["args"]}}
                for call in message.tool_calls
            ]
        return body
    return {"role": message.type, "content": content}


class FakeChatModel(BaseChatModel):
    """A chat model served by `FakeModels`: scripted turns first, then the fake's policy.

    It streams its answer in the pieces the fake Ollama streams, calls tools with the
    arguments given, answers structured output (`format`) from the schema, and raises
    `ollama.ResponseError` where Ollama answers an error, so the factory's `explain` words it
    as for the real client.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    models: Any
    model: str
    options: dict[str, Any] = {}

    @property
    def _llm_type(self) -> str:
        return "fake-ollama-in-process"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any):
        return self.bind(tools=[convert_to_openai_tool(tool) for tool in tools], **kwargs)

    def with_structured_output(self, schema: Any, *, include_raw: bool = False, **kwargs: Any):
        # As ChatOllama's method="json_schema": the schema goes in `format`, the reply is JSON.
        if isinstance(schema, type) and issubclass(schema, BaseModel):
            bound = self.bind(format=schema.model_json_schema())
            parser = PydanticOutputParser(pydantic_object=schema)
        else:
            bound = self.bind(format=convert_to_openai_tool(schema)["function"]["parameters"])
            parser = JsonOutputParser()
        if not include_raw:
            return bound | parser
        parsed = RunnablePassthrough.assign(
            parsed=lambda x: parser.invoke(x["raw"]), parsing_error=lambda _: None
        )
        failed = RunnablePassthrough.assign(parsed=lambda _: None)
        return RunnableMap(raw=bound) | parsed.with_fallbacks(
            [failed], exception_key="parsing_error"
        )

    def _turn(self, messages: list[BaseMessage], kwargs: dict[str, Any]) -> tuple[dict, dict]:
        spec = self.models._served(self.model)
        tools = kwargs.get("tools") or []
        if tools and "tools" not in spec.capabilities:
            error = f"registry.ollama.ai/library/{self.model.split(':')[0]} does not support tools"
            raise ollama.ResponseError(error, 400)
        options = {**self.options, **{k: v for k, v in kwargs.items() if k != "tools"}}
        schema = options.pop("format", None)
        body = {"model": self.model, "messages": [ollama_message(m) for m in messages]}
        body.update({"tools": tools, "options": options})
        if schema is not None:
            body["format"] = schema
        with self.models._lock:
            self.models._chats.append(body)
        turn = self.models._next_turn(self.model)
        if turn is None and isinstance(schema, dict):
            turn = structured_policy(schema, body["messages"])
        turn = turn or chat_policy(spec, body["messages"], tools)
        if "error" in turn:
            raise ollama.ResponseError(turn["error"], int(turn.get("status", 500)))
        return turn, body

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        started = time.perf_counter_ns()
        turn, body = self._turn(messages, kwargs)
        broken = "mid_stream_error" in turn
        pieces = _STREAM_PIECE.findall(turn.get("content", "Let me check" if broken else ""))
        for piece in pieces:
            chunk = ChatGenerationChunk(message=AIMessageChunk(content=piece))
            if run_manager is not None:
                run_manager.on_llm_new_token(piece, chunk=chunk)
            yield chunk
        if broken:
            raise ollama.ResponseError(turn["mid_stream_error"])
        calls = [
            {"name": call["name"], "args": call.get("arguments", {}), "id": f"call_{n}"}
            for n, call in enumerate(turn.get("tool_calls", []))
        ]
        prompt = sum(count_tokens(m["content"]) + 4 for m in body["messages"])
        answered = len(pieces) + len(calls)
        last = AIMessageChunk(
            content="",
            tool_call_chunks=[
                {"name": c["name"], "args": json.dumps(c["args"]), "id": c["id"], "index": n}
                for n, c in enumerate(calls)
            ],
            usage_metadata={
                "input_tokens": prompt,
                "output_tokens": answered,
                "total_tokens": prompt + answered,
            },
            response_metadata={
                "model": self.model,
                "done": True,
                "done_reason": "stop",
                "total_duration": time.perf_counter_ns() - started,
                "eval_count": answered,
                "prompt_eval_count": prompt,
            },
        )
        yield ChatGenerationChunk(message=last)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        chunks = list(self._stream(messages, stop, run_manager, **kwargs))
        merged = chunks[0]
        for chunk in chunks[1:]:
            merged += chunk
        message = merged.message
        whole = AIMessage(
            content=message.content,
            tool_calls=message.tool_calls,
            usage_metadata=message.usage_metadata,
            response_metadata=message.response_metadata,
        )
        return ChatResult(generations=[ChatGeneration(message=whole)])
