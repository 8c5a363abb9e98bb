"""Causal LMs on a CPU, below every engine that runs them: the tiny-arith model and its warm start, the registry
LLMs, the compact forward, the sampling loop and log-probs. The CPU trainer (repro.local), evaluation's
transformers backend and the data filter all sample through it, so none of them reaches into another."""
