"""Who may use a session: one owner per session, and per-user session ids that cannot collide.

A session records the user it was created for. A call that names a user (``user_id=...``) may
read or write only that user's sessions; any other session, including one created without a
user, is refused with :class:`~harombe_core.errors.SessionOwnershipError` before anything is read
or written. A call to :class:`~harombe_core.manager.MemoryManager` that names no user is the
application's own and is not restricted; the adapters, which act for one user or for nobody,
reach a user's session only on that user's behalf (``exact``).

Adapters that key a conversation by two values, a user and a conversation name, turn them into
one session id with :func:`session_key`. It is injective: both parts have their ``%`` and ``:``
percent-encoded, so the one ``:`` left separates them, and ``("a", "b:c")`` and ``("a:b", "c")``
become ``a:b%3Ac`` and ``a%3Ab:c``. For every pair without ``%`` or ``:`` the id is the plain
``"{user}:{conversation}"`` that earlier versions wrote, so existing databases keep their keys;
:func:`legacy_session_key` names the old form, which
:meth:`~harombe_core.manager.MemoryManager.conversation_session_id` still finds for the few
pairs whose id changed (when that session belongs to the same user).
"""

from __future__ import annotations

from harombe_core.errors import InvalidInputError, SessionOwnershipError

__all__ = [
    "check_owner",
    "check_search_scope",
    "legacy_session_key",
    "session_key",
    "split_session_key",
]


def check_owner(
    session_id: str, owner: str | None, user_id: str | None, *, exact: bool = False
) -> None:
    """Refuse ``user_id`` on a session owned by ``owner`` unless they are the same user.

    A named user must be the owner; a session without an owner belongs to no user (it may hold
    anybody's messages). ``user_id`` None is the application itself and may use any session,
    unless ``exact``: then it reaches only sessions without an owner. Adapters use ``exact``,
    since they act for one user or for nobody, never for the application as a whole.
    """
    if owner != user_id and (user_id is not None or exact):
        raise SessionOwnershipError(session_id, user_id)


def check_search_scope(
    what: str, user_id: str | None, session_id: str | None, all_users: bool
) -> None:
    """Refuse a retriever that would search every user's memory without being told to.

    Adapters' retrievers are built once and then answer whoever is talking; built without a
    user or a session they would hand one user's messages to another, so that needs
    ``all_users=True`` (single-user applications, operators' tools).
    """
    if user_id is None and session_id is None and not all_users:
        raise InvalidInputError(
            f"{what} needs a scope: user_id=... (everything that user said), session_id=... "
            "(one conversation), or all_users=True to search every user's sessions (only for "
            "single-user applications: it returns any user's messages to whoever asks)."
        )


def _part(value: object, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise InvalidInputError(
            f"{what} must be a non-empty str, got {value!r:.80}; a per-user session id needs "
            "both the user and the conversation."
        )
    return value


def _escape(part: str) -> str:
    return part.replace("%", "%25").replace(":", "%3A")


def _unescape(part: str) -> str:
    # Every "%" of an escaped part starts "%25" or "%3A", so the two never overlap.
    return part.replace("%3A", ":").replace("%25", "%")


def session_key(user_id: str, conversation_id: str) -> str:
    """The session id of ``user_id``'s conversation ``conversation_id`` (see the module doc)."""
    user = _escape(_part(user_id, "user_id"))
    return f"{user}:{_escape(_part(conversation_id, 'conversation_id'))}"


def split_session_key(session_id: str) -> tuple[str, str]:
    """``(user_id, conversation_id)`` back from :func:`session_key`'s result."""
    user, sep, conversation = session_id.partition(":")
    if not sep or not user or not conversation or ":" in conversation:
        raise InvalidInputError(f"{session_id!r:.80} is not a per-user session id (user:name).")
    return _unescape(user), _unescape(conversation)


def legacy_session_key(user_id: str, conversation_id: str) -> str:
    """The id earlier versions gave the pair: ``"{user}:{conversation}"``, which collides
    (``("a", "b:c")`` and ``("a:b", "c")``); read only to find existing histories."""
    return f"{user_id}:{conversation_id}"
