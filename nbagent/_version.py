"""nbagent's version, in a module of its own so that any layer can read it (saved runs and
reports record it) without importing the package root."""

#: this release of nbagent; saved runs and reports record it
__version__ = "0.1.0"
