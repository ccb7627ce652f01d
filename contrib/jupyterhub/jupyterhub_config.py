# JupyterHub configuration for GPULab: every notebook server is an interactive GPULab job.
#
# Used by `make run` (JUPYTERHUB=1, scripts/run.sh) and by the tests (internal/e2e
# TestJupyterHub), read from the environment so one file serves both; an operator copies it and
# writes the values in. Secrets never come on a command line: the hub's own secrets are files.
#
#   GPULAB_MASTER_URL        the master, https://host:port                (required)
#   GPULAB_CA                PEM of the master's CA                       (required)
#   GPULAB_SERVICE_CERT      the hub's service certificate and key (gpulab-master service-cert --name jupyterhub)
#   GPULAB_HUB_DIR           folder for the hub's database, cookie secret and proxy token (default: .)
#   GPULAB_HUB_BIND_URL      where users reach the hub                    (default http://127.0.0.1:8000)
#   GPULAB_HUB_API_BIND      ip:port of the hub's own API, which the notebooks call back (default 0.0.0.0:8081)
#   GPULAB_HUB_CONNECT_URL   how a notebook in its container reaches that API (e.g. http://172.18.0.1:8081)
#   GPULAB_HUB_PROXY_API     ip:port of the proxy's API                   (default 127.0.0.1:8001)
#   GPULAB_HUB_PROJECT       default project of the notebook jobs         (default: the user's only project)
#   GPULAB_HUB_IMAGES        comma-separated images a user may pick       (default gpulab-notebook:latest)
#   GPULAB_HUB_CLUSTER       cluster of the notebook jobs                 (default 0: any)
#   GPULAB_HUB_MAX_DURATION  default maxDuration of a notebook            (default "8 hours")
#   GPULAB_HUB_IDLE_TIMEOUT  seconds without activity before a notebook stops itself (default 3600; 0: never)
#   GPULAB_HUB_POLL_INTERVAL seconds between the hub's checks that each notebook's job still runs (default 10)
#   GPULAB_HUB_OIDC_ISSUER   the portal's OpenID provider: users log in there (gpulabspawner.oidc)
#   GPULAB_HUB_OIDC_CLIENT_ID, GPULAB_HUB_OIDC_CLIENT_SECRET_FILE, GPULAB_HUB_OIDC_REDIRECT_URL
#                            its client (default: gpulab-portal, and <bind url>/hub/oauth_callback)
#   GPULAB_HUB_PASSWORD_FILE without a provider: the shared password of the DummyAuthenticator (demo only)
#   GPULAB_HUB_USERS         comma-separated users allowed to log in (default: anyone who can)
#   GPULAB_HUB_ADMINS        comma-separated admins of the hub
#   GPULAB_HUB_API_TOKEN_FILE a token for scripts (a hub service "gpulab-admin" with admin scopes)
import os
import sys

here = os.path.dirname(os.path.abspath(__file__))
if here not in sys.path:
    sys.path.insert(0, here)  # gpulabspawner without installing it

c = get_config()  # noqa: F821 (JupyterHub defines it)
env = os.environ.get


def read_secret(path):
    with open(path, encoding="utf-8") as f:
        return f.read().strip()


hub_dir = os.path.abspath(env("GPULAB_HUB_DIR", "."))
os.makedirs(hub_dir, mode=0o700, exist_ok=True)

c.JupyterHub.bind_url = env("GPULAB_HUB_BIND_URL", "http://127.0.0.1:8000")
c.JupyterHub.hub_bind_url = "http://" + env("GPULAB_HUB_API_BIND", "0.0.0.0:8081")
if env("GPULAB_HUB_CONNECT_URL"):
    c.JupyterHub.hub_connect_url = env("GPULAB_HUB_CONNECT_URL")
c.ConfigurableHTTPProxy.api_url = "http://" + env("GPULAB_HUB_PROXY_API", "127.0.0.1:8001")
c.JupyterHub.db_url = "sqlite:///" + os.path.join(hub_dir, "jupyterhub.sqlite")
c.JupyterHub.cookie_secret_file = os.path.join(hub_dir, "jupyterhub_cookie_secret")
c.JupyterHub.pid_file = os.path.join(hub_dir, "jupyterhub.pid")
# The proxy outlives a hub restart only if it is not the hub's child; for the demo and the
# tests the hub starts it and a restarted hub starts a new one, while the NOTEBOOKS (GPULab
# jobs) keep running: a hub that stops leaves them alone and finds them again at start.
c.JupyterHub.cleanup_servers = False
c.JupyterHub.cleanup_proxy = True
proxy_token_file = os.path.join(hub_dir, "proxy-token")
if not os.path.exists(proxy_token_file):
    fd = os.open(proxy_token_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(os.urandom(24).hex())
c.ConfigurableHTTPProxy.auth_token = read_secret(proxy_token_file)
# Debian's configurable-http-proxy keeps its modules in /usr/share/nodejs, where a Node.js not
# from Debian (NodeSource's, on this project's machines) does not look by itself.
os.environ["NODE_PATH"] = os.pathsep.join(
    p for p in [os.environ.get("NODE_PATH", ""), "/usr/share/nodejs", "/usr/lib/nodejs"] if p)

# --- who may log in -------------------------------------------------------------------------
# With an OpenID provider (the portal's), the hub's users are GPULab's, named as the portal names
# them; anyone the provider knows may log in, and the master refuses to act for someone it does
# not know. Without one, the demo's DummyAuthenticator with one shared password.
admins = [u.strip() for u in env("GPULAB_HUB_ADMINS", "").split(",") if u.strip()]
users = [u.strip() for u in env("GPULAB_HUB_USERS", "").split(",") if u.strip()]
if env("GPULAB_HUB_OIDC_ISSUER"):
    c.JupyterHub.authenticator_class = "gpulabspawner.oidc.GPULabOIDCAuthenticator"
    c.GPULabOIDCAuthenticator.issuer = env("GPULAB_HUB_OIDC_ISSUER")
    c.GPULabOIDCAuthenticator.client_id = env("GPULAB_HUB_OIDC_CLIENT_ID", "gpulab-portal")
    c.GPULabOIDCAuthenticator.client_secret_file = env("GPULAB_HUB_OIDC_CLIENT_SECRET_FILE", "")
    c.GPULabOIDCAuthenticator.redirect_url = env("GPULAB_HUB_OIDC_REDIRECT_URL",
                                                 c.JupyterHub.bind_url.rstrip("/") + "/hub/oauth_callback")
    c.Authenticator.auto_login = True
else:
    c.JupyterHub.authenticator_class = "dummy"
    if env("GPULAB_HUB_PASSWORD_FILE"):
        c.DummyAuthenticator.password = read_secret(env("GPULAB_HUB_PASSWORD_FILE"))
if users:
    c.Authenticator.allowed_users = set(users)
if admins:
    c.Authenticator.admin_users = set(admins)

# A token for scripts and tests: the hub's REST API with admin scopes.
if env("GPULAB_HUB_API_TOKEN_FILE"):
    c.JupyterHub.services = [{"name": "gpulab-admin", "api_token": read_secret(env("GPULAB_HUB_API_TOKEN_FILE"))}]
    c.JupyterHub.load_roles = [{
        "name": "gpulab-admin",
        "scopes": ["admin:users", "admin:servers", "tokens", "access:servers", "read:users"],
        "services": ["gpulab-admin"],
    }]

# --- the spawner ----------------------------------------------------------------------------
c.JupyterHub.spawner_class = "gpulabspawner.GPULabSpawner"
c.GPULabSpawner.master_url = env("GPULAB_MASTER_URL", "https://localhost:8443")
c.GPULabSpawner.ca_file = env("GPULAB_CA", "")
c.GPULabSpawner.cert_file = env("GPULAB_SERVICE_CERT", "")
c.GPULabSpawner.default_project = env("GPULAB_HUB_PROJECT", "")
c.GPULabSpawner.images = [i.strip() for i in env("GPULAB_HUB_IMAGES", "gpulab-notebook:latest").split(",") if i.strip()]
c.GPULabSpawner.cluster_id = int(env("GPULAB_HUB_CLUSTER", "0"))
c.GPULabSpawner.max_duration = env("GPULAB_HUB_MAX_DURATION", "8 hours")
c.GPULabSpawner.idle_timeout = int(env("GPULAB_HUB_IDLE_TIMEOUT", "3600"))
# How often the hub asks GPULab whether each notebook's job still runs (a job halted or
# cancelled by GPULab shows as a stopped server after at most this long).
c.GPULabSpawner.poll_interval = int(env("GPULAB_HUB_POLL_INTERVAL", "10"))
# One notebook server per user (the master also caps notebook jobs per user:
# gpulab-master serve --max-notebooks-per-user).
c.JupyterHub.allow_named_servers = False
