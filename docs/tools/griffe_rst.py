"""A griffe extension for the API reference: the project's docstrings name other objects with Sphinx roles
(:func:`harness.uncertainty.metrics.ece`, :mod:`~harness.heads.het`), which Markdown would show verbatim; they are
shown as code (`harness.uncertainty.metrics.ece`, `het`). Loaded by mkdocs.yml (mkdocstrings' python handler)."""

from __future__ import annotations

import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:py:)?(?:mod|func|class|meth|data|attr|exc|obj|const|ref):`(~?)([^`]+)`")


def _plain(match: "re.Match[str]") -> str:
    short, target = match.group(1), match.group(2)
    return f"`{target.rsplit('.', 1)[-1] if short else target}`"


class RstRoles(griffe.Extension):
    """Sphinx cross-reference roles in docstrings as inline code."""

    def on_object(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = ROLE.sub(_plain, obj.docstring.value)
