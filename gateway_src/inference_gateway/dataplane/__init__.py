"""Data planes over the scheduling core: the standalone HTTP proxy (and, later, ext_proc)."""
