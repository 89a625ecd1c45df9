"""The keyword arguments of the hub methods (:meth:`harness.models.Classifier.save_pretrained`, ``push_to_hub`` and
``from_pretrained``, through huggingface_hub's ``ModelHubMixin``), checked before any work: an argument the method
would drop without a word is refused (:func:`check_save_options`, :func:`check_load_options`)."""

from __future__ import annotations


def save_options() -> "tuple[list[str], list[str]]":
    """``(accepted, push_only)``: the keyword arguments ``save_pretrained`` takes (huggingface_hub's
    ``ModelHubMixin.save_pretrained`` and the ``push_to_hub`` options it passes on; not ``config``: an export writes its
    own ``config.json``), and those of them that only act with ``push_to_hub=True``."""
    import inspect

    from huggingface_hub import ModelHubMixin

    kinds = (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    methods = (ModelHubMixin.save_pretrained, ModelHubMixin.push_to_hub)
    accepted = {p.name for m in methods for p in inspect.signature(m).parameters.values() if p.kind in kinds}
    accepted -= {"self", "save_directory", "config"}
    return sorted(accepted), sorted(accepted - {"push_to_hub", "model_card_kwargs"})


def check_save_options(options: dict, what: str) -> None:
    """Refuse, before any work, keyword arguments ``save_pretrained`` would drop without a word: unknown names (a typo
    such as ``push_to_hb=True``), and hub options (``repo_id``, ``commit_message``...) without ``push_to_hub=True``.

    Raises:
        ValueError: naming ``what`` (e.g. ``"export_run"``), the arguments and the accepted ones.
    """
    accepted, push_only = save_options()
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise ValueError(
            f"{what} got unknown keyword argument(s) {', '.join(unknown)}: it takes {', '.join(accepted)} "
            "(save_pretrained's and push_to_hub's); check the spelling"
        )
    unused = sorted(k for k in options if k in push_only)
    if unused and not options.get("push_to_hub"):
        raise ValueError(
            f"{what}: {', '.join(unused)} only act with push_to_hub=True (they say how to push to the hub): add "
            "push_to_hub=True, or leave them out"
        )


#: what huggingface_hub itself may pass to ``_from_pretrained`` beside its download options: the stored
#: ``config.json`` (decoded), given to classes whose ``__init__`` takes a ``config``; the harness reads it from the
#: folder (:func:`harness.hub.read_export`)
HUB_PASSED = ("config",)


def check_load_options(options: dict) -> None:
    """Refuse, before any file is read, keyword arguments ``Classifier.from_pretrained`` would drop without a word
    (``num_classes=5``, ``head=...``, ``strict=False``, a typo): the export is loaded as it was saved.

    Raises:
        ValueError: naming the arguments, what the method takes and the fix.
    """
    unknown = sorted(set(options) - set(HUB_PASSED))
    if unknown:
        raise ValueError(
            f"Classifier.from_pretrained got keyword argument(s) {', '.join(unknown)} it does not read: it loads the "
            "export as it was saved and takes only huggingface_hub's options (revision, cache_dir, force_download, "
            "local_files_only, token) and map_location; for another number of classes or another head, load it and "
            "give it a new head (harness.models.replace_head(model, num_classes=K, covariance=...))"
        )
