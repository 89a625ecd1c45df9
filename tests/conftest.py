"""Shared by the whole suite: this folder on ``sys.path`` (pytest's default ``prepend`` import mode puts
a conftest's folder there), so tests in the package folders (``tests/uncertainty/``, ...) import the
bad-input catalogue (``bad_inputs*.py``) beside this file."""
