"""The foundation: knowledge stores on Qdrant and the retrieval tools built on them."""
