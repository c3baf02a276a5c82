"""The verbs of ``attnlab``: each name with its one-line help.

Verb NAME lives in the module ``attnlab.cli.NAME`` (plot-run: ``plot_run``), whose
``add_parser(sub, help)`` receives its help from this table. ``attnlab --help``, bare
``attnlab`` and a mistyped verb answer from the table alone, without importing any verb
(nor torch). The table imports nothing, and no verb imports it: the package's loader
(``attnlab.cli``) reads it and hands each verb its line.
"""

VERBS = {
    "explain": "walk through a mechanism step by step with its actual numbers",
    "verify": "check the claims of worked examples: exact, rounding drift, another convention, another step or wrong",
    "view": "write a self-contained HTML viewer (or PNG/SVG) of attention weights",
    "train": "train a model (a checkpoint folder is written); train --recipe NAME: a shipped model's recipe",
    "experiment": "run an experiment: train, evaluate, write a table and plots",
    "translate": "translate with a trained seq2seq checkpoint and show the alignment",
    "evaluate": "score a seq2seq checkpoint: exact match, BLEU, chrF, by source length",
    "generate": "sample text from a trained language model (attnlab train lm)",
    "caption": "caption an image with a trained captioner and draw its attention per word",
    "plot-run": "draw a training run's loss and validation curves (metrics.jsonl)",
    "interpret": "attention rollout or attention flow over all layers (Abnar & Zuidema 2020)",
    "check": "check your own attention function against the contract (masks, NaN, empty input, values)",
    "pretrained": "the models that ship trained: list them, read a model card, its folder or its recipe",
}
