"""A passage's relevance to a query, scored by an Ollama model's log-probabilities."""

from __future__ import annotations

import math
import re
from html import escape
from typing import TYPE_CHECKING, Any

from archivist.agent import prompts
from archivist.tools.errors import ArchivistError

if TYPE_CHECKING:
    from archivist.agent.rerank import Scorer
    from archivist.ollama import Ollama

# Alternatives read at the first answer token: enough to find both "yes" and "no" (and their
# capitalised forms) for a model that follows the instruction.
RERANK_TOP_LOGPROBS = 5
LOGPROBS_RELEASE = (0, 12, 11)
"""The first Ollama release that returns log-probabilities."""
# (host, model) pairs whose answers were seen to carry log-probabilities in this process: an
# evaluation or an MCP server builds its tools many times and need not ask again.
_LOGPROBS_SEEN: set[tuple[str, str]] = set()


def yes_probability(alternatives: Any) -> float:
    """The probability of "yes" among a token's top alternatives, against "no": 0 to 1, 0 when
    neither is among them. Case, spaces and quoting around the word do not matter."""
    mass = {"yes": 0.0, "no": 0.0}
    for alternative in alternatives:
        word = alternative.token.strip().strip("*\"'.:").lower()
        if word in mass:
            mass[word] += math.exp(alternative.logprob)
    total = mass["yes"] + mass["no"]
    return mass["yes"] / total if total else 0.0


def relevance_scorer(ollama: Ollama, model: str) -> Scorer:
    """Build the function that scores a passage's relevance to a query with an Ollama model:
    one short /api/chat request (a yes-or-no question, one answer token, its top
    log-probabilities), scored as the probability of "yes".

    The model is checked first: it must exist (else ModelMissing, with the pull to run), be
    able to chat, and its answers must carry log-probabilities (Ollama 0.12.11 and later) —
    else an ArchivistError that names the fix.
    """
    info = ollama.show(model)
    if info.capabilities and "completion" not in info.capabilities:
        raise ArchivistError(
            f"'{model}' cannot rerank: it does not answer prompts (Ollama lists it as: "
            f"{', '.join(info.capabilities)}).",
            "Rerank with a chat model (--rerank qwen2.5:3b) or a reranker model published for "
            "Ollama, or search without --rerank.",
        )
    wire = ollama.wire
    # A thinking model would spend its one token on reasoning; Ollama refuses `think` to others.
    think = False if info.thinking else None

    def score(query: str, passage: str) -> float:
        # Escaped as the agent's search results are: the passage cannot close its block.
        request = prompts.RERANK_REQUEST.format(query=query, passage=escape(passage, quote=False))
        response = wire.chat(
            model,
            [
                {"role": "system", "content": prompts.RERANK_SYSTEM},
                {"role": "user", "content": request},
            ],
            think=think,
            logprobs=True,
            top_logprobs=RERANK_TOP_LOGPROBS,
            options={"temperature": 0, "num_predict": 1},
        )
        if not response.logprobs:
            raise _no_logprobs(ollama, model)
        first = response.logprobs[0]
        return yes_probability(first.top_logprobs or [first])

    if (wire.host, model) not in _LOGPROBS_SEEN:
        score("reranking check", "A passage to check that the model's answers carry logprobs.")
        _LOGPROBS_SEEN.add((wire.host, model))
    return score


def _no_logprobs(ollama: Ollama, model: str) -> ArchivistError:
    """Say why an answer came without log-probabilities: an Ollama too old, or the model."""
    from archivist.settings import mask_url

    host = mask_url(ollama.settings.ollama_host)
    try:
        running = ollama.version()
    except Exception:  # noqa: BLE001 - the release is then unknown, and said so
        running = "?"
    release = tuple(int(part) for part in re.findall(r"\d+", running)[:3])
    if release and release < LOGPROBS_RELEASE:
        return ArchivistError(
            f"Ollama {running} at {host} does not return log-probabilities, which --rerank "
            "needs to score passages.",
            "Update Ollama to 0.12.11 or later (https://ollama.com/download), or search "
            "without --rerank (unset ARCHIVIST_RERANK_MODEL).",
        )
    return ArchivistError(
        f"'{model}' answered without log-probabilities (Ollama {running} at {host}), so it "
        "cannot score passages for --rerank.",
        "Rerank with another model (a chat model such as qwen2.5:3b, or a reranker model "
        "published for Ollama), or search without --rerank (unset ARCHIVIST_RERANK_MODEL).",
    )
