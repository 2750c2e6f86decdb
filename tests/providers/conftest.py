"""Fixtures of the provider tests: a real Slurm cluster for the session
(`slurm_cluster`), and a `slurm` provider on it that placement picks (`slurm_provider`)."""

from tests.providers.slurm_cluster import slurm_cluster, slurm_provider

__all__ = ["slurm_cluster", "slurm_provider"]
