"""Serve the routed RAG system over an OpenAI-compatible HTTP API (``pip install 'ltrr[serve]'``).

`RoutedRAG` loads the routers, the pool and the generator once; `create_app` is the FastAPI app
over it; `serve` runs it under uvicorn (``ltrr serve MODEL_DIR``). FastAPI and uvicorn are
imported only when a server is made.
"""

from __future__ import annotations

from ltrr.serve.app import ServeSettings, create_app
from ltrr.serve.service import RoutedRAG

__all__ = ["RoutedRAG", "ServeSettings", "create_app", "serve"]


def serve(model_dir, *, host: str = "127.0.0.1", port: int = 8000, settings: ServeSettings | None = None,
          generator=None, template: str | None = None, packing=None) -> None:
    """Load the model folder and serve it until interrupted."""
    from ltrr._errors import MissingDependencyError

    try:
        import fastapi  # noqa: F401
        import uvicorn
    except ImportError:
        raise MissingDependencyError("ltrr serve needs FastAPI and uvicorn: pip install 'ltrr[serve]'") from None
    service = RoutedRAG(model_dir, generator=generator, template=template, packing=packing)
    service.warm()  # the first request must not pay for loading the models
    app = create_app(service, settings)
    uvicorn.run(app, host=host, port=port, log_level="warning")
