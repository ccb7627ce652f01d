"""Unit tests of GPULabSpawner against a real GPULab master (no mock of the master).

internal/e2e TestSpawnerAgainstMaster starts a master, a slave on Docker and a service identity
and runs these with:
    GPULAB_TEST_MASTER_URL, GPULAB_TEST_CA, GPULAB_TEST_SERVICE_CERT   the master and the service
    GPULAB_TEST_USER, GPULAB_TEST_PROJECT                            who the hub acts for
    GPULAB_TEST_IMAGE                                                a small image that can sleep
Run alone (python3 -m unittest discover contrib/jupyterhub/tests) only the tests that need no
master run; the others are skipped, and the Go test fails when they are.
"""

import asyncio
import os
import sys
import unittest
from types import SimpleNamespace

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from gpulabspawner import GPULabSpawner  # noqa: E402
from gpulabspawner.oidc import local_next, username_of  # noqa: E402
from gpulabspawner.spawner import SpawnError, parse_options  # noqa: E402

ENV = {k: os.environ.get("GPULAB_TEST_" + k, "") for k in ("MASTER_URL", "CA", "SERVICE_CERT", "USER", "PROJECT", "IMAGE")}
HAVE_MASTER = all(ENV.values())


def spawner(user=None, **kw):
    """A spawner as the hub makes one, with the hub's side reduced to what it reads."""
    name = user or ENV["USER"] or "alice"
    u = SimpleNamespace(name=name, url=f"/user/{name}/", escaped_name=name, progress_url=lambda server_name: "")
    hub = SimpleNamespace(public_host="", api_url="http://127.0.0.1:8081/hub/api/", base_url="/hub/")
    conf = dict(master_url=ENV["MASTER_URL"], ca_file=ENV["CA"], cert_file=ENV["SERVICE_CERT"],
                default_project=ENV["PROJECT"], images=[ENV["IMAGE"] or "gpulab-notebook:latest"],
                cmd=["sleep", "600"], project_share="", job_poll_interval=0.3, default_cpus=1, default_memory_gb=1,
                default_gpus=0)
    conf.update(kw)
    return GPULabSpawner(user=u, hub=hub, api_token="test-api-token", oauth_client_id="jupyterhub-user-" + name, **conf)


def run(coro):
    return asyncio.run(coro)


class FormTests(unittest.TestCase):
    """The spawn form's choices and the job they make: no master needed."""

    def test_form_values_become_options(self):
        sp = spawner(images=["a:1", "b:2"], gpu_models=["V100", "A100"])
        o = sp.options_from_form({"project": ["vision"], "image": ["b:2"], "gpus": ["2"], "cpus": ["4"],
                                  "memory_gb": ["16"], "gpu_model": ["A100"], "max_duration": ["2 hours"],
                                  "reservation": ["r-42"], "code": ["ignored"]})
        self.assertEqual(o, {"project": "vision", "image": "b:2", "gpus": 2, "cpus": 4, "memory_gb": 16,
                             "gpu_model": "A100", "max_duration": "2 hours", "reservation": "r-42"})

    def test_bad_values_name_the_field(self):
        sp = spawner(images=["a:1"], max_gpus=4)
        cases = [({"gpus": ["x"]}, "GPUs must be a whole number"), ({"gpus": ["5"]}, "GPUs must be between 0 and 4"),
                 ({"image": ["evil:latest"]}, "image 'evil:latest' is not one of the offered images"),
                 ({"memory_gb": ["0"]}, "Memory (GB) must be between"), ({"project": ["two words"]}, "is not a project name"),
                 ({"reservation": ["a b"]}, "is not a reservation ID"), ({"gpu_model": ["<script>"]}, "GPU model")]
        for form, want in cases:
            with self.subTest(form=form):
                with self.assertRaises(ValueError) as cm:
                    sp.options_from_form(form)
                self.assertIn(want, str(cm.exception))

    def test_job_request(self):
        sp = spawner(images=["nb:1"], project_share="/project", cluster_id=3, idle_timeout=600)
        sp.user_options = {"project": "vision", "gpus": 1, "gpu_model": "V100", "reservation": "r1"}
        req = sp.job_request()
        self.assertEqual(req["name"], "JupyterHub-singleuser")
        self.assertEqual(req["owner"], {"projectUrn": "vision"})
        r = req["request"]
        self.assertTrue(r["scheduling"]["interactive"])
        self.assertEqual(r["scheduling"]["maxDuration"], "8 hours")
        self.assertEqual(r["scheduling"]["reservationIds"], ["r1"])
        self.assertEqual(r["resources"], {"gpus": 1, "cpus": 1, "cpuMemoryGb": 1, "gpuModel": ["V100"], "clusterId": 3})
        d = r["docker"]
        self.assertEqual(d["portMappings"], [{"containerPort": 8888}])
        self.assertEqual(d["projectGidVariableName"], "NB_GID")
        self.assertEqual(d["storage"], [{"hostPath": "PROJECT_SHARE_AUTO", "containerPath": "/project"}])
        self.assertEqual(d["environment"]["JUPYTERHUB_API_TOKEN"], "test-api-token")
        self.assertEqual(d["environment"]["JUPYTERHUB_SERVICE_URL"], "http://0.0.0.0:8888/")
        self.assertNotIn("JPY_API_TOKEN", d["environment"])
        self.assertIn("--NotebookApp.shutdown_no_activity_timeout=600", d["command"])

    def test_rest_options_are_checked(self):
        sp = spawner()
        sp.user_options = {"gpus": 1, "bogus": True}
        with self.assertRaises(SpawnError) as cm:
            run(sp.start())
        self.assertIn("unknown key 'bogus'", str(cm.exception))
        self.assertEqual(cm.exception.jupyterhub_message, str(cm.exception))

    def test_oidc_names(self):
        self.assertEqual(username_of({"preferred_username": "Alice"}), "alice")
        self.assertEqual(username_of({"email": "Bob@Example.org"}), "bob")
        self.assertIsNone(username_of({"email": "bob@example.org", "email_verified": False}))
        self.assertIsNone(username_of({"preferred_username": "not a name!"}))
        self.assertEqual(local_next("/hub/spawn"), "/hub/spawn")
        for bad in ("//evil.example", "https://evil.example/", "/\\evil", ""):
            self.assertEqual(local_next(bad), "")


@unittest.skipUnless(HAVE_MASTER, "needs a GPULab master (GPULAB_TEST_*; internal/e2e TestSpawnerAgainstMaster)")
class MasterTests(unittest.TestCase):
    """start, poll, stop, state and errors against the real master and slave."""

    def test_lifecycle(self):
        sp = spawner()
        ip, port = run(sp.start())
        self.assertEqual(ip, "127.0.0.1")
        self.assertGreater(port, 0)
        job_id = sp.job_id
        self.assertTrue(job_id)
        statuses = [e["status"] for e in sp._progress_events]
        self.assertEqual(statuses[-1], "RUNNING")
        self.assertIn(f"GPULab job {job_id[:8]}", sp._progress_events[-1]["message"])
        job = run(sp.master.job(job_id))
        self.assertEqual(job["name"], "JupyterHub-singleuser")
        self.assertTrue(job["request"]["scheduling"]["interactive"])
        self.assertTrue(job["owner"]["userUrn"].endswith("+" + ENV["USER"]))
        self.assertEqual(job["request"]["docker"]["environment"]["JUPYTERHUB_API_TOKEN"], "XXXX")
        self.assertIsNone(run(sp.poll()))

        # A restarted hub: a new spawner from the saved state finds the same job running.
        again = spawner()
        again.load_state(sp.get_state())
        self.assertEqual(again.job_id, job_id)
        self.assertIsNone(run(again.poll()))

        run(again.stop())
        self.assertEqual(run(sp.master.job(job_id))["state"]["status"], "CANCELLED")
        self.assertIsNotNone(run(sp.poll()))
        run(again.stop())  # stopping a stopped server is no error
        again.clear_state()
        self.assertEqual(again.get_state().get("job_id"), None)

    def test_master_refusal_is_shown(self):
        sp = spawner(max_gpus=1000)
        sp.user_options = {"gpus": 999}
        with self.assertRaises(SpawnError) as cm:
            run(sp.start())
        self.assertIn("request.resources.gpus", str(cm.exception))

    def test_unknown_user_is_refused(self):
        sp = spawner(user="nobody-here")
        with self.assertRaises(SpawnError) as cm:
            run(sp.start())
        self.assertIn("nobody-here", str(cm.exception))

    def test_poll_of_unknown_job(self):
        sp = spawner()
        sp.load_state({"job_id": "00000000-0000-0000-0000-000000000000"})
        self.assertEqual(run(sp.poll()), 0)
        run(sp.stop())


if __name__ == "__main__":
    unittest.main()
