"""Front ends over the core: the standalone proxy (`igw serve`), the ext_proc picker,
the body-based router and the global router."""
