"""Fig. 14 worker heatmap: files written, annotations on small grids, bounded size on large."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from matplotlib.image import imread  # noqa: E402

from stragglerlab.figures.fig14_heatmap import plot_worker_heatmap  # noqa: E402
from stragglerlab.figures.style import MAX_FIGURE_WIDTH, save_figure, source_note  # noqa: E402

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _check_png(path, min_bytes=2_000):
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC
    assert len(data) > min_bytes
    img = imread(path)
    h, w = img.shape[:2]
    assert 100 < w < 4_000 and 100 < h < 4_000
    # Not blank: the image has more than one colour.
    assert np.ptp(img[..., :3]) > 0.2
    return img


def _cell_texts(fig):
    ax = fig.axes[0]
    return [t.get_text() for t in ax.texts]


def test_small_grid_is_annotated(tmp_path):
    scores = np.ones((4, 4))
    scores[0, 0] = 2.0
    scores[3, 1] = 1.234
    out = tmp_path / "hm.png"
    fig = plot_worker_heatmap(scores, out, title="AR", source="unit test")
    _check_png(out)
    texts = _cell_texts(fig)
    assert len(texts) == 16
    assert texts.count("1.00") == 14 and "2.00" in texts and "1.23" in texts
    ax = fig.axes[0]
    assert ax.get_xlabel() == "DP rank" and ax.get_ylabel() == "PP rank"
    # Stage 0 at the top: y axis inverted (imshow origin='upper').
    bottom, top = ax.get_ylim()
    assert bottom > top
    im = ax.images[0]
    assert im.norm.vmin == 1.0 and im.norm.vmax == 1.5
    cbar_axes = [a for a in fig.axes if a is not ax]
    assert cbar_axes and "min(S_dp, S_stage)" in (
        cbar_axes[0].get_xlabel() + cbar_axes[0].get_ylabel()
    )
    assert any(t.get_text() == "data: unit test" for t in fig.texts)


def test_large_dp_drops_annotations_and_stays_bounded(tmp_path):
    rng = np.random.default_rng(0)
    scores = 1.0 + np.abs(rng.normal(0, 0.05, size=(4, 1024)))
    scores[2, 700] = 1.8
    out = tmp_path / "big.png"
    fig = plot_worker_heatmap(scores, out, title="dp=1024")
    _check_png(out, min_bytes=10_000)
    assert _cell_texts(fig) == []
    assert fig.get_figwidth() <= MAX_FIGURE_WIDTH
    ticks = [t for t in fig.axes[0].get_xticks() if 0 <= t <= 1023]
    assert 3 <= len(ticks) <= 25


def test_nan_cells_and_1d_input(tmp_path):
    scores = np.array([[1.1, np.nan], [1.0, 1.6]])
    fig = plot_worker_heatmap(scores, tmp_path / "nan.png")
    assert len(_cell_texts(fig)) == 3
    fig = plot_worker_heatmap(np.array([1.0, 1.3]), tmp_path / "one")
    assert (tmp_path / "one.png").exists()
    assert _cell_texts(fig) == ["1.00", "1.30"]


def test_bad_shape_rejected(tmp_path):
    with pytest.raises(ValueError, match="pp_size, dp_size"):
        plot_worker_heatmap(np.ones((2, 2, 2)), tmp_path / "x.png")
    with pytest.raises(ValueError):
        plot_worker_heatmap(np.ones((0, 3)), tmp_path / "x.png")


def test_save_figure_png_and_pdf_atomic(tmp_path):
    from stragglerlab.figures.style import figure_style, new_figure

    with figure_style():
        fig = new_figure(3, 2)
        ax = fig.add_subplot()
        ax.plot([0, 1], [0, 1])
        assert source_note(ax, "") is None
        source_note(ax, "synthetic")
        paths = save_figure(fig, tmp_path / "sub" / "f.png", pdf=True)
    assert [p.name for p in paths] == ["f.png", "f.pdf"]
    assert paths[0].read_bytes()[:8] == PNG_MAGIC
    assert paths[1].read_bytes()[:5] == b"%PDF-"
    # No temporary files left behind.
    assert sorted(p.name for p in (tmp_path / "sub").iterdir()) == ["f.pdf", "f.png"]
