"""JupyterHub spawner that starts notebook servers as interactive GPULab jobs.

    c.JupyterHub.spawner_class = "gpulab"          # the entry point, or
    c.JupyterHub.spawner_class = "gpulabspawner.GPULabSpawner"
"""

from .spawner import JOB_NAME, GPULabSpawner

__version__ = "0.1.0"
__all__ = ["GPULabSpawner", "JOB_NAME", "__version__"]
