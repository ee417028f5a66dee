"""The pipeline server, its Python client and the web console."""
