"""Find models and their versions on disk; a version is ready when its model file is complete."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from stat import S_ISREG

from infra.models.config import ModelConfig, ModelConfigError
from schemas.errors import ModelNotFound
from schemas.topics import is_legal_model_name

MODEL_FILE = "model.onnx"
READY_MARKER = "READY"
"""Optional marker a writer drops last; with it, a version folder is known complete."""


@dataclass(frozen=True)
class ModelVersion:
    """One loadable version of a model."""

    name: str
    version: str
    directory: Path
    config: ModelConfig

    @property
    def model_file(self) -> Path:
        return self.directory / MODEL_FILE


def _version_key(name: str) -> tuple[int, int | str]:
    return (0, int(name)) if name.isdigit() else (1, name)


class ModelRepository:
    """A folder of models: `<root>/<name>/model.yaml` and `<root>/<name>/<version>/model.onnx`."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self._configs: dict[Path, tuple[tuple[int, int], ModelConfig]] = {}
        """Parsed model.yaml files by (mtime_ns, size): workers and ingest re-read them
        every few seconds, and parsing YAML was most of an idle worker's CPU."""

    def names(self) -> list[str]:
        """Models with a model.yaml, sorted."""
        if not self.root.is_dir():
            return []
        return sorted(p.parent.name for p in self.root.glob("*/model.yaml"))

    def config(self, name: str) -> ModelConfig:
        """The validated config, or ModelNotFound / ModelConfigError."""
        # A name like `demo-mlp/` or `../x/demo-mlp` would otherwise find the folder and
        # then route to an illegal topic name, which the producer can never send to.
        path = self.root / name / "model.yaml"
        if not is_legal_model_name(name):
            raise ModelNotFound(f"model {name!r} is not in the repository", model=name)
        try:
            found = path.stat()
        except OSError:  # missing or unreadable: as good as absent
            found = None
        if found is None:
            raise ModelNotFound(f"model {name!r} is not in the repository", model=name)
        if not S_ISREG(found.st_mode):  # listed by `names()`: said, not "not in the repository"
            raise ModelConfigError(f"{path} is not a file", path=str(path))
        stamp = (found.st_mtime_ns, found.st_size)
        cached = self._configs.get(path)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        config = ModelConfig.load(path)
        self._configs[path] = (stamp, config)
        return config

    def versions(self, name: str) -> list[str]:
        """Complete versions, oldest first; a folder without its model file is skipped."""
        base = self.root / name
        if not is_legal_model_name(name) or not base.is_dir():
            return []
        found = [
            d.name
            for d in base.iterdir()
            if d.is_dir() and not d.name.startswith(".") and is_complete(d, self._engine_kind(name))
        ]
        return sorted(found, key=_version_key)

    def _engine_kind(self, name: str) -> str:
        try:
            return self.config(name).engine.kind
        except ModelConfigError:
            return "onnxruntime"

    def resolve(self, name: str, version: str | None = None) -> ModelVersion:
        """The named version, or the latest complete one; ModelNotFound otherwise."""
        config = self.config(name)
        versions = self.versions(name)
        if not versions:
            raise ModelNotFound(
                f"model {name!r} has no complete version folder{self._incomplete(name)}",
                model=name,
            )
        chosen = version or versions[-1]
        if chosen not in versions:
            raise ModelNotFound(
                f"model {name!r} has no version {chosen!r} (have {', '.join(versions)})",
                model=name,
                version=chosen,
            )
        return ModelVersion(name, chosen, self.root / name / chosen, config)

    def _incomplete(self, name: str) -> str:
        """Why the version folders there are not complete, for the message that none is:
        `model 'x' has no complete version folder` sent an empty model.onnx's owner looking."""
        base = self.root / name
        folders = sorted(
            (d for d in base.iterdir() if d.is_dir() and not d.name.startswith(".")),
            key=lambda d: _version_key(d.name),
        )
        if not folders:
            return f" (no folder in {base})"
        said = [
            f"{d.name}/{MODEL_FILE} is empty"
            if (d / MODEL_FILE).is_file()
            else f"{d.name}/ has no {MODEL_FILE}"
            for d in folders
        ]
        return " (" + "; ".join(said) + ")"


def is_complete(directory: Path, engine_kind: str = "onnxruntime") -> bool:
    """A version folder is complete when its model file exists and is not being written.

    Writers should write `model.onnx` under a temporary name and rename it in; a `READY`
    marker, when present, is trusted. The `sim` engine needs no model file.
    """
    if (directory / READY_MARKER).exists() or engine_kind == "sim":
        return True
    model = directory / MODEL_FILE
    return model.is_file() and model.stat().st_size > 0
