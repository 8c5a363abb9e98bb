"""A verl override list read back as values, without importing anything of verl's: the keys it sets (what the
launchers, the node check and the cell's config read), and the environment it hands to every Ray worker
(`ray_kwargs.ray_init.runtime_env.env_vars.*`), which the entry module sets in the driver, and the attempt
wrapper and the checkpoint retention read their settings from."""

from __future__ import annotations

from collections.abc import Iterable

ENV_PREFIX = "ray_kwargs.ray_init.runtime_env.env_vars."


def override_values(argv: Iterable[object]) -> dict[str, str]:
    """{key: value} of an override list, the key without Hydra's `+` and the value as written (quotes and all);
    the last of a key wins, and an item without `=` (Hydra's `~key`) sets nothing."""
    out = {}
    for item in argv:
        key, sep, value = str(item).lstrip("+").partition("=")
        if sep:
            out[key] = value
    return out


def runtime_env_vars(argv: list[str]) -> dict[str, str]:
    """The env vars an override list hands to Ray's runtime env, as Hydra will read their values."""
    out = {}
    for key, value in override_values(argv).items():
        if key.startswith(ENV_PREFIX):
            if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
                value = value[1:-1].replace("\\" + value[0], value[0])
            out[key[len(ENV_PREFIX) :]] = value
    return out
