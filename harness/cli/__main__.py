"""``python -m harness.cli`` (:func:`harness.__main__.main`: a Ctrl-C outside a command ends with one line)."""

from harness.__main__ import main

main()
