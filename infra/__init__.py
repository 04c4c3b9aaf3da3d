"""Infrastructure: the embedded broker, Kafka clients and topic provisioning."""
