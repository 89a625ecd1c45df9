"""Shared by the whole suite: this folder on ``sys.path`` (pytest's default ``prepend`` import mode puts
a conftest's folder there), so tests in the package folders (``tests/uncertainty/``, ...) import the
bad-input catalogue (``bad_inputs*.py``) beside this file."""

import os

# No test downloads: weights by name come from the local cache only (timm and huggingface_hub read this at call
# time; the harness no longer forces it, so a user with a network gets timm's downloads). A test that needs the
# online path sets it itself.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
