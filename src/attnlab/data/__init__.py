"""attnlab.data: corpora, vocabularies and batches (nothing downloads; data come from installed packages)."""
