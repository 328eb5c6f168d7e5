"""Transports the front ends use: the HTTP/1.1 client to pods, the HTTP/2 server of the
gRPC services, TLS credentials and the aiohttp servers' slow-client settings."""
