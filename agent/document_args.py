"""The list and read tools' arguments as their JSON schemas give them to a model (pydantic
models: built only where a tool is, as `search_args` is)."""

from typing import Annotated, Any

from langchain_core.tools import InjectedToolArg
from pydantic import BaseModel, ConfigDict, Field

from archivist.agent.documents import CONTAINS_MAX, PATTERN_MAX


# The docstrings are the schemas' descriptions, read by the model that calls the tool.
class ListArgs(BaseModel):
    """List documents: all of them, or those whose name fits `path` and whose text holds
    `contains`."""

    model_config = ConfigDict(extra="forbid")

    path: str | None = Field(
        default=None,
        description=(
            "Optional: only documents whose name fits — a file name, a folder such as "
            "'policies/', the start of a name, or a pattern such as '*.pdf'."
        ),
        max_length=PATTERN_MAX,
    )
    contains: str | None = Field(
        default=None,
        description=(
            "Optional: only documents whose text contains these exact words (case ignored); "
            "each is listed with how many times and where."
        ),
        max_length=CONTAINS_MAX,
    )
    page: int | str | None = Field(
        default=None, description="Optional: the page of a long listing to show (1 first)."
    )


class ReadArgs(BaseModel):
    """Read one document in order: whole, or the part given by one of `lines`, `page`,
    `heading` or `around`."""

    model_config = ConfigDict(extra="forbid")

    source: str | None = Field(
        default=None,
        description="The document to read: its name as listed, such as 'refund.md'.",
        max_length=PATTERN_MAX,
    )
    lines: str | list[int] | None = Field(
        default=None, description="Optional: the lines to read, such as '10-40' or '41-'."
    )
    page: int | str | None = Field(
        default=None,
        description="Optional: a PDF page or slide number, or a spreadsheet sheet's name.",
    )
    heading: str | None = Field(
        default=None,
        description="Optional: a heading's words; reads that section.",
        max_length=PATTERN_MAX,
    )
    around: int | str | None = Field(
        default=None,
        description=(
            "Optional: a passage number [n] found earlier in this conversation turn; reads "
            "its document from there (no `source` needed)."
        ),
    )
    turn: Annotated[list[dict[str, Any]] | None, InjectedToolArg] = None
