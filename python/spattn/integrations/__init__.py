"""Integrations of spattn with other libraries (import each submodule on its own)."""
