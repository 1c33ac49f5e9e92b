"""The owner check as a flow over a store: the session, if the user may use it.

Every manager method that takes ``user_id`` next to a session id checks it this way, and so do
the manager's composed parts (its search side and its context builder), each with only the
store in hand. Written as a flow (:mod:`harombe_core.flows`), the check reads the session with
the store's own async runner where it has one (PostgreSQL) and in a worker thread otherwise.
"""

from __future__ import annotations

from harombe_core.flows import Flow, Run
from harombe_core.models import Message, Session
from harombe_core.owners import check_owner
from harombe_core.store import ops
from harombe_core.store.base import MessageStore
from harombe_core.validate import check_flag, check_id, optional_id

__all__ = ["named_owner", "owned_session", "owned_session_and_prompt"]


def owned_session(
    store: MessageStore, session_id: str, user_id: str | None, *, exact: bool = False
) -> Flow[Session | None]:
    """The session (None if it does not exist yet), if ``user_id`` may use it.

    ``user_id=None`` (the application itself) may use any session; a named user only their
    own, so a session owned by another user or by none raises SessionOwnershipError (see
    :mod:`harombe_core.owners`). With ``exact=True`` the owner must be ``user_id`` itself.
    """
    optional_id(user_id, "user_id")
    check_flag(exact, "exact")
    session: Session | None = yield Run(store, ops.get_session(check_id(session_id, "session_id")))
    if session is not None:
        check_owner(session_id, session.user_id, user_id, exact=exact)
    return session


def owned_session_and_prompt(
    store: MessageStore, session_id: str, user_id: str | None
) -> Flow[tuple[Session, list[Message]] | None]:
    """:func:`owned_session` with the session's system prompt as the message that leads its
    history (:func:`~harombe_core.store.ops.session_and_prompt`), read in the same statement:
    a window reads both, then its newest rows, in two store operations."""
    optional_id(user_id, "user_id")
    found: tuple[Session, list[Message]] | None = yield Run(
        store, ops.session_and_prompt(check_id(session_id, "session_id"))
    )
    if found is not None:
        check_owner(session_id, found[0].user_id, user_id)
    return found


def named_owner(store: MessageStore, session_id: str, user_id: str | None) -> Flow[None]:
    """Check the owner only when a user is named (the application may use any session)."""
    if user_id is not None:
        yield from owned_session(store, session_id, user_id)
