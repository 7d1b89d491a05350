"""The course portal (``gpuseat serve``): FastAPI app, templates and static files shipped in the package."""
