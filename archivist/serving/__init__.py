"""Archivist served to other programs: the OpenAI chat-completions API (`archivist serve`:
`completions`, `api`), MCP (`archivist mcp`: `mcp`, `mcp_documents`) and the graphs LangGraph
Server runs (`graphs`, named in langgraph.json)."""
