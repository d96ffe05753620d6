"""A Starlette application under samprof.asgi.DebugMiddleware, for uvicorn.

/items/{n} answers "item n" after an await. Environment:
SAMPROF_TEST_IDE_PORT, where the IDE listens.
"""

from __future__ import annotations

import asyncio
import os

from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

import samprof.asgi


async def item_handler(request):
    n = int(request.path_params["n"])
    await asyncio.sleep(0)
    return PlainTextResponse(f"item {n}\n")


app = samprof.asgi.DebugMiddleware(
    Starlette(routes=[Route("/items/{n}", item_handler)]),
    enabled=True,
    port=int(os.environ["SAMPROF_TEST_IDE_PORT"]),
)
