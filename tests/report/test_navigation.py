"""A report to navigate: a bottom line, short headings with the whole title below, a table of contents whose links
reach the headings, the first figure before the long tables, long prose collapsed."""

from harness.report.page import html_table
from harness.report.render import MAX_HEADING, anchor, bottom_line, contents, heading, md_table

LONG = (
    "Temperature of the noisy heads: held-out NLL of each τ of the grid, seed 0, the chosen τ marked (the other "
    "seeds trained at it)"
)


def test_long_titles_become_short_headings_with_the_title_below():
    short, caption = heading(LONG)
    assert short == "Temperature of the noisy heads" and caption == LONG
    assert heading("Classes") == ("Classes", None)
    cut, _ = heading("x" * 30 + " " + "y" * 40 + " " + "z" * 10)  # no separator in reach: cut at a word
    assert cut.endswith("…") and len(cut) <= MAX_HEADING
    md = "\n".join(md_table(LONG, ["a"], [["1"]]))
    assert md.startswith("## Temperature of the noisy heads\n\n*Temperature of the noisy heads: held-out")
    html = html_table(LONG, ["a"], [["1"]])
    assert html.startswith(
        "<h2 id='temperature-of-the-noisy-heads'>Temperature of the noisy heads</h2><p class='caption'>"
    )


def test_the_contents_link_to_the_anchors_of_the_headings():
    line = contents([LONG, "Covariance ranks (paper Figure 2)"])[0]
    assert "[Temperature of the noisy heads](#temperature-of-the-noisy-heads)" in line
    assert f"(#{anchor('Covariance ranks (paper Figure 2)')})" in line and anchor(
        "Covariance ranks (paper Figure 2)"
    ) == ("covariance-ranks-paper-figure-2")


def test_the_bottom_line_states_the_primary_verdicts_and_which_are_fragile():
    rows = [
        {"comparison": "het − hom", "metric": "nll", "split": "heldout", "verdict": "better", "fragile": True},
        {"comparison": "diag − hom", "metric": "nll", "split": "heldout", "verdict": "no detectable difference"},
    ]
    assert bottom_line({"primary_endpoint": {"comparisons": rows}}) == (
        "Bottom line (primary endpoint, nll, heldout): het − hom better (fragile); diag − hom no detectable difference."
    )
    assert bottom_line({}) is None
