"""The typed configuration: the InferenceGatewayConfig spec, its reload and its watch."""
