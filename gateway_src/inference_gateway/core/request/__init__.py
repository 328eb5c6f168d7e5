"""Request control: one request's way from body bytes to a pod and back (director,
lifecycle, admission, retries, usage, SSE rewriting, the answer relay and the global
router's attempt plan), shared by every front end."""
