"""Errors that mean "the user's input was wrong": the CLI prints them as one line, exit code 2."""


class UserError(Exception):
    """Bad input: the message names what was wrong and what to do."""


class LayerscopeWarning(UserWarning):
    """Something was wrong but the command carries on (a damaged cache is ignored): the CLI
    prints it as one line, ``layerscope: warning: ...``."""
