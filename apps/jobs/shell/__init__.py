"""Into a running job: sessions opened by the SSH gateway or the job page's terminal and
carried by the job's runner over its own channel (runner.protocol, "shell sessions")."""
