"""Reports: :mod:`~harness.report.build` gathers the numbers of run and ensemble folders,
:mod:`~harness.report.render` writes Markdown and HTML, :mod:`~harness.report.figures` draws, and
:mod:`~harness.report.shift` is the distribution-shift section. Nothing here computes a metric."""
