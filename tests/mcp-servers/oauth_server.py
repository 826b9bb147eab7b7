#!/usr/bin/env python3
"""An MCP server behind OAuth 2.1, on the official MCP Python SDK (`mcp`, pinned in
requirements.txt), for the car-connectors OAuth tests.

It serves Streamable HTTP at /mcp and is its own authorization server, all from the SDK's
`mcp.server.auth`: protected resource metadata (RFC 9728) at
/.well-known/oauth-protected-resource/mcp, authorization server metadata (RFC 8414),
dynamic client registration (RFC 7591), /authorize with PKCE, /token (code and refresh
grants), /revoke; bearer tokens are checked by the SDK's middleware, which also refuses
a token not issued for this resource (RFC 8707, `validate_token_resource`).

The provider below only stores things in memory and approves every request at once: its
`authorize` answers with the redirect to the client's redirect_uri carrying `code` and
`state`, so a test reads them off the `Location` header. A refresh rotates both tokens and
revokes the old ones.

Tools: `whoami` (the client id of the bearer token) and `echo`.

    python oauth_server.py [--port 0] [--access-token-ttl SECS] [--registration open|off|reject]
                           [--no-auth] [--exit-with-stdin]

It binds 127.0.0.1 (port 0: an ephemeral one) and prints its MCP URL, e.g.
`http://127.0.0.1:41234/mcp`, as the first line of stdout once it is listening. With
`--no-auth` it is a plain MCP server that publishes no OAuth metadata; `--registration off`
publishes no registration endpoint and `--registration reject` refuses every registration
(400 `invalid_client_metadata`); with `--exit-with-stdin` it exits when its stdin closes
(its parent died).
"""

import argparse
import asyncio
import os
import secrets
import socket
import sys
import threading
import time

import uvicorn
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    RefreshToken,
    RegistrationError,
    TokenError,
    construct_redirect_uri,
)
from mcp.server.auth.settings import AuthSettings, ClientRegistrationOptions, RevocationOptions
from mcp.server.fastmcp import FastMCP
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken

SCOPE = "user"


class AutoApproveProvider:
    """An in-memory `OAuthAuthorizationServerProvider` that approves every request."""

    def __init__(self, access_token_ttl: int, reject_registration: bool):
        self.access_token_ttl = access_token_ttl
        self.reject_registration = reject_registration
        self.clients: dict[str, OAuthClientInformationFull] = {}
        self.codes: dict[str, AuthorizationCode] = {}
        self.access_tokens: dict[str, AccessToken] = {}
        self.refresh_tokens: dict[str, RefreshToken] = {}
        # refresh token -> the access token issued with it
        self.access_of_refresh: dict[str, str] = {}

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        return self.clients.get(client_id)

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        if self.reject_registration:
            raise RegistrationError("invalid_client_metadata", "this server registers no clients")
        self.clients[client_info.client_id] = client_info

    async def authorize(self, client: OAuthClientInformationFull, params: AuthorizationParams) -> str:
        code = secrets.token_urlsafe(32)
        self.codes[code] = AuthorizationCode(
            code=code,
            scopes=params.scopes or [],
            expires_at=time.time() + 300,
            client_id=client.client_id,
            code_challenge=params.code_challenge,
            redirect_uri=params.redirect_uri,
            redirect_uri_provided_explicitly=params.redirect_uri_provided_explicitly,
            resource=params.resource,
        )
        return construct_redirect_uri(str(params.redirect_uri), code=code, state=params.state)

    async def load_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: str
    ) -> AuthorizationCode | None:
        code = self.codes.get(authorization_code)
        return code if code and code.client_id == client.client_id else None

    async def exchange_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: AuthorizationCode
    ) -> OAuthToken:
        if self.codes.pop(authorization_code.code, None) is None:
            raise TokenError("invalid_grant", "authorization code already used")
        return self._issue(client.client_id, authorization_code.scopes, authorization_code.resource)

    async def load_refresh_token(self, client: OAuthClientInformationFull, refresh_token: str) -> RefreshToken | None:
        token = self.refresh_tokens.get(refresh_token)
        return token if token and token.client_id == client.client_id else None

    async def exchange_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: RefreshToken, scopes: list[str]
    ) -> OAuthToken:
        self._revoke_refresh(refresh_token.token)
        return self._issue(client.client_id, scopes, refresh_token.resource)

    async def load_access_token(self, token: str) -> AccessToken | None:
        access = self.access_tokens.get(token)
        if access and access.expires_at is not None and access.expires_at < time.time():
            del self.access_tokens[token]
            return None
        return access

    async def revoke_token(self, token: AccessToken | RefreshToken) -> None:
        if isinstance(token, RefreshToken):
            self._revoke_refresh(token.token)
        else:
            self.access_tokens.pop(token.token, None)

    def _revoke_refresh(self, refresh: str) -> None:
        self.refresh_tokens.pop(refresh, None)
        self.access_tokens.pop(self.access_of_refresh.pop(refresh, ""), None)

    def _issue(self, client_id: str, scopes: list[str], resource: str | None) -> OAuthToken:
        access = secrets.token_urlsafe(32)
        refresh = secrets.token_urlsafe(32)
        expires_at = int(time.time()) + self.access_token_ttl
        self.access_tokens[access] = AccessToken(
            token=access, client_id=client_id, scopes=scopes, expires_at=expires_at, resource=resource
        )
        self.refresh_tokens[refresh] = RefreshToken(
            token=refresh, client_id=client_id, scopes=scopes, resource=resource
        )
        self.access_of_refresh[refresh] = access
        return OAuthToken(
            access_token=access,
            token_type="Bearer",
            expires_in=self.access_token_ttl,
            scope=" ".join(scopes),
            refresh_token=refresh,
        )


def build(port: int, no_auth: bool, access_token_ttl: int, registration: str) -> FastMCP:
    origin = f"http://127.0.0.1:{port}"
    if no_auth:
        mcp = FastMCP("car-test-no-oauth", host="127.0.0.1", port=port, log_level="WARNING")
    else:
        mcp = FastMCP(
            "car-test-oauth",
            host="127.0.0.1",
            port=port,
            log_level="WARNING",
            auth_server_provider=AutoApproveProvider(access_token_ttl, registration == "reject"),
            auth=AuthSettings(
                issuer_url=origin,
                resource_server_url=f"{origin}/mcp",
                validate_token_resource=True,
                required_scopes=[SCOPE],
                client_registration_options=ClientRegistrationOptions(
                    enabled=registration != "off", valid_scopes=[SCOPE], default_scopes=[SCOPE]
                ),
                revocation_options=RevocationOptions(enabled=True),
            ),
        )

    @mcp.tool()
    def whoami() -> str:
        """The OAuth client id the bearer token was issued to."""
        token = get_access_token()
        return token.client_id if token else "anonymous"

    @mcp.tool()
    def echo(text: str) -> str:
        """Returns its input."""
        return text

    return mcp


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0: an ephemeral one)")
    parser.add_argument("--access-token-ttl", type=int, default=3600, help="access token lifetime in seconds")
    parser.add_argument(
        "--registration",
        choices=["open", "off", "reject"],
        default="open",
        help="dynamic client registration: open, off (no endpoint), reject (every request)",
    )
    parser.add_argument("--no-auth", action="store_true", help="serve MCP without any OAuth")
    parser.add_argument("--exit-with-stdin", action="store_true", help="exit when stdin closes")
    args = parser.parse_args()

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", args.port))
    sock.listen(128)
    port = sock.getsockname()[1]

    app = build(port, args.no_auth, args.access_token_ttl, args.registration).streamable_http_app()
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))

    if args.exit_with_stdin:

        def watch() -> None:
            sys.stdin.buffer.read()
            os._exit(0)

        threading.Thread(target=watch, daemon=True).start()

    # The socket is listening: connections wait in its backlog until uvicorn accepts them.
    print(f"http://127.0.0.1:{port}/mcp", flush=True)
    asyncio.run(server.serve(sockets=[sock]))


if __name__ == "__main__":
    main()
