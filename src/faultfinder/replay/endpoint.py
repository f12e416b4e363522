"""What the proxy and ``serve-local`` share as services on loopback: each answers on its
own :class:`~faultfinder.replay.httpserver.HttpServer`, starts and closes with it, is used
as ``async with``, and gives the URL a program is pointed at."""

from __future__ import annotations

from typing import Self

from faultfinder.replay.httpserver import HttpServer


class Endpoint:
    """A service answering on ``self._server`` (set by the subclass's ``__init__``); a
    subclass holding more (a client) extends :meth:`start` and :meth:`close`."""

    _server: HttpServer

    async def start(self) -> Self:
        await self._server.start()
        return self

    async def close(self) -> None:
        await self._server.close()

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def url(self) -> str:
        """Scheme, host and bound port (``http://127.0.0.1:PORT``)."""
        return self._server.url

    @property
    def base_url(self) -> str:
        """What to put in ``OPENAI_BASE_URL``."""
        return self._server.url + "/v1"
