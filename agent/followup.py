"""Follow-up questions: searches that carry the conversation's subject.

Small models copy the user's last words into their search, so "and how do I make it
optional?" searches for "make it optional" and finds whatever says that, not the subject the
conversation is about. When a turn has history and a search is the user's own words, its
query is made standalone: by the chat model, in one short structured request
(`prompts.CONDENSE_SYSTEM`), and where its reply adds nothing from the conversation, by a
deterministic rule — a follow-up (it opens with "and", "what about", "那", points back with
"it", "that", "它", or says next to nothing) gets the earlier questions' key terms added. A
question that stands alone keeps its own words, so a change of topic is not dragged along.

Chinese has no spaces: terms are the runs of CJK characters left once the question words and
particles (如何, 什么, 吗, 呢 …) are taken out, and they are compared through the store's own
BM25 tokenizer (archivist.tools.sparse), as a search would compare them.
"""

import functools
import re
from collections.abc import Sequence

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from pydantic import BaseModel, Field

from archivist.agent import prompts
from archivist.agent.context import turn_start
from archivist.agent.grading import STRUCTURED_TAG, ask_structured
from archivist.agent.records import ModelCall
from archivist.tools.sparse import CJK, STOP_WORDS, cjk_runs, tokenize

EARLIER_QUESTIONS = 3
"""How many earlier questions the condensing request and the fallback look at."""
SUBJECT_TERMS = 6
"""At most this many of the earlier questions' terms are added to a follow-up."""
MAX_QUERY_CHARS = 300


@functools.cache
def _words() -> re.Pattern[str]:
    """Words and dotted or hyphenated names (compiled when first used: see `cjk_runs`)."""
    return re.compile(rf"[^\W{CJK}]+(?:[-.][^\W{CJK}]+)*")


_TRAILING = re.compile(r"[\s?!.,;:？！。，；：]+$")
_OPENER = re.compile(
    r"^\W*(?:and|but|also|so|or|then|plus|what about|how about|and what|what if)\b", re.I
)
_POINTER = frozenset("it its this that these those they them their one ones same".split())
_CJK_OPENER = re.compile(r"^\W*(?:那么|那|还有|另外|此外|而且|并且|再|还)")
_CJK_POINTER = re.compile(r"它们|它|这个|那个|这些|那些|这样|那样|其|该|此|呢[\s?？]*$")
# Question words and particles: what is left of a Chinese question is its subject.
_CJK_FUNCTION = re.compile(
    r"为什么|怎么样|怎么|怎样|如何|什么|哪些|哪个|哪里|是否|是不是|能否|可否|可以|请问|我们|"
    r"你们|它们|多少|一下|那么|^[那这请还再]|[它吗呢吧啊的了呀是]"
)


class Standalone(BaseModel):
    """A follow-up question rewritten as a search that stands on its own."""

    query: str = Field(description="The search, carrying the subject the question refers to.")


def subject_terms(text: str) -> list[str]:
    """The words of a question that name what it is about: its Latin words that are not
    function words or pointers ("it", "that"), and its CJK text without question words."""
    terms = [
        word
        for word in (w.lower() for w in _words().findall(text))
        if word not in STOP_WORDS and word not in _POINTER
    ]
    for run in cjk_runs().findall(text):
        terms += [part for part in _CJK_FUNCTION.split(run) if part]
    return list(dict.fromkeys(terms))


def _weight(terms: Sequence[str]) -> int:
    """About how many words the terms hold: a CJK run counts a word per two characters."""
    return sum(max(len(t) // 2, 1) if cjk_runs().fullmatch(t) else 1 for t in terms)


def is_followup(question: str) -> bool:
    """Whether a question leans on what came before: it opens with a connective ("and",
    "what about", "那"), points back ("it", "those", "它", "…呢?"), or names one thing at most."""
    words = {w.lower() for w in _words().findall(question)}
    return bool(
        _OPENER.match(question)
        or words & _POINTER
        or _CJK_OPENER.match(question)
        or _CJK_POINTER.search(question)
        or _weight(subject_terms(question)) <= 1
    )


def copies(query: str, question: str) -> bool:
    """Whether a search query is the user's own words (all its terms are the question's)."""
    return set(tokenize(query)) <= set(tokenize(question))


def with_subject(question: str, earlier: Sequence[str]) -> str:
    """Add the earlier questions' key terms to a follow-up; leave a question that stands alone
    as it is. The newest earlier question comes first, and older ones only while each one was
    itself a follow-up (the subject was set where a question last stood alone)."""
    if not earlier or not is_followup(question):
        return question
    have = set(tokenize(question))
    added: list[str] = []
    for previous in reversed(earlier):
        for term in subject_terms(previous):
            tokens = set(tokenize(term))
            if tokens and not tokens <= have:
                added.append(term)
                have |= tokens
        if not is_followup(previous):
            break
    if not added:
        return question
    return f"{_TRAILING.sub('', question)} {' '.join(added[:SUBJECT_TERMS])}"


def history_of(messages: Sequence[BaseMessage]) -> tuple[list[str], str]:
    """The earlier questions of a conversation (the last few, oldest first) and the last
    answer before the current turn ("" when none)."""
    before = messages[: turn_start(messages)]
    questions = [str(m.content) for m in before if isinstance(m, HumanMessage)]
    answers = [m for m in before if isinstance(m, AIMessage) and not m.tool_calls and m.content]
    answer = str(answers[-1].content) if answers else ""
    return questions[-EARLIER_QUESTIONS:], answer


def _short(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _clean(query: str) -> str:
    return " ".join(query.split()).strip("\"'“”「」 ")


class Condenser:
    """Make a follow-up's search standalone: the chat model's rewrite, else the rule.

    Without a model (a graph built by hand), only the deterministic rule applies.
    """

    def __init__(self, model: BaseChatModel | None = None) -> None:
        self._condense = None
        if model is not None:
            self._condense = model.with_structured_output(
                Standalone, method="json_schema", include_raw=True
            ).with_config(tags=[STRUCTURED_TAG], run_name="condense_question")

    def standalone(
        self, question: str, earlier: Sequence[str], answer: str = ""
    ) -> tuple[str, list[ModelCall]]:
        """Return the search for `question` after the `earlier` questions, and the model
        calls made (none without history or a model).

        The model's rewrite is taken when it adds a term of the conversation (an earlier
        question or the last answer) and is one short line; otherwise the rule decides.
        """
        if not earlier:
            return question, []
        used: list[ModelCall] = []
        if self._condense is not None:
            # Kept short whatever was pasted: the request only needs the subject.
            listed = "\n".join(f"- {_short(q, 300)}" for q in earlier)
            if answer:
                listed += f"\nLast answer: {_short(answer, 200)}"
            request = prompts.CONDENSE_REQUEST.format(
                earlier=listed, question=_short(question, MAX_QUERY_CHARS * 3)
            )
            asked = ask_structured(self._condense, "condense", prompts.CONDENSE_SYSTEM, request)
            used.append(asked.usage)
            proposed = _clean(asked.value.query) if asked.value is not None else ""
            if self._carries_subject(proposed, question, [*earlier, answer]):
                return proposed, used
        return with_subject(question, earlier), used

    @staticmethod
    def _carries_subject(proposed: str, question: str, conversation: Sequence[str]) -> bool:
        if not proposed or len(proposed) > MAX_QUERY_CHARS:
            return False
        added = set(tokenize(proposed)) - set(tokenize(question))
        return bool(added & set(tokenize(" ".join(conversation))))
