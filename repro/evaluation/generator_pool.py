"""`TransformersGenerator.generate` calls spread over worker processes, one torch thread and one model copy each.

The CPU generator runs one thread a process (the arithmetic pin), so on a machine with more cores the filter's
pass-count sampling used one of them. Each call carries its own seed and a worker computes it exactly as this
process would (spawned workers inherit the pinned environment), so the results are the same bits in the same
order, whichever worker computed them (tests/test_generator_pool.py)."""

from __future__ import annotations

import multiprocessing
import signal
from collections.abc import Iterator
from pathlib import Path

from repro import catalog

_GENERATOR = None  # the worker's own TransformersGenerator


def _start(model_path: str, max_new_tokens: int, template: str | None) -> None:
    global _GENERATOR
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle: it terminates the pool
    from repro.evaluation.transformers_generator import TransformersGenerator

    chosen = catalog.prompt_template(template) if template else None
    _GENERATOR = TransformersGenerator(Path(model_path), max_new_tokens, template=chosen)


def _generate(call: tuple[list[str], int, int]) -> list[list[str]]:
    return _GENERATOR.generate(*call)


class GeneratorPool:
    """`workers` processes, started on the first call that has work (a resumed filter with nothing left to
    sample starts none). Use as a context manager: leaving it stops the workers."""

    def __init__(
        self, workers: int, model_path: Path, max_new_tokens: int, template: catalog.PromptTemplate | None = None
    ) -> None:
        # a template goes by its catalog key (the record holds a mappingproxy, which does not pickle)
        self.workers, self.args = workers, (str(model_path), max_new_tokens, template.key if template else None)
        self._pool = None

    def generate_all(self, calls: list[tuple[list[str], int, int]]) -> Iterator[list[list[str]]]:
        """`generate(problems, n, seed)` of each call, yielded in the calls' order as they complete."""
        if not calls:
            return iter(())
        if self._pool is None:
            context = multiprocessing.get_context("spawn")  # no fork of a process that holds torch's threads
            self._pool = context.Pool(min(self.workers, len(calls)), initializer=_start, initargs=self.args)
        return self._pool.imap(_generate, calls)

    def generate(self, problems: list[str], n: int, seed: int) -> list[list[str]]:
        return next(iter(self.generate_all([(problems, n, seed)])))

    def __enter__(self) -> GeneratorPool:
        return self

    def __exit__(self, *exc) -> None:
        if self._pool is not None:
            self._pool.terminate()
            self._pool.join()
            self._pool = None
