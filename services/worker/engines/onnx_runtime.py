"""ONNX Runtime engine: providers TensorRT EP -> CUDA EP -> CPU per model.yaml; IOBinding on GPU."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from infra.models.config import EngineConfig, ModelConfig, Provider
from infra.models.repository import ModelVersion
from schemas.errors import EngineError
from schemas.tensors import Arrays
from services.worker.engines.base import Engine, EngineInfo
from services.worker.engines.inputs import check_inputs, fixed_batch, in_fixed_batches
from services.worker.engines.shapes import profiles

log = logging.getLogger(__name__)

PROVIDER_NAMES: dict[Provider, str] = {
    "tensorrt": "TensorrtExecutionProvider",
    "cuda": "CUDAExecutionProvider",
    "cpu": "CPUExecutionProvider",
}
GPU_PROVIDERS = frozenset({"TensorrtExecutionProvider", "CUDAExecutionProvider"})
ProviderOptions = dict[str, str]


def _ort_type(dtype: str) -> str:
    """ONNX Runtime's name of a wire dtype, as in `NodeArg.type` (`tensor(float)`)."""
    names = {"float32": "float", "float64": "double", "float16": "float16"}
    return f"tensor({names.get(dtype, dtype)})"


def _shape_list(shapes: Mapping[str, tuple[int, ...]]) -> str:
    """TensorRT EP's profile syntax: `name:1x32,other:1x32`."""
    return ",".join(f"{name}:{'x'.join(str(d) for d in shape)}" for name, shape in shapes.items())


def trt_cache_dir(model: ModelVersion) -> Path:
    """Where the TensorRT EP keeps this version's engines (it keys files by GPU itself)."""
    base = Path(model.config.engine.engine_cache_dir).expanduser()
    return base / "ort-trt" / f"{model.name}-{model.version}"


def provider_options(model: ModelVersion, provider: Provider) -> ProviderOptions:
    """The options one provider gets: derived from model.yaml, then `engine.provider_options`."""
    engine: EngineConfig = model.config.engine
    options: dict[str, Any] = {}
    if provider == "tensorrt":
        shapes = profiles(model.config)
        options = {
            "device_id": engine.device_id,
            "trt_fp16_enable": engine.fp16,
            "trt_engine_cache_enable": True,
            "trt_engine_cache_path": str(trt_cache_dir(model)),
            "trt_timing_cache_enable": True,
            "trt_timing_cache_path": str(trt_cache_dir(model)),
            "trt_profile_min_shapes": _shape_list({n: p.min for n, p in shapes.items()}),
            "trt_profile_opt_shapes": _shape_list({n: p.opt for n, p in shapes.items()}),
            "trt_profile_max_shapes": _shape_list({n: p.max for n, p in shapes.items()}),
        }
        if engine.workspace_mb is not None:
            options["trt_max_workspace_size"] = engine.workspace_mb * 1024 * 1024
    elif provider == "cuda":
        options = {
            "device_id": engine.device_id,
            "arena_extend_strategy": "kSameAsRequested",
            "cudnn_conv_algo_search": "HEURISTIC",
            "do_copy_in_default_stream": True,
        }
    options.update(engine.provider_options.get(provider, {}))
    # ORT's Python binding takes strings; booleans as "True"/"False" are accepted for both EPs.
    return {key: str(value) for key, value in options.items()}


class OnnxRuntimeEngine(Engine):
    """One `onnxruntime.InferenceSession` on the first configured provider that is available."""

    def __init__(self, model: ModelVersion, *, io_binding: bool | None = None) -> None:
        super().__init__(model)
        self._io_binding_override = io_binding
        self._session: Any = None
        self._info: EngineInfo | None = None
        self._use_io_binding = False
        self._output_names: list[str] = []
        self._fixed_batch: int | None = None
        """The batch the graph's inputs are fixed to ([1, 16], not [N, 16]), if any: a batch
        is run that many samples at a time."""

    @property
    def info(self) -> EngineInfo:
        if self._info is None:
            raise EngineError("engine is not loaded", model=self.model.name)
        return self._info

    @property
    def providers(self) -> list[str]:
        """Providers of the live session, in the order ONNX Runtime will use them."""
        return list(self._session.get_providers()) if self._session is not None else []

    def _requested(
        self, available: list[str]
    ) -> tuple[list[tuple[str, ProviderOptions]], list[str]]:
        chosen: list[tuple[str, ProviderOptions]] = []
        missing: list[str] = []
        for provider in self.model.config.engine.providers:
            name = PROVIDER_NAMES[provider]
            if name in available:
                chosen.append((name, provider_options(self.model, provider)))
            else:
                missing.append(name)
        return chosen, missing

    def load(self) -> None:
        import onnxruntime as ort

        config = self.model.config
        path = self.model.model_file
        if not path.is_file():
            raise EngineError(f"model file {path} does not exist", model=self.model.name)
        available = list(ort.get_available_providers())
        chosen, missing = self._requested(available)
        if not chosen:
            raise EngineError(
                f"none of the configured providers {config.engine.providers} is available in "
                f"this onnxruntime (it has {available}); add 'cpu' to engine.providers or "
                "install the gpu extra",
                model=self.model.name,
            )
        if any(name == "TensorrtExecutionProvider" for name, _ in chosen):
            trt_cache_dir(self.model).mkdir(parents=True, exist_ok=True)

        options = ort.SessionOptions()
        options.intra_op_num_threads = config.engine.intra_op_num_threads
        options.inter_op_num_threads = 1
        if not config.engine.intra_op_spinning:
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.log_severity_level = 3  # our own log line reports the fallback; ORT's are noise
        try:
            session = ort.InferenceSession(
                str(path),
                sess_options=options,
                providers=[name for name, _ in chosen],
                provider_options=[opts for _, opts in chosen],
            )
        except Exception as exc:  # ORT raises its own pybind classes (InvalidProtobuf, Fail, ...)
            raise EngineError(
                f"cannot load {path}: {type(exc).__name__}: {exc}".strip(), model=self.model.name
            ) from exc

        ran = session.get_providers()[0]
        requested = [PROVIDER_NAMES[p] for p in config.engine.providers]
        if ran != requested[0]:
            skipped = requested[: requested.index(ran)] if ran in requested else requested
            reasons = [
                f"{name}({'not in onnxruntime' if name in missing else 'failed to start'})"
                for name in skipped
            ]
            log.warning(
                "event=provider_fallback model=%s version=%s requested=%s skipped=%s running=%s",
                self.model.name,
                self.model.version,
                ",".join(requested),
                ",".join(reasons),
                ran,
            )
        self._fixed_batch = self._check_signature(session, config)
        self._session = session
        # The declared outputs only: a graph output left out of model.yaml (a constant,
        # a debug tensor) is neither computed nor split per request.
        self._output_names = [spec.name for spec in config.outputs]
        self._use_io_binding = (
            self._io_binding_override
            if self._io_binding_override is not None
            else ran in GPU_PROVIDERS
        )
        self._info = EngineInfo(backend="onnxruntime", provider=ran)

    def _check_signature(self, session: Any, config: ModelConfig) -> int | None:
        """model.yaml and the ONNX graph must agree on input names, dtypes, ranks and fixed
        sizes, and on output names and dtypes; returns the graph's fixed batch, if any."""
        graph_inputs = {arg.name: arg for arg in session.get_inputs()}
        graph_outputs = {arg.name: arg for arg in session.get_outputs()}
        declared = {spec.name for spec in config.inputs}
        problems: list[str] = []
        fixed: int | None = None
        try:
            fixed = fixed_batch({name: arg.shape for name, arg in graph_inputs.items()})
        except EngineError as exc:
            problems.append(exc.message)
        for name in sorted(set(graph_inputs) - declared):
            problems.append(f"graph input {name!r} is not declared in model.yaml")
        for spec in config.inputs:
            arg = graph_inputs.get(spec.name)
            if arg is None:
                problems.append(f"input {spec.name!r} is not in the graph ({sorted(graph_inputs)})")
                continue
            if arg.type != _ort_type(spec.dtype):
                problems.append(
                    f"input {spec.name!r}: model.yaml says {spec.dtype}, graph {arg.type}"
                )
            if len(arg.shape) != len(spec.shape):
                problems.append(
                    f"input {spec.name!r}: model.yaml rank {len(spec.shape)}, graph {arg.shape}"
                )
                continue
            # ORT refuses any other size on an axis the graph fixes: every request sent by
            # model.yaml's shape would fail in the engine, as `internal_error`.
            for axis, (want, got) in enumerate(zip(spec.shape, arg.shape, strict=True)):
                if axis > 0 and isinstance(got, int) and got > 0 and want != got:
                    problems.append(
                        f"input {spec.name!r} axis {axis}: model.yaml says {want}, the graph "
                        f"fixes {got} (write {got})"
                    )
        for spec in config.outputs:
            out = graph_outputs.get(spec.name)
            if out is None:
                problems.append(
                    f"output {spec.name!r} is not in the graph ({sorted(graph_outputs)})"
                )
            elif out.type != _ort_type(spec.dtype):
                problems.append(
                    f"output {spec.name!r}: model.yaml says {spec.dtype}, graph {out.type}"
                )
        if problems:
            raise EngineError(
                f"{self.model.model_file} does not match model.yaml: " + "; ".join(problems),
                model=self.model.name,
            )
        return fixed

    def warmup(self, batches: list[Arrays]) -> None:
        """Run each sample batch once, then give the CPU arena back to the system.

        The largest warmup batch grows ONNX Runtime's CPU arena to its peak, and an arena
        keeps what it took: a demo-encoder worker held ~620 MB from its 32 x 512 warmup
        (every tier's worker the same) while serving 32-token requests. The last warmup run
        shrinks the arena ("memory.enable_memory_arena_shrinkage"): idle ~110 MB, and the
        first batch that needs more allocates again (32 x 512: ~15 % slower once).
        """
        import onnxruntime as ort

        super().warmup(batches)
        if not batches or self._session is None:
            return
        smallest = min(batches, key=lambda batch: sum(array.size for array in batch.values()))
        shrink = ort.RunOptions()
        shrink.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")
        self._run(smallest, shrink)

    def infer(self, inputs: Mapping[str, np.ndarray[Any, Any]]) -> Arrays:
        return self._run(inputs)

    def _run(self, inputs: Mapping[str, np.ndarray[Any, Any]], options: Any = None) -> Arrays:
        """One batch through the session (IOBinding or plain), with ORT's `RunOptions`."""
        if self._session is None:
            raise EngineError("engine is not loaded", model=self.model.name)
        feed = check_inputs(self.model.config, inputs)
        if self._fixed_batch is None:
            return self._run_once(feed, options)
        return in_fixed_batches(
            feed,
            self._fixed_batch,
            lambda chunk: self._run_once(chunk, options),
            self._output_names,
        )

    def _run_once(self, feed: Arrays, options: Any = None) -> Arrays:
        try:
            if self._use_io_binding:
                return self._run_bound(feed, options)
            values = self._session.run(self._output_names, feed, options)
        except Exception as exc:  # ORT's pybind errors carry no common base we can name
            raise EngineError(
                f"onnxruntime failed: {type(exc).__name__}: {exc}", model=self.model.name
            ) from exc
        return dict(zip(self._output_names, values, strict=True))

    def _run_bound(self, feed: Arrays, options: Any = None) -> Arrays:
        """IOBinding: inputs copied to the device once, outputs allocated there, then fetched."""
        import onnxruntime as ort

        provider = self.info.provider
        device = "cuda" if provider in GPU_PROVIDERS else "cpu"
        device_id = self.model.config.engine.device_id if device == "cuda" else 0
        binding = self._session.io_binding()
        for name, array in feed.items():
            value = ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(array), device, device_id)
            binding.bind_ortvalue_input(name, value)
        for name in self._output_names:
            binding.bind_output(name, device, device_id)
        self._session.run_with_iobinding(binding, options)
        values = binding.copy_outputs_to_cpu()
        return dict(zip(self._output_names, values, strict=True))

    def unload(self) -> None:
        self._session = None
