"""The write path: load documents, split them, and keep a store in sync with its sources."""
