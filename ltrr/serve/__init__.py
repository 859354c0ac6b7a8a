"""Serve the routed RAG system over an OpenAI-compatible HTTP API (``pip install 'ltrr[serve]'``).

`RoutedRAG` loads the routers, the pool and the generator once; `create_app` is the FastAPI app
over it; `serve` runs it under uvicorn (``ltrr serve MODEL_DIR``). FastAPI and uvicorn are
imported only when a server is made.
"""

from __future__ import annotations

from ltrr.serve.app import ServeSettings, create_app
from ltrr.serve.service import RoutedRAG

__all__ = ["RoutedRAG", "ServeSettings", "check_address", "create_app", "serve"]


def check_address(host: str, port: int) -> None:
    """Raise `ConfigError` unless a server can listen on ``host:port`` now (port 0: any free one).

    Checked before the models load: uvicorn reports a port in use or a bad host in its own log
    and exits after the loading, and a port outside 0-65535 ends in a traceback.
    """
    import socket

    from ltrr._checks import check_int
    from ltrr._errors import ConfigError

    check_int(port, "serve port", low=0, high=65535)
    try:
        family, kind, proto, _, addr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        with socket.socket(family, kind, proto) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
            sock.bind(addr)
    except OSError as exc:  # socket.gaierror included
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None


def serve(model_dir, *, host: str = "127.0.0.1", port: int = 8000, settings: ServeSettings | None = None,
          generator=None, template: str | None = None, packing=None) -> None:
    """Load the model folder and serve it until interrupted."""
    from ltrr._errors import MissingDependencyError

    try:
        import fastapi  # noqa: F401
        import uvicorn
    except ImportError:
        raise MissingDependencyError("ltrr serve needs FastAPI and uvicorn: pip install 'ltrr[serve]'") from None
    check_address(host, port)
    service = RoutedRAG(model_dir, generator=generator, template=template, packing=packing)
    service.warm()  # the first request must not pay for loading the models
    app = create_app(service, settings)
    uvicorn.run(app, host=host, port=port, log_level="warning")
