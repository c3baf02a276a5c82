"""Writes the three tutorial notebooks (run: python docs/notebooks/make_notebooks.py).

The notebooks are kept without outputs; tests/test_docs.py executes each of them.
"""

from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = Path(__file__).parent

NOTEBOOKS = {
    "01-worked-examples.ipynb": [
        new_markdown_cell(
            "# The worked examples, computed\n\n"
            "The tutorials' worked examples, recomputed by attnlab step by step. Every number below comes "
            "from the reference path's trace (`attnlab.trace()`), the same numbers that `attnlab explain` prints."
        ),
        new_code_cell(
            "import torch\nfrom functools import partial\nimport attnlab\n\n"
            "h = torch.tensor([[0.2, 0.5], [0.3, 0.1], [-0.1, 0.4]])  # encoder states h_1..h_3\n"
            "s = torch.tensor([[0.6, -0.2]])                            # decoder state s_t\n"
            "score = partial(attnlab.scores.additive, w_q=torch.tensor([[0.1, 0.2], [0.3, 0.4]]),\n"
            "                w_k=torch.tensor([[0.5, 0.6], [0.7, 0.8]]), v=torch.tensor([1.0, 2.0]))\n"
            "with attnlab.trace() as steps:\n"
            "    context, weights = attnlab.attention(s, h, h, score=score, need_weights=True)\n"
            "for step in steps:\n"
            "    print(f'{step.name:16s} {step.formula:40s} {step.value.flatten().tolist()}')"
        ),
        new_markdown_cell("The first tutorial writes `score(s_t, h_2) = 1.32`; the computed value is:"),
        new_code_cell("round(steps['scores'].value[0, 1].item(), 4)"),
        new_markdown_cell("The whole walkthrough, with each written claim checked:"),
        new_code_cell(
            "from attnlab.cli import main\n"
            "main(['explain', 'additive', '--example', 'tutorial1-additive'])"
        ),
    ],
    "02-translator-alignments.ipynb": [
        new_markdown_cell(
            "# Train a translator and watch its alignments\n\n"
            "A small GRU encoder–decoder with Bahdanau attention learns to write numbers given in German "
            "words as English words. A few hundred steps take about a minute on a laptop CPU; this notebook "
            "trains for 60 steps only (the tests run it), so the alignments are still rough: raise `STEPS` "
            "to see them sharpen into the diagonal."
        ),
        new_code_cell(
            "import tempfile\nfrom attnlab.cli import main\n\n"
            "STEPS = 60\nrun = tempfile.mkdtemp() + '/de-en'\n"
            "main(['train', 'seq2seq', '--data', 'numbers-de-en', '--attention', 'bahdanau', '--n', '2000',\n"
            "      '--steps', str(STEPS), '--eval-every', str(STEPS), '--out', run, '--quiet'])"
        ),
        new_code_cell(
            "main(['translate', '--checkpoint', run, 'dreihundertzwölf', '--picture', run + '/alignment.png'])"
        ),
        new_code_cell(
            "from IPython.display import Image\nImage(run + '/alignment.png')"
        ),
    ],
    "03-viewer-inline.ipynb": [
        new_markdown_cell(
            "# The viewer, inline\n\n"
            "`attnlab.viz` renders attention weights as one self-contained HTML page; in a notebook it "
            "shows inline."
        ),
        new_code_cell(
            "import attnlab.explain as ex\nfrom attnlab.viz import from_example\nfrom attnlab.viz.viewer import render_html\n"
            "from IPython.display import HTML\n\n"
            "example = ex.load('tutorial2-multi-head')\ntrace = ex.run(example)\n"
            "HTML(render_html(from_example(example, trace)))"
        ),
    ],
}


def main() -> None:
    for name, cells in NOTEBOOKS.items():
        nb = new_notebook(cells=cells, metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}})
        nbformat.write(nb, HERE / name)


if __name__ == "__main__":
    main()
