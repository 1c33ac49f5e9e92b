"""``harombe serve``, ``harombe mcp`` and ``harombe keys``: memory as a service.

The commands import the server's dependencies (the ``server`` extra) only when they run, so
``harombe --help`` works without them and a missing extra is one line naming it.
"""

from __future__ import annotations

import errno
import ipaddress
import os
import re
import socket
from typing import Annotated, Literal

import typer
from rich.markup import escape
from rich.table import Table

from harombe_core.cli_app import (
    Command,
    DbOption,
    Group,
    app,
    clean_errors,
    command,
    console,
    err_console,
    open_memory,
    when,
)
from harombe_core.errors import HarombeError, InvalidInputError, MissingExtraError

__all__ = ["AddressUnavailableError", "cors_origin", "is_loopback", "keys_app", "listen"]

keys_app = typer.Typer(
    help="Make, list and revoke the API keys of `harombe serve`.",
    no_args_is_help=True,
    cls=Group,
)
app.add_typer(keys_app, name="keys")


def _need_server(what: str) -> None:
    """MissingExtraError naming the ``server`` extra when its packages are not installed."""
    try:
        import fastapi  # noqa: F401
        import mcp  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as exc:
        raise MissingExtraError(what, "server", exc.name or "fastapi") from exc


def is_loopback(host: str) -> bool:
    """True for a host only this machine can reach (127.0.0.0/8, ::1, localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


#: ``--embedding`` of ``harombe serve`` and ``harombe mcp``. Unset, a server searches by
#: meaning with the bundled model when the ``onnx`` extra is installed (see
#: :func:`server_embedding`); the model loads at the first search or embedding, so start-up
#: costs only the check that its ONNX graph is cached (about 0.3 s measured, imports included).
EmbeddingOption = Annotated[
    str | None,
    typer.Option(
        "--embedding",
        metavar="MODEL",
        help="Search by meaning with this embedder: 'default' (the bundled model; used when "
        "the onnx extra is installed) or 'none' (keyword search only, no model).",
    ),
]
VectorStoreOption = Annotated[
    str,
    typer.Option(
        "--vector-store",
        metavar="NAME",
        help="Where the vectors of search by meaning are kept: database (default), chroma, "
        "pgvector.",
    ),
]


def server_embedding(option: str | None, location: str) -> str | None:
    """The embedder a server opens ``location`` with: ``option`` as given (``none``/``off``:
    keyword search only); unset, the bundled model when it is installed and the database holds
    no vectors of another model, else keyword search. Says on stderr which, and how to change
    it, so an assistant's unexpected miss has an explanation in the server's log.

    Search by meaning is what a user of the memory expects from ``search_memory``; a server
    that quietly searched by keyword found nothing for "which city is home now" where the
    application found "I moved to Lisbon".
    """
    if option is not None:
        return None if option.strip().lower() in ("none", "off", "") else option
    from harombe_core.embeddings.onnx import onnx_available
    from harombe_core.embeddings.sentence_transformers import BUNDLED_NAME, bundled_model_path
    from harombe_core.store import ops
    from harombe_core.vectors.indexer import META_MODEL

    with open_memory(location, create=True) as plain:  # (a new database records none)
        recorded = plain.store.run(ops.get_meta(META_MODEL))
    if recorded is not None and recorded != BUNDLED_NAME:
        err_console.print(
            f"searching by keyword only: the database was indexed with the embedding model "
            f"{escape(recorded)}; pass --embedding with that model to search by meaning.",
            soft_wrap=True,
        )
        return None
    try:
        bundled_model_path()
        if not onnx_available():
            raise MissingExtraError("search by meaning", extra="onnx", module="onnxruntime")
    except MissingExtraError as exc:
        err_console.print(
            f"searching by keyword only: {escape(str(exc))} (--embedding none: keyword search "
            "on purpose, without this line)",
            soft_wrap=True,
        )
        return None
    err_console.print(
        "searching by meaning and keyword (--embedding none: keyword only)", soft_wrap=True
    )
    return "default"


#: ``--log-level`` of ``harombe serve``: uvicorn's levels. ``info`` adds its access log.
LogLevel = Literal["critical", "error", "warning", "info", "debug"]

#: How long ``harombe serve`` lets requests in flight finish after SIGTERM. Without a bound one
#: client that stops sending mid-request kept the server from ever exiting; a request still
#: running then is cut (not acknowledged: its transaction commits whole or not at all), well
#: within the 10 s a container runtime waits before SIGKILL.
SHUTDOWN_SECONDS = 5.0


@command("serve")
def serve_command(
    db: DbOption,
    host: Annotated[str, typer.Option("--host", metavar="HOST", help="Address to bind.")] = (
        "127.0.0.1"
    ),
    port: Annotated[
        int, typer.Option("--port", metavar="PORT", min=0, max=65535, help="Port to bind.")
    ] = 8765,
    no_auth: Annotated[
        bool,
        typer.Option(
            "--no-auth", metavar="", help="Serve without keys, as admin (loopback hosts only)."
        ),
    ] = False,
    cors: Annotated[
        list[str] | None,
        typer.Option("--cors-origin", metavar="ORIGIN", help="Allow this browser origin (CORS)."),
    ] = None,
    embedding: EmbeddingOption = None,
    vector_store: VectorStoreOption = "database",
    shutdown_timeout: Annotated[
        float,
        typer.Option(
            "--shutdown-timeout",
            metavar="SECONDS",
            min=0,
            help="On SIGTERM, how long requests in flight may take before they are cut.",
        ),
    ] = SHUTDOWN_SECONDS,
    max_concurrent_per_key: Annotated[
        int,
        typer.Option(
            "--max-concurrent-per-key",
            metavar="N",
            min=0,
            help="Requests one API key may have in flight at once; more get 429 (0: no cap).",
        ),
    ] = 64,  # api.MAX_CONCURRENT_PER_KEY (not imported here: the CLI stays light)
    log_level: Annotated[
        LogLevel,
        typer.Option(
            "--log-level",
            metavar="LEVEL",
            help="warning (default: problems only), info (a line per request: client, method, "
            "path with its query, status), debug, error or critical.",
        ),
    ] = "warning",
) -> None:
    """Serve memory over HTTP: JSON API (/api, /docs), MCP (/mcp) and inspector (/)."""
    with clean_errors():
        _need_server("harombe serve")
        if not host.strip():
            raise InvalidInputError(
                "--host is empty, which would listen on every interface; pass 127.0.0.1 for "
                "this machine only, or 0.0.0.0 to serve every interface on purpose."
            )
        origins = [cors_origin(origin) for origin in cors or ()]
        if no_auth and not is_loopback(host):
            raise InvalidInputError(
                f"--no-auth serves everyone's memory to anyone who can connect, so it is only "
                f"allowed on a loopback host (127.0.0.1, ::1), not {host!r}. Make keys with "
                "`harombe keys create` instead."
            )
        import uvicorn

        from harombe_core.server.api import create_app

        listener = listen(host, port)  # before anything is created: a busy port changes nothing
        with listener:
            location = db if "://" in db else os.path.expanduser(db)
            with open_memory(location, create=True):
                pass  # the database exists and is migrated before the first request
            embedding = server_embedding(embedding, location)
            application = create_app(
                location,
                auth=not no_auth,
                cors_origins=origins,
                embedding=embedding,
                vector_store=vector_store if embedding else None,
                host=host,
                max_concurrent_per_key=max_concurrent_per_key,
            )
            bound = listener.getsockname()[1]  # the port chosen, for --port 0
            shown = f"[{host}]" if ":" in host else host
            named = location
            if "://" in location:  # a PostgreSQL URL's password stays out of the log
                from harombe_core.store.postgres import redact_url

                named = redact_url(location)
            err_console.print(
                f"harombe serving {escape(named)} on http://{shown}:{bound}", soft_wrap=True
            )
            config = uvicorn.Config(
                application,
                host=host,
                port=bound,
                log_level=log_level,
                timeout_graceful_shutdown=shutdown_timeout,  # type: ignore[arg-type]
            )
            uvicorn.Server(config).run(sockets=[listener])


_ORIGIN = re.compile(r"https?://[^/\s?#]+")


def cors_origin(value: str) -> str:
    """``value`` as a browser sends it in ``Origin`` (``scheme://host[:port]``, no trailing
    slash), or ``*``; InvalidInputError naming ``--cors-origin`` for anything else, which no
    browser's request would ever match (a missing scheme, a path)."""
    origin = value.strip().rstrip("/")
    if origin == "*" or _ORIGIN.fullmatch(origin):
        return origin
    raise InvalidInputError(
        f"--cors-origin {value!r} is not an origin a browser sends: give scheme, host and "
        "port only, like https://app.example or http://localhost:3000 (or * for any site)."
    )


class AddressUnavailableError(HarombeError):
    """``harombe serve`` cannot listen on the ``--host`` and ``--port`` given: the port is taken
    (often by another ``harombe serve``), the address is not this machine's, or the port needs
    privileges."""


def listen(host: str, port: int) -> socket.socket:
    """A socket bound to ``host``:``port`` for the server (AddressUnavailableError naming the
    option to change when it cannot be), made before the database is opened or created."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
    try:
        sock.bind((host.strip("[]"), port))
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            fix = (
                f"port {port} on {host} is already in use (another harombe serve?); stop that "
                "server or pass another --port (--port 0 picks a free one)."
            )
        elif exc.errno == errno.EACCES:
            fix = f"port {port} needs privileges on this machine; pass a --port above 1023."
        else:
            fix = (
                f"cannot listen on {host}:{port} ({exc.strerror}); pass a --host this machine "
                "has (127.0.0.1 for this machine only, 0.0.0.0 for every interface)."
            )
        raise AddressUnavailableError(fix) from exc
    return sock


@command("mcp")
def mcp_command(
    db: DbOption,
    user: Annotated[
        str, typer.Option("--user", metavar="USER", help="Whose memory to serve (required).")
    ],
    embedding: EmbeddingOption = None,
    vector_store: VectorStoreOption = "database",
) -> None:
    """Serve one user's memory to an MCP client over stdio (Claude Desktop, Cursor, agents).

    `search_memory` finds by meaning and keyword with the bundled model (the vectors your
    application's MemoryManager keeps in the database) when the onnx extra is installed;
    `--embedding none` searches by keyword only.
    """
    with clean_errors():
        _need_server("harombe mcp")
        from harombe_core.server.keys import Scope
        from harombe_core.server.mcp_tools import run_stdio
        from harombe_core.validate import check_id

        check_id(user, "--user")
        embedding = server_embedding(embedding, db)
        chosen = vector_store if embedding else None
        with open_memory(db, create=True, embedding=embedding, vector_store=chosen) as manager:
            run_stdio(manager, Scope(user_id=user))


@keys_app.command("create", cls=Command)
def keys_create(
    db: DbOption,
    user: Annotated[
        str | None, typer.Option("--user", metavar="USER", help="The user the key acts for.")
    ] = None,
    admin: Annotated[
        bool, typer.Option("--admin", metavar="", help="A key that reaches every user.")
    ] = False,
    label: Annotated[
        str | None, typer.Option("--label", metavar="TEXT", help="A note to recognise it by.")
    ] = None,
) -> None:
    """Make an API key and print it once on stdout (only its hash is stored)."""
    from harombe_core.server.keys import create_key

    with clean_errors(), open_memory(db, create=True) as manager:
        secret, record = create_key(manager.store, user_id=user, admin=admin, label=label)
        whom = "every user (admin)" if record.admin else f"user {record.user_id}"
        err_console.print(f"key {record.id} for {escape(whom)}; it is shown only this once:")
        typer.echo(secret)


@keys_app.command("list", cls=Command)
def keys_list(
    db: DbOption,
    user: Annotated[
        str | None, typer.Option("--user", metavar="USER", help="Only this user's keys.")
    ] = None,
) -> None:
    """List the keys (their ids, never the keys themselves)."""
    from datetime import UTC, datetime

    from harombe_core.server.keys import list_keys

    with clean_errors(), open_memory(db) as manager:
        table = Table(title="API keys")
        for column in ("id", "user", "label", "created", "state"):
            table.add_column(column)
        for k in list_keys(manager.store, user_id=user):
            table.add_row(
                k.id,
                "(admin)" if k.admin else escape(k.user_id or ""),
                escape(k.label or ""),
                when(datetime.fromtimestamp(k.created_at, UTC)),
                "revoked" if k.revoked else "live",
            )
        console.print(table)


@keys_app.command("revoke", cls=Command)
def keys_revoke(
    key_id: Annotated[str, typer.Argument(metavar="ID", help="The key's id, as listed.")],
    db: DbOption,
) -> None:
    """Stop a key at once, in every server on this database."""
    from harombe_core.server.keys import revoke_key

    with clean_errors(), open_memory(db) as manager:
        if not revoke_key(manager.store, key_id):
            raise InvalidInputError(
                f"no live key {key_id!r}; `harombe keys list` shows the keys and their ids."
            )
        console.print(f"revoked key {escape(key_id)}")
