"""The terminal: the chat loop and its screen, the conversation it keeps, and the ingest's
progress on stderr."""
