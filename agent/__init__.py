"""The query engine: the agent graphs, the retrieval tool, context, grading, citations, prompts."""
