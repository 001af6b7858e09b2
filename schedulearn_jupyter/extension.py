"""The API's handlers (`handlers.py`) bound to Jupyter Server: its authentication
(`@web.authenticated` on every method, `@ws_authenticated` on the websocket), its user, the
extension's manager (`SchedulearnApp.manager`, in the settings as `schedulearn_manager`)."""

from __future__ import annotations

from typing import Any

from jupyter_server.auth.decorator import ws_authenticated
from jupyter_server.base.handlers import APIHandler, JupyterHandler
from schedulearn.service import Manager, default_user
from tornado import websocket

from . import handlers


def jupyter_user(handler: JupyterHandler) -> str:
    """The name recorded on jobs. A plain (token or password) Jupyter server has one user, its
    owner: token requests carry only random anonymous identities, so the OS user is taken.
    A server behind an identity provider of its own (JupyterHub) names the real user."""
    provider = getattr(handler, "identity_provider", None)
    if provider is None or type(provider).__module__.startswith("jupyter_server."):
        return default_user()
    user = handler.current_user
    return getattr(user, "username", None) or default_user()


class JupyterApi(handlers.ApiMixin, APIHandler):
    @property
    def manager(self) -> Manager:  # type: ignore[override]
        return self.settings["schedulearn_manager"]

    def user_name(self) -> str:
        return jupyter_user(self)

    def finish_as(self, data: str | bytes, content_type: str) -> Any:
        return self.finish(data, set_content_type=content_type)


class EventsHandler(handlers.EventsMixin, JupyterHandler, websocket.WebSocketHandler):
    @property
    def manager(self) -> Manager:  # type: ignore[override]
        return self.settings["schedulearn_manager"]

    def user_name(self) -> str:
        return jupyter_user(self)

    def set_default_headers(self) -> None:  # JupyterHandler's page headers do not apply
        pass

    async def prepare(self, *args: Any, **kwargs: Any) -> None:  # type: ignore[override]
        await super().prepare(*args, _redirect_to_login=False, **kwargs)

    @ws_authenticated
    async def get(self, *args: Any, **kwargs: Any) -> None:
        res = super().get(*args, **kwargs)
        if res is not None:
            await res


def _bind(mixin: type) -> type:
    return type(mixin.__name__, (mixin, JupyterApi), {"__module__": __name__})


def make_handlers() -> list[tuple[str, type]]:
    """(pattern relative to base_url, handler) for every route of the extension."""
    prefix = handlers.API_PREFIX
    bound: list[tuple[str, type]] = [(f"{prefix}/{path}", _bind(mixin)) for path, mixin in handlers.ROUTES]
    bound.append((f"{prefix}/events", EventsHandler))
    bound.append((f"{prefix}(?:/.*)?", _bind(handlers.NotFoundHandler)))
    return bound
