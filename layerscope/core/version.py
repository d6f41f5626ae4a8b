"""The package version: the one place it is written. pyproject.toml reads it from here when the
package is built (``[tool.setuptools.dynamic]``); ``layerscope --version``,
``layerscope.__version__``, the HTML report and every report's ``environment`` import it.
Keep it a plain string literal: setuptools then reads it without importing the package (or
torch). The JSON format's ``schema_version`` is separate (``core.report.SCHEMA_VERSION``)."""
__version__ = "0.4.0"
