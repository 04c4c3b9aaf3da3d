"""Actuators: set worker-group replicas on local processes, Kubernetes or docker compose."""

from scaler.actuators.base import Actuator, ActuatorError, parse_group
from scaler.actuators.compose import ComposeActuator
from scaler.actuators.decisions import decision_record, publish_decision
from scaler.actuators.kubernetes import KubernetesActuator
from scaler.actuators.local import LocalActuator

__all__ = [
    "Actuator",
    "ActuatorError",
    "ComposeActuator",
    "KubernetesActuator",
    "LocalActuator",
    "decision_record",
    "parse_group",
    "publish_decision",
]
