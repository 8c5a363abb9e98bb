"""`python -m repro.verl_plugin.entry <hydra overrides>`: verl's own main, with the plugin imported first.

Registration happens by import; importing here covers the driver, and the runtime env variable
VERL_USE_EXTERNAL_MODULES (set by the config builder) covers every Ray worker process. The driver takes
the same environment the override list gives the Ray processes (`ray_kwargs.ray_init.runtime_env.env_vars.*`)
before verl is imported, so both sides register the same classes and pick the same platform (a CPU cell's
`VERL_PLATFORM=cpu`); a variable already set in the driver's environment wins.
"""

from __future__ import annotations

import os
import sys

from repro.overrides import runtime_env_vars


def hydra_output_dir(argv: list[str]) -> str | None:
    """Hydra's own output folder (its log and config copy): inside the run folder, beside `checkpoints/`,
    rather than `./outputs/<date>/<time>` in whatever directory the job was started from."""
    if any(item.startswith("hydra.run.dir=") for item in argv):
        return None
    for item in argv:
        key, sep, value = item.partition("=")
        if sep and key == "trainer.default_local_dir":
            return os.path.join(os.path.dirname(value.strip("'\"")), "hydra")
    return None


def main() -> None:
    for name, value in runtime_env_vars(sys.argv[1:]).items():
        os.environ.setdefault(name, value)
    output = hydra_output_dir(sys.argv[1:])
    if output:
        sys.argv.append(f"hydra.run.dir={output}")

    from verl.trainer.main_ppo import main as verl_main

    import repro.verl_plugin.register  # noqa: F401

    verl_main()


if __name__ == "__main__":
    main()
