"""Kubernetes: pod discovery by label selector and the InferenceGatewayConfig status."""
