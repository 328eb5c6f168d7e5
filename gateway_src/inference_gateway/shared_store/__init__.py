"""The shared store (Redis protocol: Valkey / ElastiCache in AWS, `redis-server` here):
what gateway and router replicas must agree on, with a local fallback when it is away.

    client     one async client per URL (TLS, auth) and the store's health state
    ratelimit  global request/token limits, one atomic script per request
"""
