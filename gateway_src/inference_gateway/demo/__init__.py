"""`igw demo` (`make demo`): the main job on an embedded default, and its report."""
