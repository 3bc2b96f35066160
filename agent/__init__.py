"""The read path and the application: settings, models, the agent graph, CLI, chat, evals."""
