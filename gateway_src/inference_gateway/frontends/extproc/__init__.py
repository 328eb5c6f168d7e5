"""The Envoy ext_proc endpoint picker (Gateway API Inference Extension protocol)."""
