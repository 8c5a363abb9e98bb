"""The environment a verl override list hands to every Ray worker (`ray_kwargs.ray_init.runtime_env.env_vars.*`),
read back from the list: the entry module sets it in the driver, and the attempt wrapper and the checkpoint
retention read their settings from it, without importing anything of verl's."""

from __future__ import annotations

ENV_PREFIX = "ray_kwargs.ray_init.runtime_env.env_vars."


def runtime_env_vars(argv: list[str]) -> dict[str, str]:
    """The env vars an override list hands to Ray's runtime env, as Hydra will read their values."""
    out = {}
    for item in argv:
        key, sep, value = item.lstrip("+").partition("=")
        if sep and key.startswith(ENV_PREFIX):
            if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
                value = value[1:-1].replace("\\" + value[0], value[0])
            out[key[len(ENV_PREFIX) :]] = value
    return out
