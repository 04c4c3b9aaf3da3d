"""Clients that submit requests to inferbus and receive their results."""

from services.client.client import ClientStopped, InferenceClient, ReplyTopicMissing
from services.client.sync import SyncInferenceClient
from services.client.wire import WireRequest

__all__ = [
    "ClientStopped",
    "InferenceClient",
    "ReplyTopicMissing",
    "SyncInferenceClient",
    "WireRequest",
]
