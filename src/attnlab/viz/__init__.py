"""attnlab.viz: draw attention weights (matplotlib) and write an offline interactive viewer (HTML).

* ``heatmap``, ``head_grid``, ``alignment``, ``pattern``, ``spatial_overlay``, ``save`` (PNG/SVG)
* ``viewer.write_html(data, path)``: a self-contained page (all script inline, no network)
* ``from_transformers(outputs, tokens)``: a Hugging Face model's attention as viewer data (``hf`` extra)
* ``fonts.use_cjk_font()``: Chinese labels render with a CJK font, or a warning says what to install

The plotting functions import matplotlib (the ``viz`` extra) when called; the
viewer needs nothing beyond the standard library.
"""

from .heatmap import alignment, head_grid, heatmap, pattern, save, spatial_overlay
from .hf import from_transformers
from .viewer import View, from_example, load_json, write_html

__all__ = ["heatmap", "head_grid", "alignment", "pattern", "spatial_overlay", "save", "write_html",
           "from_example", "load_json", "from_transformers", "View"]
