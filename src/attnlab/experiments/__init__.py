"""attnlab.experiments: train, evaluate, and turn a claim of the source tutorials into a table and a plot."""
