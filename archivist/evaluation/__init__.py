"""Tool-calling evaluations: run a dataset against models, score it, write the report."""
