"""Drop-in integrations with model libraries (``warpgauge.integrations.transformers``)."""
