"""A scene grid of one cell (the whole canvas) is allowed; zero cells and a canvas that the cells do
not divide are refused with the message that names both numbers."""

from __future__ import annotations

import pytest

from attnlab.data.scenes import SceneConfig


def test_one_cell_is_a_grid():
    SceneConfig(canvas=48, cells=1, min_objects=1, max_objects=1).validate()


@pytest.mark.parametrize(("canvas", "cells"), [(48, 0), (48, 5)])
def test_cells_that_do_not_divide_the_canvas_are_refused(canvas, cells):
    with pytest.raises(ValueError) as e:
        SceneConfig(canvas=canvas, cells=cells, min_objects=1, max_objects=1).validate()
    assert str(e.value) == f"canvas {canvas} must be a multiple of cells {cells}"
