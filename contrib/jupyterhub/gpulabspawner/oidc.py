"""GPULabOIDCAuthenticator: the hub's users log in through the portal's OpenID provider.

Debian packages no oauthenticator, so this is the part of it the hub needs: the authorization
code flow with state, PKCE and nonce against any standard provider (Dex in `make run`), the
user's name taken as the portal takes it (the username claim, else the e-mail's local part), so
that a hub user and a GPULab user are the same person by construction. Tokens are exchanged
server-side over the provider's token endpoint and the identity read from its userinfo
endpoint with the fresh access token, so no ID-token signature needs checking here.

    c.JupyterHub.authenticator_class = "gpulabspawner.oidc.GPULabOIDCAuthenticator"
    c.GPULabOIDCAuthenticator.issuer = "http://127.0.0.1:5556/dex"
    c.GPULabOIDCAuthenticator.client_id = "gpulab-portal"
    c.GPULabOIDCAuthenticator.client_secret_file = "/etc/jupyterhub/oidc-client-secret"
    c.GPULabOIDCAuthenticator.redirect_url = "https://hub.example.org/hub/oauth_callback"
"""

import base64
import hashlib
import json
import re
import secrets
from urllib.parse import urlencode

from jupyterhub.auth import Authenticator
from jupyterhub.handlers import BaseHandler
from jupyterhub.utils import url_path_join
from tornado import web
from tornado.httpclient import AsyncHTTPClient, HTTPRequest
from traitlets import List, Unicode

STATE_COOKIE = "gpulab-oidc-state"


def _b64(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class _OIDCLogin(BaseHandler):
    """Sends the browser to the provider, remembering state, PKCE verifier, nonce and the page
    to come back to in a signed, short-lived cookie."""

    async def get(self):
        auth = self.authenticator
        conf = await auth.discovery()
        state, verifier, nonce = secrets.token_urlsafe(24), secrets.token_urlsafe(48), secrets.token_urlsafe(16)
        next_url = self.get_argument("next", "")
        cookie = json.dumps({"state": state, "verifier": verifier, "nonce": nonce, "next": next_url})
        self.set_secure_cookie(STATE_COOKIE, cookie, expires_days=1 / 144, path=self.hub.base_url, httponly=True)
        challenge = _b64(hashlib.sha256(verifier.encode()).digest())
        q = {
            "response_type": "code", "client_id": auth.client_id, "redirect_uri": auth.redirect_url,
            "scope": " ".join(auth.scopes), "state": state, "nonce": nonce,
            "code_challenge": challenge, "code_challenge_method": "S256",
        }
        self.redirect(conf["authorization_endpoint"] + "?" + urlencode(q))


class _OIDCCallback(BaseHandler):
    """The provider's answer: checks state, trades the code for tokens, reads who it is."""

    async def get(self):
        raw = self.get_secure_cookie(STATE_COOKIE, max_age_days=1 / 144)
        self.clear_cookie(STATE_COOKIE, path=self.hub.base_url)
        if not raw:
            raise web.HTTPError(400, "login expired or started elsewhere: log in again")
        saved = json.loads(raw)
        if self.get_argument("error", ""):
            raise web.HTTPError(403, "the OpenID provider refused: " + self.get_argument("error_description", self.get_argument("error")))
        if not secrets.compare_digest(self.get_argument("state", ""), saved["state"]):
            raise web.HTTPError(400, "login state does not match: log in again")
        user = await self.login_user({"code": self.get_argument("code"), "verifier": saved["verifier"]})
        if user is None:
            raise web.HTTPError(403, "this account may not use the hub")
        self.redirect(local_next(saved.get("next")) or (
            user.url if user.spawner.active else url_path_join(self.hub.base_url, "spawn")))


class GPULabOIDCAuthenticator(Authenticator):
    issuer = Unicode(config=True, help="The OpenID provider's issuer URL (the portal's --oidc-issuer).")
    client_id = Unicode(config=True, help="The client id registered at the provider.")
    client_secret_file = Unicode(config=True, help="File holding the client's secret (never on a command line).")
    redirect_url = Unicode(config=True, help="This hub's callback, https://HUB/hub/oauth_callback, registered at the provider.")
    username_claim = Unicode("preferred_username", config=True,
                             help="Claim holding the user name; without it, the e-mail's local part (as the GPULab portal).")
    scopes = List(Unicode(), ["openid", "email", "profile"], config=True)
    ca_file = Unicode("", config=True, help="CA of the provider's HTTPS certificate (empty: the system's).")

    _discovery = None

    def login_url(self, base_url):
        return url_path_join(base_url, "oidc_login")

    def get_handlers(self, app):
        return [("/oidc_login", _OIDCLogin), ("/oauth_callback", _OIDCCallback)]

    async def _fetch(self, url, **kw):
        resp = await AsyncHTTPClient().fetch(HTTPRequest(url, request_timeout=30, ca_certs=self.ca_file or None, **kw),
                                             raise_error=False)
        if resp.code != 200:
            self.log.warning("OpenID provider: %s answered %s: %s", url, resp.code, (resp.body or b"")[:300])
            raise web.HTTPError(502, "the OpenID provider answered HTTP %s" % resp.code)
        return json.loads(resp.body)

    async def discovery(self):
        if self._discovery is None:
            self._discovery = await self._fetch(self.issuer.rstrip("/") + "/.well-known/openid-configuration")
        return self._discovery

    async def authenticate(self, handler, data):
        conf = await self.discovery()
        with open(self.client_secret_file, encoding="utf-8") as f:
            secret = f.read().strip()
        basic = base64.b64encode(f"{self.client_id}:{secret}".encode()).decode()
        body = urlencode({"grant_type": "authorization_code", "code": data["code"],
                          "redirect_uri": self.redirect_url, "code_verifier": data["verifier"]})
        tokens = await self._fetch(conf["token_endpoint"], method="POST", body=body, headers={
            "Authorization": "Basic " + basic, "Content-Type": "application/x-www-form-urlencoded",
            "Accept": "application/json"})
        info = await self._fetch(conf["userinfo_endpoint"], headers={"Authorization": "Bearer " + tokens["access_token"]})
        name = username_of(info, self.username_claim)
        if not name:
            self.log.warning("OpenID login without a usable name: claims %s", sorted(info))
            return None
        return {"name": name, "auth_state": None}


def local_next(url):
    """The page to return to after login when it is a path on this hub, else "" (no open
    redirect to another site, also not through "//host" or a backslash)."""
    url = url or ""
    if not url.startswith("/") or url.startswith("//") or "\\" in url:
        return ""
    return url


#: GPULab's user names (pki.NamePattern in the master).
_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")


def username_of(claims, claim="preferred_username"):
    """The GPULab user name of an identity, derived as the portal derives it: the claim when
    set, else the e-mail (only when the provider does not say it is unverified), lower-cased and
    cut at an "@"; None when that is not a GPULab user name."""
    name = claims.get(claim) if claim else None
    if not isinstance(name, str) or not name.strip():
        name = claims.get("email") if claims.get("email_verified", True) is not False else None
    name = (name or "").strip().lower().split("@", 1)[0]
    return name if _NAME.match(name) else None
