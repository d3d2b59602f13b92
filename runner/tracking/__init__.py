"""Where a job's results go and how a reader finds them: MLflow. Nothing here measures.

`run`: a job's run and its retried writes; `store`: the store, checked and prepared before a job writes;
`links`: the UI addresses printed for a run and a sweep; `worktree`: a commit's checkout for the gate.
"""
