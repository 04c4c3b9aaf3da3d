"""Engines: one module per backend behind the `Engine` contract; `create_engine` picks one."""

from schemas.tensors import Arrays
from services.worker.engines.base import Engine, EngineInfo
from services.worker.engines.factory import create_engine

__all__ = ["Arrays", "Engine", "EngineInfo", "create_engine"]
