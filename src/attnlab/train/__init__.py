"""attnlab.train: training loops, checkpoints and decoding."""
