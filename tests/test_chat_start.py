"""`archivist chat` takes input before its agent is built; a build failing after the prompt
ends the chat with the reason and its fix."""

import io

import pexpect
from chat_terminal import BANNER, TOOL_LINE, chat_requests, leave, ready, start_chat

REFUND_Q = "How many days do I have to ask for a refund?"
# What the chat's build says while it waits for the store the test holds.
WAITING = "Waiting for the store: it is in use by"


def _recorded(child: pexpect.spawn) -> io.StringIO:
    child.logfile_read = io.StringIO()
    return child.logfile_read


def test_the_prompt_takes_a_question_while_the_agent_is_still_being_built(
    ollama, home, archivist, store
):
    # The test holds the store: the chat's build stops there until the block ends.
    with archivist._client.hold():
        child = start_chat("--store", store, ollama_url=ollama.url, home=home)
        shown = _recorded(child)
        child.expect("Archivist · starting qwen2.5:3b…")
        ready(child)
        child.expect(WAITING)
        # The prompt takes keys while the build waits: no banner yet, no model asked.
        assert not BANNER.search(shown.getvalue())
        assert chat_requests(ollama) == []
        child.sendline(REFUND_Q)
    # The question waits for the agent, which introduces itself, then answers.
    child.expect(BANNER)
    child.expect(TOOL_LINE)
    child.expect(r"Sources: \[1\] \S+\.md")
    ready(child)
    assert leave(child) == 0
    assert chat_requests(ollama)[-1]["messages"][-1]["role"] == "tool"
    assert "Traceback" not in shown.getvalue()


def test_a_build_failing_after_the_prompt_ends_the_chat_with_the_reason_and_fix(
    ollama, home, archivist, store
):
    # The first store is held by the test, so the build fails only after the prompt, at the
    # second (misspelled) one.
    with archivist._client.hold():
        child = start_chat("--store", store, "--store", "nope", ollama_url=ollama.url, home=home)
        shown = _recorded(child)
        ready(child)
        child.expect(WAITING)
        child.send("How many days")  # a question half typed when the build fails
    # The prompt gives way at once: the same message, fix and status as before any prompt.
    child.expect(r"Error: There is no store named 'nope'\.\r\n")
    child.expect(r"Create it with: archivist ingest PATH --store nope\r\n")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 1
    assert "Traceback" not in shown.getvalue()
    assert chat_requests(ollama) == []
