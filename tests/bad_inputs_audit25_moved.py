"""Bad inputs found by the twenty-fifth reliability audit in moved folders, stored OOD sets and exports
(``audit25 <case id>``): a moved project's ensemble and import folders, ``harness moved-data`` given a folder it does
not handle, an OOD set stored under its spec's text, and a run's model.pt re-saved with other preprocessing."""

from __future__ import annotations

from bad_inputs_audit22_runs import _image_folder_run

from bad_inputs import bad_input


# ------------------------------------------------------------------------------ A25-10: other preprocessing
@bad_input(
    "export",
    "harness.runs.export_run of a run whose model.pt was re-saved (a user's script) with the same weights and other "
    "input preprocessing (ImageNet's mean / std) (audit25 A25-10: rc 0, the export's card stated the run's metrics, "
    "measured with the harness's own normalisation)",
    ValueError,
    r"^runs/imf/model\.pt normalises its input otherwise than the model the run's metrics\.json and predictions "
    r"measured \(its config's preprocessing: mean None -> \[0\.485, 0\.456, 0\.406\], std None -> "
    r"\[0\.229, 0\.224, 0\.225\]; audit25 A25-10\): its metrics do not hold for it; put the run's own model\.pt back, "
    r"or save it again with the preprocessing it was measured with \(model\.config\.preprocessing = \{\}\), or train "
    r"the run again \(harness upstream with its config\.yaml\)$",
)
def _resaved_preprocessing(tmp):
    import torch

    from harness.models import load_model, save_model
    from harness.runs import export_run

    _image_folder_run(tmp)
    extra = torch.load(tmp / "runs/imf/model.pt", weights_only=True)["extra"]
    model = load_model(tmp / "runs/imf/model.pt")
    model.config.preprocessing.update({"mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]})
    save_model(model, tmp / "runs/imf/model.pt", extra=extra)
    export_run("runs/imf", tmp / "ex")
