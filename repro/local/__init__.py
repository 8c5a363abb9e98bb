"""The CPU path: a tiny model trained with the same sampler, reward and run layout as the GPU path."""
