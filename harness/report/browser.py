"""A headless browser on a report's HTML: its page height and a screenshot (Chromium's ``--headless``), for the
checks that a report reads on a screen (the first figure within a few screens, no table wider than the page).
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Optional

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


#: the tallest screenshot taken (pixels): a page taller than this is cut here (1200 x 60000 RGBA is 288 MB)
MAX_SCREENSHOT_HEIGHT = 60_000

#: appended to a copy of the page by :func:`layout`: once the page has loaded, its layout as JSON in a meta tag (the
#: document's height; each table's width and right edge against the viewport's width, with its first header cell; the
#: top of the first image or inline SVG figure; whether a ``<nav>`` is there)
_MEASURE = (
    "<script>window.addEventListener('load', () => { const d = document.documentElement; "
    "const tables = [...document.querySelectorAll('table')].map((t) => { const r = t.getBoundingClientRect(); "
    "const h = t.querySelector('th, td'); const box = t.parentElement ? t.parentElement.clientWidth : d.clientWidth; "
    "return {width: Math.ceil(Math.max(r.width, t.scrollWidth)), right: Math.ceil(r.right + scrollX), box: box, "
    "first: h ? h.textContent.trim().slice(0, 60) : ''}; }); "
    "const fig = document.querySelector('img, svg, figure'); "
    "const out = {height: Math.ceil(Math.max(d.scrollHeight, document.body ? document.body.scrollHeight : 0)), "
    "viewport: d.clientWidth, tables: tables, nav: !!document.querySelector('nav'), "
    "first_figure: fig ? Math.floor(fig.getBoundingClientRect().top + scrollY) : null}; "
    "const m = document.createElement('meta'); m.name = 'harness-layout'; m.content = JSON.stringify(out); "
    "document.head.appendChild(m); });</script>"
)


def _chromium(args: "list[str]", what: str) -> "subprocess.CompletedProcess":
    """Run headless Chromium with ``args`` (after its fixed options) in a fresh profile; returns the finished
    process (its output as text).

    Raises:
        FileNotFoundError: no Chromium on PATH (``apt-get install chromium``).
        RuntimeError: the browser timed out (180 s); ``what`` names the step in the message.
    """
    import shutil
    import tempfile

    browser = next((shutil.which(b) for b in BROWSERS if shutil.which(b)), None)
    if browser is None:
        raise FileNotFoundError(
            "no Chromium found for the screenshot; install it (apt-get install chromium), or leave out --screenshot"
        )
    with tempfile.TemporaryDirectory() as profile:
        try:
            return subprocess.run(
                [
                    browser,
                    "--headless",
                    "--no-sandbox",
                    "--disable-gpu",
                    "--disable-dev-shm-usage",
                    "--disable-quic",
                    "--no-first-run",
                    "--disable-background-networking",
                    "--disable-component-update",
                    "--disable-sync",
                    f"--user-data-dir={profile}",
                    "--hide-scrollbars",
                    *args,
                ],
                capture_output=True,
                text=True,
                timeout=180,
            )
        except subprocess.TimeoutExpired as e:
            raise RuntimeError(f"Chromium took over 180 s to {what}") from e


def check_browser() -> None:
    """Check, before a report is built, that headless Chromium starts and renders a page (one line of HTML, about
    a second), so that ``--screenshot`` fails before the work rather than after it.

    Raises:
        FileNotFoundError: no Chromium on PATH (``apt-get install chromium``).
        RuntimeError: Chromium is there but renders nothing, naming the browser, its exit status and the last line
            of its error output, and the fixes (reinstall it, or leave out the screenshot).
    """
    import shutil

    probe = "data:text/html,<p>harness-probe</p>"
    proc = _chromium(["--dump-dom", probe], "render a one-line page")
    if "harness-probe" not in proc.stdout:
        browser = next(shutil.which(b) for b in BROWSERS if shutil.which(b))
        last = (proc.stderr.strip().splitlines() or ["(no error output)"])[-1][:300]
        raise RuntimeError(
            f"Chromium ({browser}) does not render pages (exit {proc.returncode}: {last}); reinstall it "
            "(apt-get install --reinstall chromium), or leave out --screenshot"
        )


def layout(html_path: "str | Path", width: int = 1280, height: int = 1000) -> dict:
    """How ``html_path`` lays out in a ``width`` x ``height`` window of headless Chromium (a copy of the page with a
    script that records it, opened once with ``--dump-dom``; its relative links resolve beside the page).

    Returns:
        ``{height, viewport, tables, nav, first_figure}``: the document's height and the viewport's width (CSS
        pixels); per table ``{width, right, box, first}`` (its width, its right edge on the page, the width of the
        element that holds it, its first cell's text);
        whether the page has a ``<nav>``; the top of its first image or SVG (None: none).

    Raises:
        FileNotFoundError: no Chromium on PATH.
        RuntimeError: the browser reported nothing.
    """
    import html
    import json
    import re
    import tempfile

    html_path = Path(html_path).resolve()
    text = html_path.read_text(errors="replace")
    base = f'<base href="{html_path.parent.as_uri()}/">'  # the copy's relative links point beside the page
    text = re.sub(r"(<head[^>]*>)", lambda m: m.group(1) + base, text, count=1, flags=re.I)
    end = text.lower().rfind("</body>")
    text = text[:end] + _MEASURE + text[end:] if end >= 0 else text + _MEASURE
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "measure.html"
        copy.write_text(text)
        proc = _chromium([f"--window-size={width},{height}", "--dump-dom", copy.as_uri()], "lay out the page")
    found = re.search(r'name="harness-layout" content="([^"]*)"', proc.stdout)
    if found is None:
        raise RuntimeError(
            f"Chromium reported no layout for {html_path} (exit {proc.returncode}): {proc.stderr[-1000:]}"
        )
    return json.loads(html.unescape(found.group(1)))


def page_height(html_path: "str | Path", width: int = 1200) -> int:
    """The height in CSS pixels of ``html_path`` laid out ``width`` pixels wide (its ``scrollHeight``,
    :func:`layout`).

    Raises:
        FileNotFoundError: no Chromium on PATH.
        RuntimeError: the browser reported no height.
    """
    return int(layout(html_path, width)["height"])


def overflowing_tables(html_path: "str | Path", width: int = 1280) -> "list[dict]":
    """The tables of ``html_path`` that do not fit a ``width``-pixel window (:func:`layout`): wider than the viewport
    or than the element that holds them (a table in a scrolling box scrolls), or reaching past the viewport's right
    edge; ``[]`` when every table fits."""
    found = layout(html_path, width)
    view = found["viewport"]
    return [t for t in found["tables"] if max(t["width"] - t["box"], t["width"] - view, t["right"] - view) > 1]


def screenshot(
    html_path: "str | Path", png_path: "str | Path", width: int = 1200, height: "Optional[int]" = None
) -> Path:
    """Render ``html_path`` in headless Chromium and save a PNG screenshot ``width`` pixels wide (a check that
    the page opens and draws its figures): the whole page (its height measured first, :func:`page_height`;
    at most :data:`MAX_SCREENSHOT_HEIGHT`), or its top ``height`` pixels.

    Raises:
        FileNotFoundError: no Chromium on PATH (``apt-get install chromium``).
        RuntimeError: the browser failed or wrote no image.
    """
    png_path = Path(png_path).resolve()
    if height is None:
        height = min(page_height(html_path, width), MAX_SCREENSHOT_HEIGHT)
    png_path.unlink(missing_ok=True)  # a stale image is not taken for this one
    proc = _chromium(
        [f"--screenshot={png_path}", f"--window-size={width},{height}", Path(html_path).resolve().as_uri()],
        "take the screenshot",
    )
    if not png_path.is_file() or png_path.stat().st_size == 0:
        raise RuntimeError(f"Chromium wrote no screenshot (exit {proc.returncode}): {proc.stderr[-1000:]}")
    return png_path


def png_size(path: "str | Path") -> "tuple[int, int]":
    """(width, height) in pixels of a PNG file, from its header."""
    import struct

    with open(path, "rb") as f:
        head = f.read(24)
    if head[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError(f"{path} is not a PNG file")
    return struct.unpack(">II", head[16:24])
