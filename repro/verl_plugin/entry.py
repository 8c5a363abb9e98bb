"""`python -m repro.verl_plugin.entry <hydra overrides>`: verl's own main, with the plugin imported first.

Registration happens by import; importing here covers the driver, and the runtime env variable
VERL_USE_EXTERNAL_MODULES (set by the config builder) covers every Ray worker process.
"""

from __future__ import annotations


def main() -> None:
    from verl.trainer.main_ppo import main as verl_main

    import repro.verl_plugin.register  # noqa: F401

    verl_main()


if __name__ == "__main__":
    main()
