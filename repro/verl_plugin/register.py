"""Imported in every Ray process (VERL_USE_EXTERNAL_MODULES) so verl's registries know our classes."""

from repro.verl_plugin import advantage  # noqa: F401  registers the "reinforce_ada" estimator
