"""The sample knowledge bases, installed as `archivist.samples` (shop: the first-run sample)."""
