"""Request control: one request's way from body bytes to a target and back (director,
the body rules, the refusals and their words, lifecycle, admission, the attempt plan over
pods and clusters, usage, SSE rewriting and the answer relay), shared by every front end."""
