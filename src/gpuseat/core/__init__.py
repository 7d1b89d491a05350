"""The functional core: pure, typed code with no I/O (catalog objects in, plans and layouts out)."""
