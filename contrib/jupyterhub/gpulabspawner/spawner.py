"""GPULabSpawner: JupyterHub starts each notebook server as an interactive GPULab job.

The hub acts for its users with a GPULab service certificate (gpulab-master service-cert): every
job is submitted, read and cancelled in the name of the hub's user, in one of his projects, and
the master records both identities ("submitted by jupyterhub for alice").

Lifecycle, mapped onto the Spawner contract:
  start()  submits an interactive job named JupyterHub-singleuser and waits for RUNNING; it
           returns the slave's host and the port the slave published for the notebook port. A
           job that cannot start now fails at once (interactive), and start() raises with the
           master's reason, which the hub shows on the spawn page.
  poll()   None while the job is queued, starting or running; its exit status once it ended
           (a job halted or cancelled by GPULab is a stopped server in the hub).
  stop()   cancels the job and waits until it has ended.
  get_state()/load_state() keep the job's UUID, so a restarted hub finds its running notebooks.
"""

import asyncio
import html
import re

from jupyterhub.spawner import Spawner
from sqlalchemy.orm import object_session
from traitlets import Bool, Dict, Float, Integer, List, Unicode, default

from .master import FINAL_STATES, Master, MasterError, end_reason, ssl_context, status_of

#: The name GPULab gives (and shows to everyone) to the jobs of JupyterHub.
JOB_NAME = "JupyterHub-singleuser"

#: Rough progress per state, for the hub's progress bar.
_PROGRESS = {"QUEUED": 20, "ONHOLD": 20, "ASSIGNED": 40, "STARTING": 60, "RUNNING": 90}

_STATE_TEXT = {
    "QUEUED": "queued: waiting for free resources",
    "ONHOLD": "on hold",
    "ASSIGNED": "assigned to slave {slave}",
    "STARTING": "starting on {slave} (pulling the image, creating the container)",
    "RUNNING": "running on {slave}; waiting for the notebook server to answer",
}

#: The keys of user_options (the form's fields; the same names in the hub's REST API).
OPTION_KEYS = ("project", "image", "gpus", "cpus", "memory_gb", "gpu_model", "max_duration", "reservation")

_GPU_MODEL = re.compile(r"^[A-Za-z0-9 _.+-]{1,64}$")
_RESERVATION = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


class SpawnError(RuntimeError):
    """A notebook job that GPULab refused or ended before it ran. jupyterhub_message is what the
    hub's spawn page shows the user (instead of a bare "Spawn failed")."""

    def __init__(self, message):
        super().__init__(message)
        self.jupyterhub_message = message


class GPULabSpawner(Spawner):
    """Spawns single-user notebook servers as GPULab jobs."""

    # --- the master and the service identity -------------------------------------------------
    master_url = Unicode(
        "https://localhost:8443", config=True,
        help="The GPULab master's URL (https://host:port; a path up to /api is accepted).")
    ca_file = Unicode(
        "", config=True, help="PEM file of the master's CA (empty: the system's trust store).")
    cert_file = Unicode(
        "", config=True,
        help="The service certificate (gpulab-master service-cert): certificate, and key unless key_file is set.")
    key_file = Unicode("", config=True, help="The service certificate's key, when not in cert_file.")
    request_timeout = Float(30.0, config=True, help="Seconds one call to the master may take.")
    job_poll_interval = Float(1.0, config=True, help="Seconds between reads of the job while it starts.")
    stop_wait = Float(60.0, config=True, help="Seconds stop() waits for the cancelled job to end.")

    # --- what a notebook job asks for ---------------------------------------------------------
    default_project = Unicode(
        "", config=True,
        help="Project of the notebook jobs when the user does not pick one (empty: the master's "
             "default, which needs the user to be in exactly one project).")
    images = List(
        Unicode(), ["gpulab-notebook:latest"], config=True,
        help="Images a user may pick; the first is the default. Any Jupyter docker-stacks image works.")
    cluster_id = Integer(0, config=True, help="Cluster of the notebook jobs (0: any).")
    default_gpus = Integer(1, config=True)
    max_gpus = Integer(8, config=True)
    default_cpus = Integer(2, config=True)
    max_cpus = Integer(32, config=True)
    default_memory_gb = Integer(8, config=True)
    max_memory_gb = Integer(256, config=True)
    gpu_models = List(
        Unicode(), [], config=True,
        help="GPU models offered in the form (empty: a free text field; the master checks it).")
    max_duration = Unicode(
        "8 hours", config=True,
        help="Default maxDuration of a notebook job (GPULab's duration syntax); the user may ask less.")
    notebook_port = Integer(8888, config=True, help="Port the notebook server listens on in the container.")
    project_share = Unicode(
        "/project", config=True,
        help="Where the project's share is mounted in the container (empty: not mounted).")
    project_gid_variable = Unicode(
        "NB_GID", config=True, help="Environment variable that gets the project's group id (what Jupyter images read).")
    slave_hosts = Dict(
        {}, config=True,
        help="Host the hub's proxy uses for a slave, by the slave host GPULab reports (default: that host).")
    idle_timeout = Integer(
        0, config=True,
        help="Seconds without activity after which the notebook server stops itself, which ends the "
             "job and frees its GPUs (0: never). Works without the jupyterhub-idle-culler service.")
    extra_environment = Dict({}, config=True, help="More environment variables for every notebook job.")
    show_options_form = Bool(True, config=True, help="Offer the form with project, image and resources.")

    # --- state --------------------------------------------------------------------------------
    job_id = Unicode("")

    @default("start_timeout")
    def _start_timeout(self):
        # Pulling a notebook image (GBs) onto a slave takes longer than the hub's 60 s default.
        return 600

    @default("http_timeout")
    def _http_timeout(self):
        return 120

    @default("poll_interval")
    def _poll_interval(self):
        return 10

    @default("ip")
    def _ip(self):
        # Inside the container the server listens on every address; the slave publishes it.
        return "0.0.0.0"

    @default("port")
    def _port(self):
        return self.notebook_port

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._progress_events = []
        self._master = None

    # --- the master ---------------------------------------------------------------------------
    @property
    def master(self):
        if self._master is None:
            ctx = ssl_context(self.ca_file, self.cert_file, self.key_file or None)
            self._master = Master(self.master_url, ctx, self.user.name, timeout=self.request_timeout)
        return self._master

    # --- state across hub restarts ------------------------------------------------------------
    def get_state(self):
        state = super().get_state()
        if self.job_id:
            state["job_id"] = self.job_id
        return state

    def load_state(self, state):
        super().load_state(state)
        self.job_id = state.get("job_id", "")

    def clear_state(self):
        super().clear_state()
        self.job_id = ""

    # --- the form -----------------------------------------------------------------------------
    @default("options_form")
    def _options_form(self):
        if not self.show_options_form:
            return ""
        return self._render_form

    def _render_form(self, spawner):
        """The spawn form: project, image, resources, GPU model, duration and reservation."""
        e = html.escape
        images = "".join(
            f'<option value="{e(i)}"{" selected" if n == 0 else ""}>{e(i)}</option>'
            for n, i in enumerate(self.images))
        if self.gpu_models:
            opts = '<option value="">any</option>' + "".join(
                f'<option value="{e(m)}">{e(m)}</option>' for m in self.gpu_models)
            gpu_model = f'<select class="form-control" name="gpu_model" id="gpulab-gpu-model">{opts}</select>'
        else:
            gpu_model = ('<input class="form-control" name="gpu_model" id="gpulab-gpu-model" '
                         'placeholder="any (e.g. V100)" maxlength="64">')
        return f"""
<div class="form-group"><label for="gpulab-project">GPULab project</label>
  <input class="form-control" name="project" id="gpulab-project" value="{e(self.default_project)}"
         placeholder="your project's name" maxlength="128"></div>
<div class="form-group"><label for="gpulab-image">Image</label>
  <select class="form-control" name="image" id="gpulab-image">{images}</select></div>
<div class="form-group"><label for="gpulab-gpus">GPUs</label>
  <input class="form-control" type="number" name="gpus" id="gpulab-gpus" min="0" max="{self.max_gpus}" value="{self.default_gpus}"></div>
<div class="form-group"><label for="gpulab-cpus">CPUs</label>
  <input class="form-control" type="number" name="cpus" id="gpulab-cpus" min="1" max="{self.max_cpus}" value="{self.default_cpus}"></div>
<div class="form-group"><label for="gpulab-memory">Memory (GB)</label>
  <input class="form-control" type="number" name="memory_gb" id="gpulab-memory" min="1" max="{self.max_memory_gb}" value="{self.default_memory_gb}"></div>
<div class="form-group"><label for="gpulab-gpu-model">GPU model</label>
  {gpu_model}</div>
<div class="form-group"><label for="gpulab-duration">Maximum duration</label>
  <input class="form-control" name="max_duration" id="gpulab-duration" value="{e(self.max_duration)}" maxlength="64"></div>
<div class="form-group"><label for="gpulab-reservation">Reservation ID (optional)</label>
  <input class="form-control" name="reservation" id="gpulab-reservation" maxlength="64"></div>
"""

    def options_from_form(self, formdata):
        """The user's choices, checked for shape here; the master checks the rest (and says so
        in its own words when start() submits)."""
        return parse_options(formdata, self)

    def validate_user_options(self):
        """Unknown keys in REST user_options are refused by name rather than ignored."""
        unknown = sorted(set(self.user_options or {}) - set(OPTION_KEYS))
        if unknown:
            raise SpawnError(f"invalid notebook options: unknown key {unknown[0]!r} (known: {', '.join(OPTION_KEYS)})")

    # --- the job ------------------------------------------------------------------------------
    def job_request(self):
        """The GPULab job (v2) of this notebook server. user_options come from the form
        (options_from_form) or as JSON from the hub's REST API: both are checked here."""
        try:
            o = parse_options(self.user_options or {}, self)
        except ValueError as e:
            raise SpawnError(f"invalid notebook options: {e}") from None
        env = dict(self.extra_environment)
        env.update(self.get_env())
        # JupyterHub 3 still sets the deprecated twin of the API token; one copy is enough.
        env.pop("JPY_API_TOKEN", None)
        cmd = list(self.cmd or []) + list(self.get_args() or [])
        if self.idle_timeout > 0:
            t = int(self.idle_timeout)
            cmd += [f"--NotebookApp.shutdown_no_activity_timeout={t}",
                    f"--ServerApp.shutdown_no_activity_timeout={t}",
                    f"--MappingKernelManager.cull_idle_timeout={t}"]
        docker = {
            "image": o.get("image") or self.images[0],
            "environment": env,
            "portMappings": [{"containerPort": self.notebook_port}],
        }
        if cmd:
            docker["command"] = cmd
        if self.project_share:
            docker["storage"] = [{"hostPath": "PROJECT_SHARE_AUTO", "containerPath": self.project_share}]
        if self.project_gid_variable:
            docker["projectGidVariableName"] = self.project_gid_variable
        resources = {
            "gpus": o.get("gpus", self.default_gpus),
            "cpus": o.get("cpus", self.default_cpus),
            "cpuMemoryGb": o.get("memory_gb", self.default_memory_gb),
        }
        if o.get("gpu_model"):
            resources["gpuModel"] = [o["gpu_model"]]
        if self.cluster_id:
            resources["clusterId"] = self.cluster_id
        scheduling = {"interactive": True, "maxDuration": o.get("max_duration") or self.max_duration}
        if o.get("reservation"):
            scheduling["reservationIds"] = [o["reservation"]]
        req = {
            "name": JOB_NAME,
            "description": f"JupyterHub notebook server of {self.user.name}"
                           + (f" ({self.name})" if self.name else ""),
            "request": {"resources": resources, "docker": docker, "scheduling": scheduling},
        }
        project = o.get("project") or self.default_project
        if project:
            req["owner"] = {"projectUrn": project}
        return req

    def _note(self, status, job):
        """Records a progress event for a new state of the job."""
        if self._progress_events and self._progress_events[-1]["status"] == status:
            return
        res = ((job or {}).get("state") or {}).get("resources") or {}
        sched = ((job or {}).get("state") or {}).get("scheduling") or {}
        slave = res.get("slaveName") or sched.get("assignedSlaveName") or "a slave"
        text = _STATE_TEXT.get(status, status.lower()).format(slave=slave)
        if status == "QUEUED" and sched.get("queuedExplanations"):
            text += " (" + "; ".join(sched["queuedExplanations"][:2]) + ")"
        self._progress_events.append({
            "status": status,
            "progress": _PROGRESS.get(status, 50),
            "message": f"GPULab job {self.job_id[:8]}: {text}",
        })

    async def start(self):
        self._progress_events = []
        self.job_id = ""
        self.validate_user_options()
        req = self.job_request()
        try:
            job = await self.master.submit(req)
        except MasterError as e:
            raise SpawnError(f"GPULab refused the notebook job: {e}") from e
        self.job_id = job["uuid"]
        self.log.info("GPULab job %s submitted for %s", self.job_id, self.user.name)
        # Kept at once: a hub that stops while the job starts finds it again.
        await self._save()
        while True:
            status = status_of(job)
            self._note(status, job)
            if status == "RUNNING":
                return self._address(job)
            if status in FINAL_STATES:
                reason = await end_reason(self.master, self.job_id, job)
                raise SpawnError(f"GPULab job {self.job_id} {status.lower()}: {reason}")
            await asyncio.sleep(self.job_poll_interval)
            job = await self.master.job(self.job_id)

    async def _save(self):
        """Stores the spawner's state in the hub's database now, not only after start()."""
        orm = getattr(self, "orm_spawner", None)
        db = object_session(orm) if orm is not None else None
        if db is None:
            return
        try:
            orm.state = self.get_state()
            db.commit()
        except Exception:  # the hub saves it again after start(); losing this copy is not fatal
            self.log.exception("could not save the state of %s early", self._log_name)

    def _address(self, job):
        """The (host, port) where the hub's proxy reaches the notebook: the slave's host and the
        port it published for the notebook port."""
        res = (job.get("state") or {}).get("resources") or {}
        host = res.get("slaveHost") or res.get("slaveName")
        port = 0
        for pm in res.get("portMappings") or []:
            if pm.get("containerPort") == self.notebook_port:
                port = pm.get("hostPort") or 0
        if not host or not port:
            raise RuntimeError(f"GPULab job {self.job_id} runs but reports no address for port {self.notebook_port}")
        return self.slave_hosts.get(host, host), int(port)

    async def progress(self):
        sent = 0
        while True:
            while sent < len(self._progress_events):
                ev = self._progress_events[sent]
                sent += 1
                yield {"progress": ev["progress"], "message": ev["message"]}
            await asyncio.sleep(0.5)

    async def poll(self):
        if not self.job_id:
            return 0
        try:
            job = await self.master.job(self.job_id)
        except MasterError as e:
            if e.status == 404:
                return 0
            # The master cannot be asked now: the server is presumed alive rather than lost.
            self.log.warning("cannot read GPULab job %s: %s", self.job_id, e)
            return None
        status = status_of(job)
        if status not in FINAL_STATES:
            return None
        res = (job.get("state") or {}).get("resources") or {}
        code = res.get("exitCode")
        if code is None:
            code = 0 if status in ("FINISHED", "CANCELLED", "HALTED") else 1
        return int(code)

    async def stop(self, now=False):
        if not self.job_id:
            return
        try:
            await self.master.cancel(self.job_id)
        except MasterError as e:
            if e.status == 404:
                return
            raise
        if now:
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.stop_wait
        while loop.time() < deadline:
            try:
                job = await self.master.job(self.job_id)
            except MasterError as e:
                if e.status == 404:
                    return
                raise
            if status_of(job) in FINAL_STATES:
                return
            await asyncio.sleep(self.job_poll_interval)
        self.log.warning("GPULab job %s has not ended %.0f s after cancel", self.job_id, self.stop_wait)


def _one(formdata, key):
    """One value of the form (a list of strings) or of REST user_options (plain values)."""
    v = formdata.get(key)
    if isinstance(v, list):
        v = v[0] if v else ""
    if v is None or isinstance(v, (dict, list)):
        return ""
    return str(v).strip()


def _int(formdata, key, label, lo, hi, default):
    text = _one(formdata, key)
    if text == "":
        return default
    try:
        n = int(text)
    except ValueError:
        raise ValueError(f"{label} must be a whole number, not {text!r}") from None
    if not lo <= n <= hi:
        raise ValueError(f"{label} must be between {lo} and {hi}, not {n}")
    return n


def parse_options(formdata, spawner):
    """The spawn form's choices as user_options; ValueError names the field that is wrong."""
    image = _one(formdata, "image") or spawner.images[0]
    if image not in spawner.images:
        raise ValueError(f"image {image!r} is not one of the offered images")
    opts = {
        "image": image,
        "gpus": _int(formdata, "gpus", "GPUs", 0, spawner.max_gpus, spawner.default_gpus),
        "cpus": _int(formdata, "cpus", "CPUs", 1, spawner.max_cpus, spawner.default_cpus),
        "memory_gb": _int(formdata, "memory_gb", "Memory (GB)", 1, spawner.max_memory_gb, spawner.default_memory_gb),
    }
    project = _one(formdata, "project")
    if project:
        if len(project) > 128 or any(c.isspace() for c in project):
            raise ValueError(f"project {project[:40]!r} is not a project name")
        opts["project"] = project
    model = _one(formdata, "gpu_model")
    if model:
        if spawner.gpu_models and model not in spawner.gpu_models:
            raise ValueError(f"GPU model {model!r} is not one of the offered models")
        if not _GPU_MODEL.match(model):
            raise ValueError(f"GPU model {model[:40]!r} has characters a model name does not have")
        opts["gpu_model"] = model
    duration = _one(formdata, "max_duration")
    if duration:
        if len(duration) > 64:
            raise ValueError("maximum duration is longer than 64 characters")
        opts["max_duration"] = duration
    reservation = _one(formdata, "reservation")
    if reservation:
        if not _RESERVATION.match(reservation):
            raise ValueError(f"reservation ID {reservation[:40]!r} is not a reservation ID")
        opts["reservation"] = reservation
    return opts


__all__ = ["GPULabSpawner", "JOB_NAME", "SpawnError", "parse_options"]
