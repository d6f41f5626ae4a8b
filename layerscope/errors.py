"""Errors that mean "the user's input was wrong": the CLI prints them as one line, exit code 2."""


class UserError(Exception):
    """Bad input: the message names what was wrong and what to do."""
