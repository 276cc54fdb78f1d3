"""Operations: local settings, the Dagster instance file, child processes, a Prometheus server, crash points and the traffic log."""
