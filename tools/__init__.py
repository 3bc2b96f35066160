"""Storage: knowledge stores on Qdrant (embedded Edge or a server), sparse vectors, migration."""
