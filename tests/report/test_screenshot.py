"""harness report --screenshot: the whole page, however tall (it kept only the top 2,400 px)."""

import shutil

import numpy as np
import pytest

pytestmark = pytest.mark.skipif(shutil.which("chromium") is None, reason="headless Chromium not installed")

#: a 6,000 px page: a red band at its very end, a figure (relative link) on the way
PAGE = """<!doctype html><html><head><meta charset="utf-8"><title>tall</title>
<style>body {{ margin: 0; }} .band {{ height: 200px; background: #d00; }}</style></head>
<body><div style="height: 2000px">top</div><img src="{img}" width="100" height="100" style="display: block">
<div style="height: 3700px">middle</div><div class="band"></div></body></html>"""


def test_the_screenshot_covers_the_whole_page(tmp_path):
    from PIL import Image

    from harness.report.browser import page_height, png_size, screenshot

    Image.new("RGB", (100, 100), (0, 0, 255)).save(tmp_path / "blue.png")
    (tmp_path / "page.html").write_text(PAGE.format(img="blue.png"))
    assert page_height(tmp_path / "page.html") == 6000
    png = screenshot(tmp_path / "page.html", tmp_path / "page.png")
    assert png_size(png) == (1200, 6000)
    img = np.asarray(Image.open(png).convert("RGB")).astype(int)
    assert img.shape == (6000, 1200, 3)
    red = (img[..., 0] > 200) & (img[..., 1] < 50) & (img[..., 2] < 50)
    assert red[-200:].all() and not red[:-200].any()  # the page's last 200 px, drawn where they belong
    blue = (img[..., 2] > 200) & (img[..., 0] < 50)
    assert blue[2000:2100, :100].all()  # the figure beside the page is found (the relative link resolves)


def test_png_size_refuses_other_files(tmp_path):
    from harness.report.browser import png_size

    (tmp_path / "x.png").write_bytes(b"GIF89a" + bytes(30))
    with pytest.raises(ValueError, match="not a PNG"):
        png_size(tmp_path / "x.png")


def test_layout_finds_tables_wider_than_the_window_and_the_first_figure(tmp_path):
    from PIL import Image

    from harness.report.browser import layout, overflowing_tables

    Image.new("RGB", (10, 10)).save(tmp_path / "f.png")
    cells = "".join(f"<td>cell{i}</td>" for i in range(8))
    wide = "".join(f"<td>{'w' * 40}{i}</td>" for i in range(40))  # unbreakable words: about 12,000 px
    (tmp_path / "p.html").write_text(
        "<!doctype html><html><head></head><body style='margin: 0'><nav>contents</nav>"
        f"<table><tr>{cells}</tr></table><div style='height: 1500px'></div><img src='f.png'>"
        f"<div style='overflow-x: auto'><table><tr>{wide}</tr></table></div></body></html>"
    )
    found = layout(tmp_path / "p.html", 1280, 900)
    assert found["nav"] and found["viewport"] == 1280 and len(found["tables"]) == 2
    assert 1500 <= found["first_figure"] < 1600  # the image after the 1,500 px block
    over = overflowing_tables(tmp_path / "p.html", 1280)
    assert [t["first"] for t in over] == ["w" * 40 + "0"] and over[0]["width"] > 5000  # the wide one, scrolled or not
