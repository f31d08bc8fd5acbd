"""The UI's pages: each has ``layout()`` and ``register(app, store)``."""
