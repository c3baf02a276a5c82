"""attnlab.data: corpora and image sets shipped by installed packages (nothing is downloaded)."""
