"""attnlab.experiments: train, evaluate, and turn a claim of the seeds into a table and a plot."""
