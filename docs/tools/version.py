"""mkdocs hook: the installed package's version (its metadata, the one definition: pyproject.toml) in
``config.extra.version``, shown in the site header (docs/tools/overrides/main.html)."""

from importlib.metadata import PackageNotFoundError, version


def on_config(config):
    try:
        config.extra["version"] = version("het-harness")
    except PackageNotFoundError:  # building from a checkout that was not installed
        config.extra["version"] = "(not installed)"
    return config
