"""Request control: one request's way from body bytes to a pod and back (director,
lifecycle, admission, retries, usage, SSE rewriting), shared by every front end."""
