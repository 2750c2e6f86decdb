"""The SSH gateway into running jobs (`manage.py ssh_gateway`): people's OpenSSH clients
connect here; their sessions reach the workload through its runner (apps.jobs.shell)."""
