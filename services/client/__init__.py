"""Clients that submit requests to inferbus and receive their results."""

from services.client.client import InferenceClient, WireRequest
from services.client.sync import SyncInferenceClient

__all__ = ["InferenceClient", "SyncInferenceClient", "WireRequest"]
