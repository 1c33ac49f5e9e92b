"""A misspelt keyword to a constructor a user types first names the right spelling.

Python's own ``TypeError`` ("got an unexpected keyword argument 'embeding'") names the wrong
word but not the right one, and LangChain's retriever (a pydantic model that ignores unknown
fields) dropped it silently. Each is now an ``UnknownArgumentError``: an ``InvalidInputError``
like every other bad argument, and still a ``TypeError`` for code that caught Python's.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from harombe_core import ChatMemory, MemoryManager
from harombe_core.errors import InvalidInputError, UnknownArgumentError
from harombe_core.validate import keywords_checked


@pytest.fixture
def manager(tmp_path: Path) -> MemoryManager:
    with MemoryManager(tmp_path / "memory.db", embedding=None) as opened:
        yield opened


def constructors(manager: MemoryManager, tmp_path: Path) -> dict[str, Callable[[], Any]]:
    """Each public constructor called with one misspelt keyword, by the spelling it suggests."""
    langchain = pytest.importorskip("langchain_harombe")
    llamaindex = pytest.importorskip("llamaindex_harombe")
    return {
        "embedding": lambda: MemoryManager(tmp_path / "other.db", embeding=None),
        "session_id": lambda: ChatMemory(manager, sesion_id="a"),
        "user_id": lambda: langchain.HarombeChatMessageHistory(manager, "s", user_ud="u"),
        "max_tokens": lambda: langchain.HarombeMemoryMiddleware(manager, max_token=500),
        "index": lambda: langchain.HarombeStore(manager, indx=None),
        "serde": lambda: langchain.HarombeSaver(manager, serd=None),
        "min_similarity": lambda: langchain.HarombeRetriever(
            manager=manager, user_id="u", min_similarty=0.3
        ),
        "top_k": lambda: llamaindex.HarombeRetriever(manager=manager, user_id="u", topk=3),
    }


@pytest.mark.parametrize(
    "meant",
    [
        "embedding",
        "session_id",
        "user_id",
        "max_tokens",
        "index",
        "serde",
        "min_similarity",
        "top_k",
    ],
)
def test_a_misspelt_keyword_names_the_right_spelling(
    meant: str, manager: MemoryManager, tmp_path: Path
) -> None:
    build = constructors(manager, tmp_path)[meant]
    with pytest.raises(UnknownArgumentError, match=f"did you mean '{meant}'") as caught:
        build()
    assert isinstance(caught.value, InvalidInputError)
    assert isinstance(caught.value, TypeError)  # what Python itself raised before
    assert not (tmp_path / "other.db").exists()  # refused before any work


def test_a_keyword_far_from_every_name_lists_the_arguments(manager: MemoryManager) -> None:
    langchain = pytest.importorskip("langchain_harombe")
    with pytest.raises(UnknownArgumentError, match=r"its arguments: .*max_tokens"):
        langchain.HarombeMemoryMiddleware(manager, budget=500)


def test_a_setting_of_the_manager_given_to_a_component_says_where_it_goes(
    tmp_path: Path,
) -> None:
    """``HarombeMemory.from_defaults(storage_path=..., user_memory=True)``: the component opens
    its own manager, which takes no such setting from it; the error says to open the manager
    with it and pass that, rather than listing the component's own arguments."""
    llamaindex = pytest.importorskip("llamaindex_harombe")
    langchain = pytest.importorskip("langchain_harombe")
    path = tmp_path / "memory.db"
    fix = r"user_memory is a setting of the MemoryManager: open one with MemoryManager\(path, "
    with pytest.raises(UnknownArgumentError, match=fix):
        llamaindex.HarombeMemory.from_defaults(storage_path=path, user_memory=True)
    with pytest.raises(UnknownArgumentError, match=fix):
        langchain.HarombeChatMessageHistory("s", storage_path=path, user_memory=True)
    with pytest.raises(UnknownArgumentError, match="did you mean 'user_memory'"):
        MemoryManager(path, user_memry=True)  # the manager's own: a spelling, as before
    assert not path.exists()


def test_the_langchain_retriever_keeps_its_framework_fields(manager: MemoryManager) -> None:
    langchain = pytest.importorskip("langchain_harombe")
    retriever = langchain.HarombeRetriever(
        manager=manager, user_id="u", k=2, tags=["memory"], metadata={"team": "a"}
    )
    assert (retriever.k, retriever.tags, retriever.metadata) == (2, ["memory"], {"team": "a"})


def test_the_checked_constructor_keeps_its_signature_and_docs() -> None:
    parameters = inspect.signature(MemoryManager).parameters
    assert {"storage_path", "embedding", "max_history_tokens"} <= set(parameters)
    assert MemoryManager.__init__.__doc__ == MemoryManager.__init__.__wrapped__.__doc__


def test_a_function_taking_any_keyword_is_left_as_it_is() -> None:
    def anything(**options: object) -> dict[str, object]:
        return options

    assert keywords_checked(anything) is anything


def test_a_misspelt_keyword_to_a_checked_function_names_its_owner() -> None:
    @keywords_checked
    def connect(host: str, *, port: int = 0) -> tuple[str, int]:
        return host, port

    assert connect("h", port=1) == ("h", 1)
    with pytest.raises(UnknownArgumentError, match=r"^connect got .*'prot'; did you mean 'port'"):
        connect("h", prot=1)  # type: ignore[call-arg]
