"""Which pip package a LangChain integration that failed to import comes from.

LangChain names an integration's package after its top-level module with ``_`` written ``-``
(``langchain_openai`` is ``langchain-openai``); the chat CLI and the LangGraph store use this to
tell a user exactly what to install.
"""

from __future__ import annotations

__all__ = ["missing_package", "package_of"]


def package_of(module: str) -> str:
    """The pip package of ``module`` (``langchain_google_vertexai.model_garden`` ->
    ``langchain-google-vertexai``)."""
    return module.split(".", 1)[0].replace("_", "-")


def missing_package(error: ImportError, fallback: str) -> str:
    """The package whose import failed in ``error`` (LangChain re-raises the original
    ModuleNotFoundError as the cause), else ``fallback``."""
    cause = error.__cause__ if isinstance(error.__cause__, ImportError) else error
    return package_of(cause.name or error.name or fallback)
