"""attnlab.experiments: train, evaluate, write a table and plots (import the submodule you need)."""
