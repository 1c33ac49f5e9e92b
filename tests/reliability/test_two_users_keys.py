"""Session ids built from (user, conversation): no two pairs share one, and upgrades keep history.

Earlier versions used ``f"{user}:{conversation}"``, so ``("a", "b:c")`` and ``("a:b", "c")``
were one session. Now both parts are escaped (``%`` and ``:``), which leaves every id without
those characters as it was, and ``conversation_session_id`` finds an old-style session whose id
did change, provided it belongs to the same user.
"""

from __future__ import annotations

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from harombe_core.errors import InvalidInputError
from harombe_core.manager import MemoryManager
from harombe_core.models import Message
from harombe_core.owners import legacy_session_key, session_key, split_session_key

# Ids with plenty of the characters that matter ("%", ":", "3A", "25") and anything else.
parts = st.text(alphabet=st.sampled_from("ab:%3A25é x"), min_size=1, max_size=12) | st.text(
    min_size=1, max_size=20
)
plain = st.text(
    alphabet=st.characters(blacklist_characters=":%", blacklist_categories=("Cs",)),
    min_size=1,
    max_size=20,
)


@given(parts, parts, parts, parts)
def test_distinct_pairs_never_share_a_session_id(u1: str, c1: str, u2: str, c2: str) -> None:
    assume((u1, c1) != (u2, c2))
    assert session_key(u1, c1) != session_key(u2, c2)


@given(parts, parts)
def test_the_pair_comes_back_from_its_id(user: str, conversation: str) -> None:
    key = session_key(user, conversation)
    assert key.count(":") == 1
    assert split_session_key(key) == (user, conversation)


@given(plain, plain)
def test_ids_without_colon_or_percent_are_what_earlier_versions_wrote(
    user: str, conversation: str
) -> None:
    assert session_key(user, conversation) == legacy_session_key(user, conversation)


def test_the_colliding_pair_of_the_old_scheme_is_two_sessions() -> None:
    assert legacy_session_key("a", "b:c") == legacy_session_key("a:b", "c") == "a:b:c"
    assert session_key("a", "b:c") == "a:b%3Ac"
    assert session_key("a:b", "c") == "a%3Ab:c"


@pytest.mark.parametrize("bad", [("", "c"), ("u", ""), (None, "c"), ("u", 3)])
def test_both_parts_are_required(bad: tuple[object, object]) -> None:
    with pytest.raises(InvalidInputError, match="non-empty str"):
        session_key(*bad)  # type: ignore[arg-type]
    with MemoryManager(":memory:", embedding=None) as mm, pytest.raises(InvalidInputError):
        mm.conversation_session_id(*bad)  # type: ignore[arg-type]


def test_an_upgraded_database_keeps_every_users_history(db_path: str) -> None:
    # What earlier versions stored: the plain "user:conversation" id, owned by the user.
    with MemoryManager(db_path, embedding=None) as old:
        for user, conversation in (("ann", "c1"), ("ann", "x:y"), ("a:b", "c"), ("50%", "d")):
            old.save_message(
                f"{user}:{conversation}",
                Message(role="user", content=f"{user} said this in {conversation}"),
                user_id=user,
            )
    with MemoryManager(db_path, embedding=None) as mm:
        for user, conversation in (("ann", "c1"), ("ann", "x:y"), ("a:b", "c"), ("50%", "d")):
            sid = mm.conversation_session_id(user, conversation)
            assert sid == f"{user}:{conversation}", "the old session is found and continued"
            assert [m.content for m in mm.get_messages(sid, user_id=user)] == [
                f"{user} said this in {conversation}"
            ]
        # User "a" asking for conversation "b:c" used to land in a:b's session; not any more.
        sid = mm.conversation_session_id("a", "b:c")
        assert sid == "a:b%3Ac"
        assert mm.get_messages(sid, user_id="a") == []
        # A new conversation of a user whose id changed gets the new id.
        assert mm.conversation_session_id("a:b", "new") == "a%3Ab:new"


def test_an_old_id_of_another_user_is_never_taken_over(db_path: str) -> None:
    with MemoryManager(db_path, embedding=None) as mm:
        # "a:b:c" was written for user "a" (conversation "b:c") by an earlier version.
        mm.save_message("a:b:c", Message(role="user", content="a's secret"), user_id="a")
        assert mm.conversation_session_id("a:b", "c") == "a%3Ab:c"
        assert mm.conversation_session_id("a", "b:c") == "a:b:c"
