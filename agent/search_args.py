"""The retrieval tool's arguments as its JSON schema gives them to a model (a pydantic model:
built only where a tool is, since pydantic costs a command ~0.3 s to import)."""

from pydantic import BaseModel, ConfigDict, Field, field_validator

from archivist.agent.retrieval import QUERY_MAX, SOURCE_MAX, clean_query, clean_source


# The docstring is the JSON schema's description, read by the model that calls the tool
# (the agent's, an MCP client's): it says what to pass, not how the class works. Unknown
# arguments (`k`, a filter) are refused, not ignored: the model then reads that its search
# was not what it asked for, instead of believing it filtered or widened it.
class SearchArgs(BaseModel):
    """A search: `query` (required), and `source` to search one document or folder only."""

    model_config = ConfigDict(extra="forbid")

    query: str = Field(
        description="What to look for, in the words the documents would use.",
        min_length=1,
        max_length=QUERY_MAX,
    )
    source: str | None = Field(
        default=None,
        description=(
            "Optional: search only this document — a file name such as 'refund.md', "
            "a folder such as 'policies/', or the start of a name. Leave it out to search "
            "everything."
        ),
        max_length=SOURCE_MAX,
    )

    @field_validator("query")
    @classmethod
    def _query_has_words(cls, value: str) -> str:
        return clean_query(value)

    @field_validator("source")
    @classmethod
    def _blank_source_is_none(cls, value: str | None) -> str | None:
        return clean_source(value)
