"""Imported in every Ray process (VERL_USE_EXTERNAL_MODULES) so verl's registries know our classes.

verl imports these modules from its own `__init__`, so a Ray actor has them before its first line of verl
code: the TaskRunner actor has the "repro_sync" trainer registered before it calls `get_trainer_cls`.
"""

import os

from repro.verl_plugin import advantage  # noqa: F401  registers the "reinforce_ada" estimator

if os.environ.get("VERL_PLATFORM", "").strip().lower() == "cpu":
    # a CPU cell: the cpu platform first (it is next in VERL_USE_EXTERNAL_MODULES anyway), because importing
    # the trainer below imports verl's FSDP engine, which fixes its device name when first imported
    from repro.verl_plugin import cpu  # noqa: F401

# the save barrier's timeout (wraps the cpu platform's wrap, when there is one)
from repro.verl_plugin import dist_timeout  # noqa: F401, I001
from repro.verl_plugin import stop_trainer  # noqa: F401  registers the "repro_sync" trainer
