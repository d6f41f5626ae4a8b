"""The package version: one place, below every layer that prints or records it."""
__version__ = "0.1.0"
