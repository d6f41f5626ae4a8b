"""Public name of layerscope's error types (``except layerscope.errors.UserError``).

They live in ``layerscope.core.errors``; modules inside the package import them from there
(tests/test_architecture.py checks that nothing inside imports this alias)."""
from layerscope.core.errors import LayerscopeWarning, UserError, first_line

__all__ = ["UserError", "LayerscopeWarning", "first_line"]
