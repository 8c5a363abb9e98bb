"""The GPU path: Reinforce-Ada as a plugin to an unmodified verl 0.9.1 (registries and config only)."""
