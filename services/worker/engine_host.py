"""The worker's engine: loaded and warmed once, run in one thread, swapped on a new version.

One thread runs the engine, so batches queue behind each other and never overlap; a new
version (a newer folder, or the one the rollout now names) is loaded and warmed beside the
old one, then switched in between batches.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from infra.models.config import ModelConfig
from infra.models.lookups import merged_limits, model_lookup_rows
from infra.models.repository import ModelRepository, ModelVersion
from infra.processes import name_this_thread
from schemas.errors import InferbusError
from schemas.tensors import DTYPES, Arrays
from services.worker.engines.base import Engine
from services.worker.engines.shapes import warmup_batches
from services.worker.execution import RequestOutcome, run_batch
from services.worker.inhand import Tokenize

log = logging.getLogger(__name__)
ENGINE_THREAD = "inferbus-engine"
"""The engine thread's OS name: per-thread CPU counters tell it from the event loop."""
EngineFactory = Callable[[ModelVersion], Engine]
WantedVersion = Callable[[], str | None]
"""() -> the version to serve now; None: the newest complete one."""


def default_engine_factory(model: ModelVersion) -> Engine:
    """The engine the model's config asks for."""
    from services.worker.engines.factory import create_engine

    return create_engine(model)


def input_rules_for(version: ModelVersion) -> tuple[Tokenize | None, dict[str, int]]:
    """The model's text tokenizer (None for a model that takes tensors only) and the limits
    of the inputs it reads as table rows: {input: rows}, from the tokenizer's vocabulary
    and the graph's lookups."""
    takes_integers = any(DTYPES[spec.dtype].kind in "iu" for spec in version.config.inputs)
    # Parsing the graph costs ~0.2 s of a worker's start for MiniLM: only where it can tell.
    graph_limits = model_lookup_rows(version.model_file) if takes_integers else {}
    tokenizer_config = version.config.tokenizer
    if tokenizer_config is None:
        return None, graph_limits
    from infra.models.tokenize import TextTokenizer

    tokenizer = TextTokenizer.for_model(version)
    vocabulary = {tokenizer_config.input_ids: tokenizer.vocab_size}
    return tokenizer.encode, merged_limits(vocabulary, graph_limits)


@dataclass(frozen=True)
class Ran:
    """One batch as the engine ran it."""

    outcomes: list[RequestOutcome]
    start_ns: int
    """Wall-clock time the engine thread started it (a batch may queue behind another)."""
    engine: Engine
    version: ModelVersion


def _timed_run_batch(*args: Any) -> tuple[int, list[RequestOutcome]]:
    return time.time_ns(), run_batch(*args)


class EngineHost:
    """The engine session of one model, its version, and the thread that runs it."""

    def __init__(
        self,
        repository: ModelRepository,
        model: str,
        *,
        pinned_version: str | None = None,
        wanted: WantedVersion | None = None,
        engine_factory: EngineFactory = default_engine_factory,
    ) -> None:
        self.repository = repository
        self.model = model
        self.pinned_version = pinned_version
        self.wanted = wanted
        """Followed when not pinned (the rollout's version for this worker's lane)."""
        self.engine_factory = engine_factory
        self.engine: Engine | None = None
        self.version: ModelVersion | None = None
        self.tokenize: Tokenize | None = None
        self.index_limits: dict[str, int] = {}
        """{input: rows of the table the model reads it as}: values sent are checked."""
        self.load_s: float | None = None
        self.warmup_s: float | None = None
        self._thread = ThreadPoolExecutor(
            max_workers=1,
            thread_name_prefix="engine",
            initializer=name_this_thread,
            initargs=(ENGINE_THREAD,),
        )
        self._lock = asyncio.Lock()
        self._runs: set[asyncio.Future[Any]] = set()

    def target(self) -> str | None:
        """The version to serve: pinned, else the wanted one; None: the newest complete."""
        if self.pinned_version is not None:
            return self.pinned_version
        return self.wanted() if self.wanted is not None else None

    async def load(self, *, on_warming: Callable[[], Awaitable[None]]) -> None:
        """Load the target version, then warm it up on real shapes.

        Without a target (not pinned, no rollout), the newest complete version that loads:
        a newest one that cannot (a graph that no longer matches model.yaml) is refused,
        logged, and the one before it tried, which the running workers keep serving (they
        refuse it too). A worker started then, by a scale-out or a restart, crash-looped
        on it instead. The newest one's error is raised when none loads."""
        target = self.target()
        if target is not None:
            await self._load(self.repository.resolve(self.model, target), on_warming)
            return
        names = self.repository.versions(self.model)
        if not names:
            self.repository.resolve(self.model, None)  # raises, saying why
        newest_error: InferbusError | None = None
        for name in reversed(names):
            try:
                await self._load(self.repository.resolve(self.model, name), on_warming)
            except InferbusError as exc:
                newest_error = newest_error or exc
                log.error(
                    "event=version_refused model=%s version=%s error=%s (trying the one before it)",
                    self.model,
                    name,
                    exc,
                )
                continue
            if newest_error is not None:
                log.warning(
                    "event=serving_older_version model=%s version=%s newest=%s",
                    self.model,
                    name,
                    names[-1],
                )
            return
        assert newest_error is not None
        raise newest_error

    async def _load(self, version: ModelVersion, on_warming: Callable[[], Awaitable[None]]) -> None:
        engine = self.engine_factory(version)
        started = time.perf_counter()
        await asyncio.to_thread(engine.load)
        try:
            self.load_s = time.perf_counter() - started
            await on_warming()
            tokenize, index_limits = await asyncio.to_thread(input_rules_for, version)
            started = time.perf_counter()
            await asyncio.to_thread(engine.warmup, warmup_batches(version.config, index_limits))
        except BaseException:
            await asyncio.to_thread(engine.unload)  # a version refused at warm-up is let go
            raise
        self.warmup_s = time.perf_counter() - started
        self.tokenize, self.index_limits = tokenize, index_limits
        self.engine, self.version = engine, version

    async def run(
        self, requests: Sequence[Arrays], samples: Sequence[int], pad_length: int | None
    ) -> Ran:
        """Run one batch in the engine thread (behind any batch already there)."""
        async with self._lock:  # a version switch swaps engines under this lock
            engine, version = self.engine, self.version
            assert engine is not None and version is not None
            future = asyncio.get_running_loop().run_in_executor(
                self._thread,
                _timed_run_batch,
                engine.infer,
                requests,
                samples,
                version.config,
                pad_length,
            )
            self._runs.add(future)
        try:
            start_ns, outcomes = await future
        finally:
            self._runs.discard(future)
        return Ran(outcomes, start_ns, engine, version)

    async def reload_loop(self, every_s: float, on_switched: Callable[[], Awaitable[None]]) -> None:
        """Switch when the target changes (a newer complete version, or the rollout names
        another); a version that fails to load is refused, the old one keeps serving, until
        model.yaml changes (a version 2 that adds an input loads once model.yaml declares
        it: refused for good, the worker kept serving version 1 against a model.yaml whose
        inputs it no longer took, so every request was refused by ingest or by it).
        A switch `on_switched` failed to tell (the broker away) is told again each round."""
        if self.pinned_version is not None or every_s <= 0:
            return
        refused: dict[str, ModelConfig | None] = {}
        """Version → the model.yaml it was refused under."""
        untold = False
        while True:
            await asyncio.sleep(every_s)
            if untold:
                untold = not await self._tell(on_switched)
            newest = self.target()
            if newest is None:
                versions = self.repository.versions(self.model)
                newest = versions[-1] if versions else None
            current = self.version.version if self.version else None
            if newest is None or newest == current:
                continue
            if newest in refused and refused[newest] == self._config_now():
                continue
            try:
                await self.switch_to(newest)
            except Exception as exc:  # the old version keeps serving; logged, not raised
                refused[newest] = self._config_now()
                log.error(
                    "event=reload_refused model=%s version=%s keeping=%s error=%r",
                    self.model,
                    newest,
                    current,
                    exc,
                )
                continue
            untold = not await self._tell(on_switched)

    def _config_now(self) -> ModelConfig | None:
        """model.yaml as it reads now; None while it cannot be read."""
        try:
            return self.repository.config(self.model)
        except InferbusError:
            return None

    async def _tell(self, on_switched: Callable[[], Awaitable[None]]) -> bool:
        """Run `on_switched`; False (said) when it raised, so the loop tries again."""
        try:
            await on_switched()
        except Exception as exc:  # the new version serves; only the telling is retried
            log.error(
                "event=switch_untold model=%s version=%s error=%r (retried next round)",
                self.model,
                self.version.version if self.version else None,
                exc,
            )
            return False
        return True

    async def switch_to(self, version_name: str) -> None:
        """Load and warm `version_name` beside the running one, then swap between batches."""
        version = self.repository.resolve(self.model, version_name)
        engine = self.engine_factory(version)
        await asyncio.to_thread(engine.load)
        tokenize, index_limits = await asyncio.to_thread(input_rules_for, version)
        await asyncio.to_thread(engine.warmup, warmup_batches(version.config, index_limits))
        async with self._lock:
            old, self.engine, self.version = self.engine, engine, version
            self.tokenize, self.index_limits = tokenize, index_limits
            on_old = set(self._runs)
        if on_old:
            await asyncio.gather(*on_old, return_exceptions=True)
        if old is not None:
            await asyncio.to_thread(old.unload)
        log.info("event=version_switched model=%s version=%s", self.model, version_name)

    async def close(self) -> None:
        """Unload the engine and let its thread go (idempotent)."""
        engine, self.engine = self.engine, None
        if engine is not None:
            await asyncio.to_thread(engine.unload)
        self._thread.shutdown(wait=False)
