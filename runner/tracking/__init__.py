"""Where a job's results go and how a reader finds them: MLflow.

`run` opens one MLflow run per job and logs params, tags, metrics and artifacts through
retried writes; `store` checks and prepares the tracking store (SQLite, a server) before a
job writes to it; `links` builds the MLflow UI addresses printed for a run and a sweep;
`worktree` checks out the commit a gate measures against and orders HEAD's commits for the history. Jobs,
sweeps, the comparison and the doctor log through here; nothing here measures.
"""
