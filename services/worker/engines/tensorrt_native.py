"""Native TensorRT engine: build (or load from cache) a serialized engine, run execute_async_v3.

Device memory and the stream come from cuda-python's `cudart` (no torch, no pycuda): one
device buffer per I/O tensor, sized for the profile's max shapes at load, reused per batch.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from infra.files import write_atomic
from infra.models.repository import ModelVersion
from schemas.errors import EngineError, InvalidInput
from schemas.tensors import DTYPES, Arrays
from services.worker.engines.base import Engine, EngineInfo
from services.worker.engines.inputs import check_inputs, fixed_batch, in_fixed_batches
from services.worker.engines.shapes import Profile, profiles, with_batch

log = logging.getLogger(__name__)

GPU_EXTRA_HINT = "install the gpu extra: pip install -e '.[gpu]'"


def import_tensorrt() -> Any:
    """The `tensorrt` module, or EngineError saying how to get it."""
    try:
        import tensorrt
    except ImportError as exc:
        raise EngineError(f"tensorrt not installed ({exc}); {GPU_EXTRA_HINT}") from exc
    return tensorrt


def import_cudart() -> Any:
    """cuda-python's runtime API (`cuda.bindings.runtime`, or `cuda.cudart` before 12.6)."""
    try:
        from cuda.bindings import runtime
    except ImportError:
        try:
            from cuda import cudart as runtime
        except ImportError as exc:
            raise EngineError(f"cuda-python not installed ({exc}); {GPU_EXTRA_HINT}") from exc
    return runtime


def _check(cudart: Any, result: Any, what: str) -> Any:
    """Unwrap a cudart call's `(err, *values)`; raise EngineError naming the call on failure."""
    err, *values = result
    if err != cudart.cudaError_t.cudaSuccess:
        _, text = cudart.cudaGetErrorString(err)
        raise EngineError(f"{what} failed: {text.decode(errors='replace')}", cuda_error=int(err))
    if not values:
        return None
    return values[0] if len(values) == 1 else tuple(values)


def file_sha256(path: Path) -> str:
    """Hex sha256 of a file, streamed."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


@dataclass(frozen=True)
class GpuIdentity:
    """What a serialized engine is only valid for: the GPU model and the TensorRT version."""

    name: str
    compute_capability: str
    tensorrt_version: str


def engine_cache_key(
    model_sha256: str, gpu: GpuIdentity, *, fp16: bool, shapes: Mapping[str, Profile]
) -> str:
    """Key of a serialized engine: model bytes, GPU, compute capability, TensorRT, build flags."""
    payload = {
        "model_sha256": model_sha256,
        "gpu": gpu.name,
        "compute_capability": gpu.compute_capability,
        "tensorrt": gpu.tensorrt_version,
        "fp16": fp16,
        "profiles": {
            name: [list(p.min), list(p.opt), list(p.max)] for name, p in sorted(shapes.items())
        },
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:24]


@dataclass
class _Binding:
    name: str
    dtype: np.dtype[Any]
    device_ptr: int
    capacity_bytes: int


class TensorRTEngine(Engine):
    """A TensorRT execution context with one optimization profile covering every bucket."""

    def __init__(self, model: ModelVersion) -> None:
        super().__init__(model)
        self._trt: Any = None
        self._cudart: Any = None
        self._engine: Any = None
        self._context: Any = None
        self._stream: Any = None
        self._inputs: dict[str, _Binding] = {}
        self._outputs: dict[str, _Binding] = {}
        self._shapes: dict[str, Profile] = {}
        self._fixed_batch: int | None = None
        """The batch the graph fixes ([1, 16], not [N, 16]), if any: a batch is run that
        many samples at a time, as onnxruntime runs it."""
        self._lock = threading.Lock()
        self._info: EngineInfo | None = None
        self.cache_file: Path | None = None
        self.cache_hit = False

    @property
    def info(self) -> EngineInfo:
        if self._info is None:
            raise EngineError("engine is not loaded", model=self.model.name)
        return self._info

    def load(self) -> None:
        trt = self._trt = import_tensorrt()
        cudart = self._cudart = import_cudart()
        path = self.model.model_file
        if not path.is_file():
            raise EngineError(f"model file {path} does not exist", model=self.model.name)
        engine_cfg = self.model.config.engine
        _check(cudart, cudart.cudaSetDevice(engine_cfg.device_id), "cudaSetDevice")
        props = _check(cudart, cudart.cudaGetDeviceProperties(engine_cfg.device_id), "properties")
        gpu = GpuIdentity(
            name=props.name.decode(errors="replace").rstrip("\x00"),
            compute_capability=f"{props.major}.{props.minor}",
            tensorrt_version=str(trt.__version__),
        )
        self._shapes = profiles(self.model.config)
        key = engine_cache_key(file_sha256(path), gpu, fp16=engine_cfg.fp16, shapes=self._shapes)
        cache_dir = Path(engine_cfg.engine_cache_dir).expanduser()
        self.cache_file = cache_dir / f"{self.model.name}-{self.model.version}-{key}.plan"

        logger = trt.Logger(trt.Logger.WARNING)
        runtime = trt.Runtime(logger)
        engine = None
        if self.cache_file.is_file():
            engine = runtime.deserialize_cuda_engine(self.cache_file.read_bytes())
            if engine is None:
                log.warning("event=trt_cache_unusable file=%s action=rebuild", self.cache_file)
        self.cache_hit = engine is not None
        if engine is None:
            started = time.perf_counter()
            plan = self._build(trt, logger, path)
            write_atomic(self.cache_file, plan)
            sidecar = {
                "model": self.model.name,
                "version": self.model.version,
                "gpu": gpu.name,
                "compute_capability": gpu.compute_capability,
                "tensorrt": gpu.tensorrt_version,
                "fp16": engine_cfg.fp16,
            }
            write_atomic(self.cache_file.with_suffix(".json"), json.dumps(sidecar).encode())
            log.info(
                "event=trt_engine_built model=%s version=%s seconds=%.1f file=%s",
                self.model.name,
                self.model.version,
                time.perf_counter() - started,
                self.cache_file,
            )
            engine = runtime.deserialize_cuda_engine(plan)
            if engine is None:
                raise EngineError(
                    "TensorRT could not deserialize the engine it just built", model=self.model.name
                )
        self._engine = engine
        names = [engine.get_tensor_name(i) for i in range(engine.num_io_tensors)]
        self._fixed_batch = fixed_batch(
            {
                name: tuple(engine.get_tensor_shape(name))
                for name in names
                if engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT
            },
            model=self.model.name,
        )
        if self._fixed_batch is not None:
            self._shapes = with_batch(self._shapes, self._fixed_batch)
        self._context = engine.create_execution_context()
        self._stream = _check(cudart, cudart.cudaStreamCreate(), "cudaStreamCreate")
        self._allocate(trt)
        self._info = EngineInfo(backend="tensorrt", provider=f"TensorRT {gpu.tensorrt_version}")

    def _build(self, trt: Any, logger: Any, path: Path) -> bytes:
        builder = trt.Builder(logger)
        network = builder.create_network(0)  # explicit batch is the only mode in TensorRT 10
        parser = trt.OnnxParser(network, logger)
        if not parser.parse_from_file(str(path)):
            errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
            raise EngineError(f"TensorRT cannot parse {path}: {errors}", model=self.model.name)
        config = builder.create_builder_config()
        engine_cfg = self.model.config.engine
        if engine_cfg.workspace_mb is not None:
            config.set_memory_pool_limit(
                trt.MemoryPoolType.WORKSPACE, engine_cfg.workspace_mb * 1024 * 1024
            )
        if engine_cfg.fp16:
            fp16 = getattr(trt.BuilderFlag, "FP16", None)
            if fp16 is None:
                raise EngineError(
                    f"TensorRT {trt.__version__} has no FP16 builder flag; set engine.fp16: false "
                    "or export the model in fp16",
                    model=self.model.name,
                )
            config.set_flag(fp16)
        graph = {
            network.get_input(i).name: tuple(network.get_input(i).shape)
            for i in range(network.num_inputs)
        }
        if any(dim < 0 for shape in graph.values() for dim in shape):
            # A profile covers the dynamic axes; a graph with none (a fixed batch and
            # sizes) takes no profile and runs `fixed_batch` samples at a time.
            batch = fixed_batch(graph, model=self.model.name)
            shapes = self._shapes if batch is None else with_batch(self._shapes, batch)
            profile = builder.create_optimization_profile()
            for name, shape in shapes.items():
                profile.set_shape(name, shape.min, shape.opt, shape.max)
            config.add_optimization_profile(profile)
        plan = builder.build_serialized_network(network, config)
        if plan is None:
            raise EngineError(
                "TensorRT failed to build the engine (see its log above)", model=self.model.name
            )
        return bytes(plan)

    def _allocate(self, trt: Any) -> None:
        """One device buffer per tensor, sized for the max profile shapes."""
        cudart, engine, context = self._cudart, self._engine, self._context
        names = [engine.get_tensor_name(i) for i in range(engine.num_io_tensors)]
        inputs = [n for n in names if engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT]
        for name in inputs:
            if name not in self._shapes:
                raise EngineError(
                    f"engine input {name!r} is not declared in model.yaml", model=self.model.name
                )
            if not context.set_input_shape(name, self._shapes[name].max):
                raise EngineError(
                    f"TensorRT refused input {name!r} at {list(self._shapes[name].max)}, the "
                    "largest shape model.yaml allows: model.yaml and the graph disagree",
                    model=self.model.name,
                )
        for name in names:
            dtype = np.dtype(trt.nptype(engine.get_tensor_dtype(name)))
            shape = tuple(context.get_tensor_shape(name))
            if any(dim < 0 for dim in shape):
                raise EngineError(
                    f"output {name!r} has a data-dependent shape {shape}", model=self.model.name
                )
            nbytes = max(int(np.prod(shape)) * dtype.itemsize, 1)
            ptr = int(_check(cudart, cudart.cudaMalloc(nbytes), f"cudaMalloc({name})"))
            binding = _Binding(name, dtype, ptr, nbytes)
            (self._inputs if name in inputs else self._outputs)[name] = binding
            context.set_tensor_address(name, ptr)

    def infer(self, inputs: Mapping[str, np.ndarray[Any, Any]]) -> Arrays:
        if self._context is None:
            raise EngineError("engine is not loaded", model=self.model.name)
        feed = check_inputs(self.model.config, inputs)
        if self._fixed_batch is None:
            return self._infer_once(feed)
        return in_fixed_batches(feed, self._fixed_batch, self._infer_once, list(self._outputs))

    def _infer_once(self, feed: Arrays) -> Arrays:
        """One batch through the execution context (the engine's lock held)."""
        cudart, context = self._cudart, self._context
        h2d = cudart.cudaMemcpyKind.cudaMemcpyHostToDevice
        d2h = cudart.cudaMemcpyKind.cudaMemcpyDeviceToHost
        with self._lock:
            for name, binding in self._inputs.items():
                # TensorRT may narrow int64 ids to int32; cast to what the engine holds
                host = np.ascontiguousarray(feed[name], dtype=binding.dtype)
                if host.nbytes > binding.capacity_bytes:
                    raise InvalidInput(
                        f"input {name!r} shape {list(host.shape)} exceeds the engine profile max "
                        f"{list(self._shapes[name].max)}",
                        model=self.model.name,
                    )
                if not context.set_input_shape(name, host.shape):
                    raise EngineError(
                        f"TensorRT rejected shape {list(host.shape)} for {name!r}",
                        model=self.model.name,
                    )
                _check(
                    cudart,
                    cudart.cudaMemcpyAsync(
                        binding.device_ptr, host.ctypes.data, host.nbytes, h2d, self._stream
                    ),
                    f"copy {name} to device",
                )
            results: Arrays = {}
            for name, binding in self._outputs.items():
                results[name] = np.empty(tuple(context.get_tensor_shape(name)), binding.dtype)
            if not context.execute_async_v3(int(self._stream)):
                raise EngineError("TensorRT execute_async_v3 failed", model=self.model.name)
            for name, binding in self._outputs.items():
                out = results[name]
                _check(
                    cudart,
                    cudart.cudaMemcpyAsync(
                        out.ctypes.data, binding.device_ptr, out.nbytes, d2h, self._stream
                    ),
                    f"copy {name} to host",
                )
            _check(cudart, cudart.cudaStreamSynchronize(self._stream), "cudaStreamSynchronize")
        declared = {spec.name: spec for spec in self.model.config.outputs}
        return {
            name: array.astype(DTYPES[declared[name].dtype], copy=False)
            if name in declared
            else array
            for name, array in results.items()
        }

    def unload(self) -> None:
        if self._cudart is None:
            return
        cudart = self._cudart
        with self._lock:
            for binding in [*self._inputs.values(), *self._outputs.values()]:
                _check(cudart, cudart.cudaFree(binding.device_ptr), f"cudaFree({binding.name})")
            self._inputs.clear()
            self._outputs.clear()
            if self._stream is not None:
                _check(cudart, cudart.cudaStreamDestroy(self._stream), "cudaStreamDestroy")
                self._stream = None
            self._context = None
            self._engine = None
