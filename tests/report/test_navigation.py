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
    assert short == "Temperature of the noisy heads: held-out NLL of each τ of the grid" and caption == LONG
    assert heading("Classes") == ("Classes", None)
    cut, _ = heading("x" * 30 + " " + "y" * 40 + " " + "z" * 10)  # no separator in reach: cut at a word
    assert cut.endswith("…") and len(cut) <= MAX_HEADING
    md = "\n".join(md_table(LONG, ["a"], [["1"]]))
    assert md.startswith(f"## {short}\n\n*Temperature of the noisy heads: held-out")
    html = html_table(LONG, ["a"], [["1"]])
    assert html.startswith(f"<h2 id='{anchor(short)}'>{short}</h2><p class='caption'>")


def test_the_sections_of_one_condition_keep_distinct_headings():
    """The bracketed aside goes first: three tables of a condition were all headed 'Condition b_permuted'."""
    cond = "Condition b_permuted (B: noise from the class-permuted T_worse (heavy pairs moved onto dissimilar classes))"
    titles = [
        f"{cond}: Paired differences against hom, seed level (method − hom, seed i against seed i; 95% t-interval)",
        f"{cond}: Paired differences against hom, image level (difference of the seed-averaged metric, models fixed)",
    ]
    assert [heading(t)[0] for t in titles] == [
        "Condition b_permuted: Paired differences against hom, seed level",
        "Condition b_permuted: Paired differences against hom, image level",
    ]


def test_the_contents_link_to_the_anchors_of_the_headings():
    line = contents([LONG, "Covariance ranks (paper Figure 2)"])[0]
    short = heading(LONG)[0]
    assert f"[{short}](#{anchor(short)})" in line and anchor(short).startswith(
        "temperature-of-the-noisy-heads-held-out"
    )
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
